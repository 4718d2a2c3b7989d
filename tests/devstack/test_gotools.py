"""The Go tool registry: one line per tool, cache keyed by version and pins."""

from __future__ import annotations

from pathlib import Path

import pytest

from devstack import gotools


@pytest.mark.parametrize(
    ("package", "binary"),
    [
        pytest.param("k8s.io/kubernetes/cmd/kube-apiserver", "kube-apiserver", id="cmd"),
        pytest.param("go.etcd.io/etcd/server/v3", "server", id="major-suffix"),
        pytest.param("sigs.k8s.io/kwok/cmd/kwok", "kwok", id="kwok"),
    ],
)
def test_go_binary_name(package: str, binary: str) -> None:
    assert gotools._go_binary_name(package) == binary


def test_every_tool_has_a_committed_wrapper() -> None:
    for tool in gotools.TOOLS.values():
        wrapper = gotools.GOTOOLS_DIR / tool.module
        assert (wrapper / "go.mod").exists(), tool
        assert (wrapper / "go.sum").exists(), tool
        text = (wrapper / "go.mod").read_text()
        module = text.split("\n", 1)[0].removeprefix("module ").strip()
        # A tool of a required module (a `tool` line), or a command of the wrapper's own.
        assert tool.package in text or tool.package.startswith(f"{module}/"), (
            f"{tool.name} not a tool of {wrapper}"
        )


def test_a_wrapper_with_its_own_sources_is_keyed_by_them(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    wrapper = tmp_path / "own"
    (wrapper / "cmd" / "own").mkdir(parents=True)
    (wrapper / "go.mod").write_text("module cloudloop.invalid/gotools/own\n")
    main = wrapper / "cmd" / "own" / "main.go"
    main.write_text("package main\n")
    monkeypatch.setattr(gotools, "GOTOOLS_DIR", tmp_path)
    before = gotools._module_digest("own")
    main.write_text("package main\n\nfunc main() {}\n")
    assert gotools._module_digest("own") != before


def test_cache_path_is_keyed_by_version(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("CLOUDLOOP_CACHE_DIR", str(tmp_path))
    path = gotools.binary_path("kube-apiserver")
    assert path.is_relative_to(tmp_path)
    assert gotools.K8S_VERSION in str(path)
    assert path.name == "kube-apiserver"
