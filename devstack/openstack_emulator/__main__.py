"""``python -m devstack.openstack_emulator``: run the OpenStack API emulator until SIGTERM.

The password and the seeded application credential's secret come from the environment
(``OPENSTACK_EMULATOR_PASSWORD``, ``OPENSTACK_EMULATOR_APP_CREDENTIAL_SECRET``), never argv.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import threading

from devstack.openstack_emulator.cloud import Delays
from devstack.openstack_emulator.identity import IdentityOptions
from devstack.openstack_emulator.launcher import APP_CREDENTIAL_ENV, PASSWORD_ENV
from devstack.openstack_emulator.server import AdminServer, Servers
from devstack.openstack_emulator.state import EmulatorOptions, OpenStack


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="openstack-emulator", description=__doc__)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--ports", default="{}", help='JSON {"compute": 8774, ...}; 0: any')
    parser.add_argument("--admin-port", type=int, required=True)
    parser.add_argument("--username", default="demo")
    parser.add_argument("--project", default="demo")
    parser.add_argument("--region", default="RegionOne")
    parser.add_argument("--zones", default="nova,nova-b")
    parser.add_argument("--max-routes", type=int, default=30)
    parser.add_argument("--gigabytes-quota", type=int, default=10000)
    parser.add_argument("--endpoints-file", help="write the service URLs here (JSON) when up")
    defaults = Delays()
    for name in vars(defaults):
        parser.add_argument(
            f"--{name.replace('_', '-')}", type=float, default=getattr(defaults, name)
        )
    args = parser.parse_args(argv)

    options = EmulatorOptions(
        identity=IdentityOptions(
            username=args.username,
            password=os.environ.get(PASSWORD_ENV, "secret"),
            project_name=args.project,
            region=args.region,
            application_credential_secret=os.environ.get(APP_CREDENTIAL_ENV, ""),
        ),
        zones=tuple(z for z in args.zones.split(",") if z),
        delays=Delays(**{name: getattr(args, name) for name in vars(defaults)}),
        max_routes=args.max_routes,
        gigabytes_quota=args.gigabytes_quota,
    )
    openstack = OpenStack(options)
    servers = Servers(openstack, args.host, json.loads(args.ports)).start()
    admin = AdminServer(openstack, servers, args.host, args.admin_port).start()
    endpoints = {name: server.url for name, server in servers.by_name.items()}
    if args.endpoints_file:
        with open(args.endpoints_file, "w") as out:
            json.dump(endpoints, out)
    print(
        f"OpenStack emulator: Keystone {endpoints['identity']}/v3 "
        f"(admin http://{args.host}:{admin.port})",
        flush=True,
    )

    stopped = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stopped.set())
    signal.signal(signal.SIGINT, lambda *_: stopped.set())
    stopped.wait()
    admin.stop()
    servers.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
