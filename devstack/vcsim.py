"""vcsim (govmomi's vCenter simulator) as a child process of the local stack.

:func:`vcsim_process` picks a free port, issues a serving certificate from a throw-away CA (so
drivers verify TLS by CA file or by thumbprint), and describes where vcsim answers.

Rules:
- The build is the real ``vcsim`` command of govmomi v0.46.3 (``gotools/govmomi``); newer
  releases either lack the command on the module proxy or break pyvmomi (see ``gotools.py``).
  It carries govmomi's fix of v0.55 for clones (``gotools/govmomi/patches.json``): a clone gets
  its spec's instance UUID, CPUs, memory and extraConfig, as on vCenter.
- vcsim accepts exactly ``username``/``password``: wrong credentials fail as on vCenter. The
  password goes in a file (vcsim reads a flag value naming a file), never on the command line.
- vcsim keeps its datastores as folders under ``$TMPDIR``; the process gets its own ``TMPDIR``
  in the state folder, so nothing is left behind in ``/tmp``.
- The inventory (VMs with guest IPs, tags, datastores with zones) is made by
  :mod:`devstack.vcsim_inventory` through pyvmomi and the tagging REST paths, as users would.
"""

from __future__ import annotations

import hashlib
import os
import ssl
from dataclasses import dataclass, field
from pathlib import Path

from devstack import pki
from devstack.process import ManagedProcess, free_port, http_ok


@dataclass(frozen=True)
class VcsimOptions:
    """The simulated inventory's size and the accepted login (vcsim's flags)."""

    #: vcsim rejects every login when the user name has an ``@`` (``user@domain``), so none here.
    username: str = "k8s-admin"
    password: str = field(default="vcsim-password", repr=False)
    datacenters: int = 1
    clusters: int = 2
    hosts_per_cluster: int = 2
    standalone_hosts: int = 1
    #: VMs per resource pool made at start-up; the seeder clones node VMs from the first one.
    vms: int = 1
    datastores: int = 2
    #: Port groups: 0 puts the VMs' NICs on the standard network ``VM Network``.
    portgroups: int = 0
    #: ``method:milliseconds`` pairs vcsim delays (``-method-delay``), for fault tests.
    method_delays: tuple[tuple[str, int], ...] = ()
    #: vcsim builds its whole inventory before it answers: 1,000 VMs take ~45 s on a busy
    #: 2-core machine, so large inventories need more than the stack's usual minute.
    ready_timeout_s: float = 60.0


@dataclass(frozen=True)
class VcsimEndpoint:
    """Where a running vcsim answers, and how to trust it."""

    host: str
    port: int
    username: str
    password: str = field(repr=False)
    ca_file: Path | None = None

    @property
    def server(self) -> str:
        return f"{self.host}:{self.port}"

    @property
    def url(self) -> str:
        """The base URL (``/sdk`` for SOAP, ``/rest`` for tagging below it)."""
        return f"https://{self.host}:{self.port}"

    def thumbprint(self) -> str:
        """The serving certificate's SHA-1 thumbprint as vCenter shows it (``AB:CD:...``)."""
        der = ssl.PEM_cert_to_DER_cert(ssl.get_server_certificate((self.host, self.port)))
        digest = hashlib.sha1(der).hexdigest().upper()
        return ":".join(digest[i : i + 2] for i in range(0, len(digest), 2))

    def ssl_context(self) -> ssl.SSLContext:
        return ssl.create_default_context(cafile=str(self.ca_file) if self.ca_file else None)


def vcsim_process(
    binary: Path, options: VcsimOptions, state_dir: Path, log_dir: Path
) -> tuple[ManagedProcess, VcsimEndpoint]:
    """A not yet started :class:`ManagedProcess` running vcsim, and its endpoint."""
    port = free_port()
    ca = pki.CertificateAuthority(state_dir / "pki", name="vcsim-ca")
    serving = ca.issue("vcsim", common_name="vcsim", server_hosts=("127.0.0.1",))
    password_file = state_dir / "password"
    password_file.write_text(options.password)
    password_file.chmod(0o600)
    tmp = state_dir / "tmp"
    tmp.mkdir(parents=True, exist_ok=True)
    argv = [
        str(binary),
        "-l",
        f"127.0.0.1:{port}",
        "-tlscert",
        str(serving.cert),
        "-tlskey",
        str(serving.key),
        "-username",
        options.username,
        "-password",
        str(password_file),
        "-dc",
        str(options.datacenters),
        "-cluster",
        str(options.clusters),
        "-host",
        str(options.hosts_per_cluster),
        "-standalone-host",
        str(options.standalone_hosts),
        "-vm",
        str(options.vms),
        "-ds",
        str(options.datastores),
        "-pg",
        str(options.portgroups),
    ]
    if options.method_delays:
        argv += ["-method-delay", ",".join(f"{m}:{ms}" for m, ms in options.method_delays)]
    endpoint = VcsimEndpoint(
        host="127.0.0.1",
        port=port,
        username=options.username,
        password=options.password,
        ca_file=ca.pair.cert,
    )
    context = endpoint.ssl_context()
    process = ManagedProcess(
        "vcsim",
        argv,
        log_dir=log_dir,
        ready=lambda: http_ok(f"{endpoint.url}/about", context=context),
        env={**os.environ, "TMPDIR": str(tmp)},
    )
    return process, endpoint
