"""``python -m devstack.ovirt_emulator``: run the oVirt Engine emulator until SIGTERM.

The password comes from the environment (``OVIRT_EMULATOR_PASSWORD``), never from argv.
"""

from __future__ import annotations

import argparse
import os
import signal
import ssl
import sys
import threading

from devstack.ovirt_emulator.engine import Delays, Engine
from devstack.ovirt_emulator.launcher import PASSWORD_ENV
from devstack.ovirt_emulator.server import AdminServer, EngineServer


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="ovirt-emulator", description=__doc__)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True, help="engine (SSO + API) port")
    parser.add_argument("--admin-port", type=int, required=True, help="admin API port")
    parser.add_argument("--username", default="admin@internal")
    parser.add_argument("--tls-cert", help="serve HTTPS with this certificate (PEM)")
    parser.add_argument("--tls-key", help="the certificate's private key (PEM)")
    defaults = Delays()
    for name in vars(defaults):
        parser.add_argument(
            f"--{name.replace('_', '-')}", type=float, default=getattr(defaults, name)
        )
    args = parser.parse_args(argv)

    delays = Delays(**{name: getattr(args, name) for name in vars(defaults)})
    engine = Engine(
        username=args.username,
        password=os.environ.get(PASSWORD_ENV, "engine-password"),
        delays=delays,
    )
    tls: ssl.SSLContext | None = None
    if args.tls_cert:
        tls = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        tls.load_cert_chain(args.tls_cert, args.tls_key)
    engine_server = EngineServer(engine, args.host, args.port, tls).start()
    admin = AdminServer(engine, engine_server, args.host, args.admin_port).start()
    print(
        f"oVirt emulator: {engine_server.scheme}://{args.host}:{engine_server.port}"
        f"/ovirt-engine/api (admin http://{args.host}:{admin.port})",
        flush=True,
    )

    stopped = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stopped.set())
    signal.signal(signal.SIGINT, lambda *_: stopped.set())
    stopped.wait()
    admin.stop()
    engine_server.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
