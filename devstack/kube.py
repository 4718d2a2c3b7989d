"""A real Kubernetes control plane on loopback: etcd, kube-apiserver and, on request,
kube-controller-manager, kube-scheduler and kwok (simulated kubelets).

Several control planes can run side by side (the DVP provider needs a "parent" cluster); each
has its own folder, ports, PKI and admin kubeconfig.
"""

from __future__ import annotations

import base64
import functools
import shutil
import ssl
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from devstack import cluster_api, gotools, pki
from devstack.process import ManagedProcess, free_port, http_ok, stop_all

CONTROLLER_MANAGER = "kube-controller-manager"
SCHEDULER = "kube-scheduler"
KWOK = "kwok"
ALL_COMPONENTS = (CONTROLLER_MANAGER, SCHEDULER, KWOK)
#: The Cluster API core manager (with its CRDs and webhooks); started once the apiserver is up.
CAPI = cluster_api.MANAGER

#: Annotation that puts a Node under kwok's simulated kubelet.
KWOK_NODE_ANNOTATION = "kwok.x-k8s.io/node"
SERVICE_CLUSTER_IP_RANGE = "10.96.0.0/16"
CLUSTER_CIDR = "10.244.0.0/16"


@dataclass
class KubeOptions:
    """What a control plane runs and how."""

    name: str = "main"
    components: tuple[str, ...] = ()
    #: kube-controller-manager's --node-monitor-grace-period; short in tests so NotReady comes fast.
    node_monitor_grace_period: str = "40s"
    extra_apiserver_args: tuple[str, ...] = ()
    extra_controller_manager_args: tuple[str, ...] = ()


