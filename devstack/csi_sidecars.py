"""The real CSI sidecars for the stack: external-provisioner, external-attacher, external-resizer,
the livenessprobe (and external-snapshotter's csi-snapshotter for a driver with snapshots).

Built from their Go modules (``gotools``), run against a control plane's admin kubeconfig and the
controller's socket, with the flags a Deployment of them uses (leader election off: one of
each), and the retry intervals shortened so tests see a retry within seconds rather than minutes.
Each serves metrics on a free port, which is also its readiness check; the livenessprobe (no
kubeconfig: it only calls the driver's Probe) is ready when its /healthz answers 200, that is when
the controller's Probe does (the chart's liveness probe asks the same).
"""

from __future__ import annotations

from pathlib import Path

from devstack import gotools
from devstack.process import ManagedProcess, free_port, http_ok

SIDECARS = ("csi-provisioner", "csi-attacher", "csi-resizer", "livenessprobe")
#: The livenessprobe's per-request Probe timeout (the chart's ``csi.controller.liveness``).
LIVENESS_PROBE_TIMEOUT = "3s"
# -- snapshots (issue 29): csi-snapshotter, only beside a driver with snapshots ----------------
SNAPSHOTTER = "csi-snapshotter"
#: As the chart runs it: no volume group snapshots (the driver has no GroupController service).
SNAPSHOTTER_FLAGS = ("--feature-gates=CSIVolumeGroupSnapshot=false", "--extra-create-metadata")
# -- end snapshots --------------------------------------------------------------------------


def _flags(name: str, timeout: str) -> list[str]:
    if name == "csi-provisioner":
        return [
            "--extra-create-metadata",
            "--feature-gates=Topology=true",
            f"--timeout={timeout}",
            "--retry-interval-start=500ms",
            "--retry-interval-max=5s",
            "--default-fstype=ext4",
        ]
    if name == SNAPSHOTTER:
        return [
            f"--timeout={timeout}",
            "--retry-interval-start=500ms",
            "--retry-interval-max=5s",
            *SNAPSHOTTER_FLAGS,
        ]
    if name == "csi-attacher":
        return [
            f"--timeout={timeout}",
            "--retry-interval-start=500ms",
            "--retry-interval-max=5s",
            "--reconcile-sync=1m",
        ]
    return [
        f"--timeout={timeout}",
        "--retry-interval-start=500ms",
        "--retry-interval-max=5s",
        "--handle-volume-inuse-error=false",
    ]


def sidecar_processes(
    socket: Path,
    kubeconfig: Path,
    log_dir: Path,
    *,
    timeout: str = "15s",
    snapshots: bool = False,
) -> list[ManagedProcess]:
    """One process per sidecar (not started); ``snapshots`` adds csi-snapshotter."""
    names = (*SIDECARS, SNAPSHOTTER) if snapshots else SIDECARS
    binaries = gotools.ensure_built(names)
    processes = []
    for name in names:
        port = free_port()
        endpoint = f"127.0.0.1:{port}"
        if name == "livenessprobe":
            processes.append(
                ManagedProcess(
                    name,
                    [
                        str(binaries[name]),
                        f"--csi-address={socket}",
                        f"--http-endpoint={endpoint}",
                        f"--probe-timeout={LIVENESS_PROBE_TIMEOUT}",
                        "--v=4",
                    ],
                    log_dir=log_dir,
                    ready=lambda endpoint=endpoint: http_ok(f"http://{endpoint}/healthz"),  # type: ignore[misc]
                )
            )
            continue
        processes.append(
            ManagedProcess(
                name,
                [
                    str(binaries[name]),
                    f"--csi-address={socket}",
                    f"--kubeconfig={kubeconfig}",
                    "--leader-election=false",
                    f"--http-endpoint={endpoint}",
                    "--v=4",
                    *_flags(name, timeout),
                ],
                log_dir=log_dir,
                ready=lambda endpoint=endpoint: http_ok(f"http://{endpoint}/metrics"),  # type: ignore[misc]
            )
        )
    return processes
