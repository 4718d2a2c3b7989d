"""amazon-ec2-metadata-mock (AEMM), built from its Go module (:mod:`devstack.gotools`), as the
instance metadata service of the termination handler's IMDS mode in tests and benchmarks: the
mock aws-node-termination-handler's own end-to-end tests use.

:func:`metadata_mock` runs one mock on a free loopback port, IMDSv2 only (a request without a
token is refused, as on an instance that requires IMDSv2), with the identity of a given instance
(ID, launch as ``pendingTime``, zone, type, hostname) written to its config file, so a notice it
serves names an instance moto knows. ``mode`` is the mock's subcommand: ``spot`` (a Spot
interruption notice two minutes ahead, and a rebalance recommendation), ``events`` (a scheduled
maintenance event) or ``asglifecycle`` (``autoscaling/target-lifecycle-state`` ``Terminated``);
``delay_s`` delays the notice after the mock's start.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from devstack.gotools import ensure_built
from devstack.process import ManagedProcess, free_port, tcp_open


@dataclass(frozen=True)
class MockInstance:
    instance_id: str
    launch_time: datetime
    zone: str = "eu-west-1a"
    instance_type: str = "t3.micro"
    hostname: str = ""


def mock_config(instance: MockInstance, port: int) -> dict[str, object]:
    region = instance.zone[:-1]
    return {
        "server": {"hostname": "127.0.0.1", "port": str(port)},
        "imdsv2": True,
        "metadata": {
            "values": {
                "instance-id": instance.instance_id,
                "instance-type": instance.instance_type,
                "local-hostname": instance.hostname,
                "hostname": instance.hostname,
                "placement-availability-zone": instance.zone,
            }
        },
        "dynamic": {
            "values": {
                "instance-identity-document": {
                    "accountId": "123456789012",
                    "imageId": "ami-12c6146b",
                    "availabilityZone": instance.zone,
                    "version": "2017-09-30",
                    "privateIp": "10.0.0.10",
                    "instanceId": instance.instance_id,
                    "pendingTime": instance.launch_time.strftime("%Y-%m-%dT%H:%M:%SZ"),
                    "architecture": "x86_64",
                    "instanceType": instance.instance_type,
                    "region": region,
                }
            }
        },
    }


@contextlib.contextmanager
def metadata_mock(
    state_dir: Path, instance: MockInstance, mode: str = "spot", *args: str, delay_s: int = 0
) -> Iterator[str]:
    """Run the mock; yield its endpoint (``http://127.0.0.1:<port>``)."""
    binary = ensure_built(["ec2-metadata-mock"])["ec2-metadata-mock"]
    port = free_port()
    folder = state_dir / f"aemm-{port}"
    folder.mkdir(parents=True, exist_ok=True)
    config = folder / "aemm-config.json"
    config.write_text(json.dumps(mock_config(instance, port)))
    delay = {
        "spot": ["--mock-delay-sec", str(delay_s), "--rebalance-delay-sec", str(delay_s)],
        "asglifecycle": ["--asg-termination-delay-sec", str(delay_s)],
    }.get(mode, [])
    process = ManagedProcess(
        f"aemm-{port}",
        [str(binary), mode, "-c", str(config), "-p", str(port), "-n", "127.0.0.1", *delay, *args],
        log_dir=folder,
        ready=lambda: tcp_open(port),
        cwd=folder,
        env={"HOME": str(folder), "PATH": "/usr/bin:/bin"},
    )
    process.start()
    try:
        process.wait_ready(30)
        yield f"http://127.0.0.1:{port}"
    finally:
        process.stop()