@dataclass
class KubeControlPlane:
    """One running control plane; ``kubeconfig`` is the admin kubeconfig (client-cert auth)."""

    options: KubeOptions
    root: Path
    processes: list[ManagedProcess] = field(default_factory=list)
    apiserver_port: int = 0

    @property
    def dir(self) -> Path:
        return self.root / self.options.name

    @property
    def kubeconfig(self) -> Path:
        return self.dir / "admin.kubeconfig"

    @property
    def server(self) -> str:
        return f"https://127.0.0.1:{self.apiserver_port}"

    @staticmethod
    def tools(options: KubeOptions) -> list[str]:
        return ["etcd", "kube-apiserver", *options.components]

    def start(self, binaries: dict[str, Path]) -> None:
        """Start every process; readiness is awaited by :meth:`wait_ready`."""
        pki_dir = self.dir / "pki"
        ca = pki.CertificateAuthority(pki_dir)
        serving = ca.issue(
            "apiserver",
            common_name="kube-apiserver",
            server_hosts=("127.0.0.1", "localhost", "kubernetes.default.svc"),
        )
        admin = ca.issue("admin", common_name="cloudloop-admin", organization="system:masters")
        sa = pki.service_account_keys(pki_dir)
        logs = self.dir / "logs"

        etcd_url = self._start_etcd(binaries["etcd"], logs)

        self.apiserver_port = free_port()
        self.processes.append(
            ManagedProcess(
                "kube-apiserver",
                [
                    str(binaries["kube-apiserver"]),
                    f"--etcd-servers={etcd_url}",
                    f"--cert-dir={pki_dir}",
                    f"--tls-cert-file={serving.cert}",
                    f"--tls-private-key-file={serving.key}",
                    f"--client-ca-file={ca.pair.cert}",
                    f"--secure-port={self.apiserver_port}",
                    "--bind-address=127.0.0.1",
                    "--advertise-address=127.0.0.1",
                    f"--service-cluster-ip-range={SERVICE_CLUSTER_IP_RANGE}",
                    "--allow-privileged=true",
                    "--authorization-mode=RBAC",
                    "--disable-admission-plugins=ServiceAccount",
                    f"--service-account-issuer=https://127.0.0.1:{self.apiserver_port}/",
                    f"--service-account-key-file={sa.cert}",
                    f"--service-account-signing-key-file={sa.key}",
                    "--endpoint-reconciler-type=none",
                    *self.options.extra_apiserver_args,
                ],
                log_dir=logs,
                ready=self._apiserver_ready,
            )
        )

        kubeconfig = self._write_kubeconfig(ca.pair.cert, admin)
        components = set(self.options.components)
        if CONTROLLER_MANAGER in components:
            port = free_port()
            self.processes.append(
                ManagedProcess(
                    CONTROLLER_MANAGER,
                    [
                        str(binaries[CONTROLLER_MANAGER]),
                        f"--kubeconfig={kubeconfig}",
                        f"--authentication-kubeconfig={kubeconfig}",
                        f"--authorization-kubeconfig={kubeconfig}",
                        # started with the apiserver, not after it: an apiserver not yet
                        # listening must not be fatal (it is, without this, under load)
                        "--authentication-tolerate-lookup-failure",
                        f"--secure-port={port}",
                        "--bind-address=127.0.0.1",
                        f"--cert-dir={self.dir / 'kcm-certs'}",
                        "--leader-elect=false",
                        f"--service-account-private-key-file={sa.key}",
                        f"--root-ca-file={ca.pair.cert}",
                        "--use-service-account-credentials=false",
                        "--allocate-node-cidrs=true",
                        f"--cluster-cidr={CLUSTER_CIDR}",
                        "--node-cidr-mask-size=24",
                        f"--service-cluster-ip-range={SERVICE_CLUSTER_IP_RANGE}",
                        f"--node-monitor-grace-period={self.options.node_monitor_grace_period}",
                        "--node-monitor-period=2s",
                        *self.options.extra_controller_manager_args,
                    ],
                    log_dir=logs,
                    ready=_healthz(f"https://127.0.0.1:{port}/healthz", insecure=True),
                )
            )
        if SCHEDULER in components:
            port = free_port()
            self.processes.append(
                ManagedProcess(
                    SCHEDULER,
                    [
                        str(binaries[SCHEDULER]),
                        f"--kubeconfig={kubeconfig}",
                        f"--authentication-kubeconfig={kubeconfig}",
                        f"--authorization-kubeconfig={kubeconfig}",
                        # started with the apiserver, not after it: an apiserver not yet
                        # listening must not be fatal (it is, without this, under load)
                        "--authentication-tolerate-lookup-failure",
                        f"--secure-port={port}",
                        "--bind-address=127.0.0.1",
                        f"--cert-dir={self.dir / 'scheduler-certs'}",
                        "--leader-elect=false",
                    ],
                    log_dir=logs,
                    ready=_healthz(f"https://127.0.0.1:{port}/healthz", insecure=True),
                )
            )
        if KWOK in components:
            port = free_port()
            stages = self._kwok_stages()
            self.processes.append(
                ManagedProcess(
                    KWOK,
                    [
                        str(binaries[KWOK]),
                        f"--kubeconfig={kubeconfig}",
                        "--manage-all-nodes=false",
                        f"--manage-nodes-with-annotation-selector={KWOK_NODE_ANNOTATION}=fake",
                        "--cidr=10.244.0.0/16",
                        "--node-ip=10.0.0.1",
                        f"--server-address=127.0.0.1:{port}",
                        f"--config={stages}",
                        # Renew node Leases (every 3s): the heartbeat-with-lease stage updates
                        # node status only every ~10min, so without Leases the node lifecycle
                        # controller marks nodes Unknown and their pods NotReady.
                        "--node-lease-duration-seconds=12",
                    ],
                    log_dir=logs,
                    ready=_healthz(f"http://127.0.0.1:{port}/healthz"),
                )
            )

        for process in self.processes:
            if process.popen is None:  # etcd is already up
                process.start()

    def _start_etcd(self, binary: Path, logs: Path, attempts: int = 3) -> str:
        """Start etcd and wait for it (the apiserver gives up quickly without it); its URL.

        A port picked free can still be taken by a process outside the pickers' reservations
        before etcd binds it; etcd then exits with "address already in use" and is started again
        on new ports (with its data directory emptied).
        """
        for attempt in range(1, attempts + 1):
            etcd_port, etcd_peer = free_port(), free_port()
            etcd_url = f"http://127.0.0.1:{etcd_port}"
            process = ManagedProcess(
                "etcd",
                [
                    str(binary),
                    "--name=default",
                    f"--data-dir={self.dir / 'etcd'}",
                    f"--listen-client-urls={etcd_url}",
                    f"--advertise-client-urls={etcd_url}",
                    f"--listen-peer-urls=http://127.0.0.1:{etcd_peer}",
                    f"--initial-advertise-peer-urls=http://127.0.0.1:{etcd_peer}",
                    f"--initial-cluster=default=http://127.0.0.1:{etcd_peer}",
                    "--unsafe-no-fsync=true",
                    "--log-level=warn",
                ],
                log_dir=logs,
                ready=functools.partial(http_ok, f"{etcd_url}/health"),
            )
            process.start()
            try:
                process.wait_ready(30)
            except RuntimeError:
                if attempt == attempts or "address already in use" not in process.tail(3):
                    raise
                shutil.rmtree(self.dir / "etcd", ignore_errors=True)
                continue
            self.processes.append(process)
            return etcd_url
        raise AssertionError("unreachable")

    def _kwok_stages(self) -> Path:
        """kwok's own "fast" node/pod stages plus lease heartbeats, as one config file."""
        source = gotools.module_source("kwok", "sigs.k8s.io/kwok") / "kustomize" / "stage"
        documents = [
            path.read_text()
            for folder in ("node/fast", "node/heartbeat-with-lease", "pod/fast")
            for path in sorted((source / folder).glob("*.yaml"))
            if path.name != "kustomization.yaml"
        ]
        target = self.dir / "kwok-stages.yaml"
        target.write_text("\n---\n".join(documents))
        return target

    def wait_ready(self, timeout: float = 90) -> None:
        """Wait for every process, the apiserver first. A component that exited while the
        apiserver was still starting is started again once: kube-controller-manager gives up
        when the apiserver's /healthz is not ok within its own ~10 s (its post-start hooks take
        longer than that on a loaded machine), so the stack would fail for a timing only."""
        deadline = time.monotonic() + timeout
        for process in self.processes:
            try:
                process.wait_ready(max(1.0, deadline - time.monotonic()))
            except RuntimeError:
                if process.name not in ALL_COMPONENTS or process.running:
                    raise
                self.restart(process.name, timeout=max(1.0, deadline - time.monotonic()))
        self._wait_default_namespace(deadline)
        if CAPI in self.options.components and not any(p.name == CAPI for p in self.processes):
            self._start_cluster_api(deadline)

    def _start_cluster_api(self, deadline: float) -> None:
        """CRDs and webhooks need a serving apiserver, so the manager starts after it."""
        manager = cluster_api.start_manager(
            gotools.binary_path(CAPI),
            self.dir,
            self.kubeconfig,
            pki.CertificateAuthority(self.dir / "pki"),
        )
        self.processes.append(manager)
        manager.wait_ready(max(1.0, deadline - time.monotonic()))

    def stop(self) -> None:
        stop_all(list(reversed(self.processes)))
        self.processes.clear()

    def process(self, name: str) -> ManagedProcess:
        return next(p for p in self.processes if p.name == name)

    def kill(self, name: str) -> None:
        """SIGKILL one component (fault tests); :meth:`restart` brings it back."""
        self.process(name).kill()

    def restart(self, name: str, *, timeout: float = 60.0) -> None:
        """Start a killed component again with the same arguments (same port, same etcd)."""
        process = self.process(name)
        process.start()
        process.wait_ready(timeout)

    def _ssl_context(self) -> ssl.SSLContext:
        context = ssl.create_default_context(cafile=str(self.dir / "pki" / "ca.crt"))
        context.load_cert_chain(
            str(self.dir / "pki" / "admin.crt"), str(self.dir / "pki" / "admin.key")
        )
        return context

    def _apiserver_ready(self) -> bool:
        return http_ok(f"{self.server}/readyz", context=self._ssl_context())

    def _wait_default_namespace(self, deadline: float) -> None:
        while time.monotonic() < deadline:
            if http_ok(f"{self.server}/api/v1/namespaces/default", context=self._ssl_context()):
                return
            time.sleep(0.2)
        raise TimeoutError("kube-apiserver never created the default namespace")

    def _write_kubeconfig(self, ca_cert: Path, admin: pki.KeyPair) -> Path:
        def b64(path: Path) -> str:
            return base64.b64encode(path.read_bytes()).decode()

        name = f"cloudloop-{self.options.name}"
        config = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [
                {
                    "name": name,
                    "cluster": {"server": self.server, "certificate-authority-data": b64(ca_cert)},
                }
            ],
            "users": [
                {
                    "name": "admin",
                    "user": {
                        "client-certificate-data": b64(admin.cert),
                        "client-key-data": b64(admin.key),
                    },
                }
            ],
            "contexts": [{"name": name, "context": {"cluster": name, "user": "admin"}}],
            "current-context": name,
        }
        self.kubeconfig.write_text(yaml.safe_dump(config))
        self.kubeconfig.chmod(0o600)
        return self.kubeconfig


def _healthz(url: str, *, insecure: bool = False) -> Callable[[], bool]:
    def check() -> bool:
        return http_ok(url, context=_insecure() if insecure else None)

    return check


def _insecure() -> ssl.SSLContext:
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    return context


def required_tools(options: Iterable[KubeOptions]) -> list[str]:
    return [tool for o in options for tool in KubeControlPlane.tools(o)]
