"""Picked ports are not handed out twice, and etcd survives a port taken before it binds.

CI once failed when a ``cloudloop dev`` stack's etcd found its picked port taken ("bind: address
already in use"): a picked port is now reserved across processes, and etcd starts again on new
ports when its port was taken anyway.
"""

from __future__ import annotations

import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from cloudloop import net
from devstack import gotools, kube
from devstack.kube import KubeControlPlane, KubeOptions


def test_a_picked_port_is_not_picked_again_by_another_process() -> None:
    mine = {net.free_port() for _ in range(20)}
    code = "from cloudloop.net import free_port; print(*(free_port() for _ in range(200)))"
    out = subprocess.run(
        [sys.executable, "-c", code], check=True, capture_output=True, text=True, timeout=60
    ).stdout
    theirs = {int(port) for port in out.split()}
    assert len(mine) == 20
    assert len(theirs) == 200
    assert not mine & theirs


def test_an_expired_reservation_is_taken_over(monkeypatch: pytest.MonkeyPatch) -> None:
    port = net.free_port()
    assert not net._reserve(port)
    monkeypatch.setattr(net, "RESERVATION_S", 0.0)
    assert net._reserve(port)


@pytest.fixture
def taken_port() -> Iterator[int]:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        yield int(sock.getsockname()[1])


@pytest.mark.stack
def test_etcd_starts_again_on_new_ports_when_its_port_was_taken(
    tmp_path: Path, taken_port: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    picks = iter([taken_port, net.free_port()])
    monkeypatch.setattr(kube, "free_port", lambda: next(picks, None) or net.free_port())
    plane = KubeControlPlane(KubeOptions(name="ports"), tmp_path)
    binary = gotools.ensure_built(["etcd"])["etcd"]
    try:
        url = plane._start_etcd(binary, tmp_path / "logs")
        assert str(taken_port) not in url
        assert plane.process("etcd").running
        assert "address already in use" in plane.process("etcd").log_path.read_text()
    finally:
        plane.stop()
