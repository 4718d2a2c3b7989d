"""The dev stack behind ``docker-compose.yml``: a control plane and one cloud's emulator.

``python -m devstack.compose <provider> --state DIR`` starts what ``cloudloop dev`` starts for that
cloud but Temporal (its own compose service): a kube-apiserver with etcd, and moto (aws), the oVirt
Engine emulator (zvirt), vcsim (vsphere), the OpenStack API emulator (openstack) or a parent
cluster with the DVP simulator (dvp). It
writes, for the product's containers, ``DIR/kubeconfig`` and ``DIR/cloud.yaml`` (the provider's
settings section, passed with ``--cloud-config``), then ``DIR/ready``, and runs until SIGTERM.

Rules: everything listens on loopback, as under ``cloudloop dev`` (the compose services share the
host's network); the Go binaries come from the Go tools' cache (``CLOUDLOOP_CACHE_DIR``), built by
``make setup`` on the host; files are written world-readable for the non-root product containers
(dev credentials only).
"""

from __future__ import annotations

import argparse
import shutil
import signal
import threading
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

from devstack.kube import ALL_COMPONENTS, KubeOptions
from devstack.local import LocalStack, StackOptions
from devstack.ovirt_emulator import OvirtEmulatorOptions


def _control_plane(state: Path, **cloud: Any) -> LocalStack:
    """A started kube-apiserver (all components) with ``cloud``'s emulator and no Temporal (its
    own compose service); moto only when asked for (``moto=True``)."""
    options: dict[str, Any] = {"moto": False, **cloud}
    return LocalStack(
        StackOptions(
            state_dir=state / "stack",
            temporal=False,
            kube=(KubeOptions(components=ALL_COMPONENTS),),
            **options,
        )
    ).start()


def _aws(state: Path) -> tuple[LocalStack, dict[str, Any], Callable[[], None]]:
    stack = _control_plane(state, moto=True)
    section = {
        "endpoint_url": stack.moto_endpoint,
        "region": "us-east-1",
        "access_key_id": "testing",
        "secret_access_key": "testing",
    }
    return stack, section, stack.stop


def _zvirt(state: Path) -> tuple[LocalStack, dict[str, Any], Callable[[], None]]:
    stack = _control_plane(state, ovirt_emulator=OvirtEmulatorOptions())
    assert stack.ovirt is not None
    password = state / "zvirt-password"
    password.write_text(stack.ovirt.password)
    section: dict[str, Any] = {
        "api_url": stack.ovirt.api_url,
        "username": stack.ovirt.username,
        "password_file": str(password),
        "cluster_id": stack.ovirt.cluster_id,
    }
    if stack.ovirt.ca_file is not None:
        section["ca_bundle"] = str(stack.ovirt.ca_file)
    return stack, section, stack.stop


def _dvp(state: Path) -> tuple[LocalStack, dict[str, Any], Callable[[], None]]:
    from devstack.dvp_simulator import DvpParent

    stack = _control_plane(state)
    parent = DvpParent.start(state / "dvp-parent")
    section = {
        "kubeconfig": str(parent.kubeconfig),
        "namespace": parent.new_namespace(),
        "cluster_uuid": str(uuid.uuid4()),
        "zones": ["default"],
    }

    def stop() -> None:
        parent.stop()
        stack.stop()

    return stack, section, stop


def _vsphere(state: Path) -> tuple[LocalStack, dict[str, Any], Callable[[], None]]:
    from devstack.vcsim import VcsimOptions

    stack = _control_plane(state, vcsim=VcsimOptions())
    assert stack.vcsim is not None
    password = state / "vsphere-password"
    password.write_text(stack.vcsim.password)
    section: dict[str, Any] = {
        "server": stack.vcsim.server,
        "username": stack.vcsim.username,
        "password_file": str(password),
    }
    if stack.vcsim.ca_file is not None:
        section["ca_bundle"] = str(stack.vcsim.ca_file)
    return stack, section, stack.stop


def _openstack(state: Path) -> tuple[LocalStack, dict[str, Any], Callable[[], None]]:
    from devstack.backends.openstack import cloud_conf
    from devstack.openstack_emulator import OpenStackEmulatorOptions

    stack = _control_plane(
        state, openstack_emulator=OpenStackEmulatorOptions(password=f"dev-{uuid.uuid4().hex[:8]}")
    )
    assert stack.openstack is not None
    # Upstream's cloud.conf, as the chart mounts it from the credentials Secret.
    conf = state / "cloud.conf"
    conf.write_text(cloud_conf(stack.openstack))
    return stack, {"cloud_config_file": str(conf)}, stack.stop


#: The clouds the dev stack can emulate, by provider name.
CLOUDS: dict[str, Callable[[Path], tuple[LocalStack, dict[str, Any], Callable[[], None]]]] = {
    "aws": _aws,
    "dvp": _dvp,
    "openstack": _openstack,
    "vsphere": _vsphere,
    "zvirt": _zvirt,
}


def _readable(path: Path) -> None:
    for item in [path, *path.rglob("*")]:
        item.chmod(0o755 if item.is_dir() else 0o644)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m devstack.compose")
    parser.add_argument("provider", choices=sorted(CLOUDS))
    parser.add_argument("--state", type=Path, required=True)
    args = parser.parse_args(argv)
    state: Path = args.state
    (state / "ready").unlink(missing_ok=True)
    state.mkdir(parents=True, exist_ok=True)
    stack, section, stop = CLOUDS[args.provider](state)
    stopped = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stopped.set())
    signal.signal(signal.SIGINT, lambda *_: stopped.set())
    try:
        shutil.copyfile(stack.kubeconfig, state / "kubeconfig")
        (state / "cloud.yaml").write_text(yaml.safe_dump(section))
        _readable(state)
        (state / "ready").write_text(args.provider + "\n")
        print(
            f"devstack for {args.provider} is up: {state}/kubeconfig, {state}/cloud.yaml",
            flush=True,
        )
        stopped.wait()
    finally:
        (state / "ready").unlink(missing_ok=True)
        stop()


if __name__ == "__main__":
    main()
