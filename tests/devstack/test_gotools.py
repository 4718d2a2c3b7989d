"""The Go tool registry: one line per tool, cache keyed by version and pins."""

from __future__ import annotations

import threading
import time
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


class FakeBuilds:
    """``_build_module`` faked: records the modules in start order and the most at once."""

    def __init__(self, failing: str = "") -> None:
        self.started: list[str] = []
        self.peak = 0
        self._running = 0
        self._lock = threading.Lock()
        self._failing = failing

    def __call__(self, module: str, tools: list[gotools.GoTool]) -> None:
        with self._lock:
            self.started.append(module)
            self._running += 1
            self.peak = max(self.peak, self._running)
        time.sleep(0.05)
        with self._lock:
            self._running -= 1
        if module == self._failing:
            raise RuntimeError(f"go build of {module} failed")
        for tool in tools:
            gotools.binary_path(tool.name).parent.mkdir(parents=True, exist_ok=True)
            gotools.binary_path(tool.name).write_text("")


@pytest.fixture
def cache(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    monkeypatch.setenv("CLOUDLOOP_CACHE_DIR", str(tmp_path))
    monkeypatch.delenv(gotools.BUILD_JOBS_ENV, raising=False)
    return tmp_path


def test_two_modules_build_at_once_longest_first(
    cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    builds = FakeBuilds()
    monkeypatch.setattr(gotools, "_build_module", builds)
    names = ["etcd", "vcsim", "kube-apiserver", "kube-scheduler", "csi-resizer"]
    paths = gotools.ensure_built(names)
    # the two longest start first; which thread records its start first is a race
    assert set(builds.started[:2]) == {"kubernetes", "external-resizer"}
    assert set(builds.started[2:]) == {"govmomi", "etcd"}
    assert builds.peak == 2
    assert all(path.exists() for path in paths.values())
    assert gotools.ensure_built(names) == paths  # all cached: nothing built again
    assert len(builds.started) == 4


def test_one_job_builds_in_the_longest_first_order(
    cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    builds = FakeBuilds()
    monkeypatch.setattr(gotools, "_build_module", builds)
    monkeypatch.setenv(gotools.BUILD_JOBS_ENV, "1")
    gotools.ensure_built(["etcd", "vcsim", "kube-apiserver", "csi-resizer", "temporal-server"])
    assert builds.started == [
        "kubernetes",
        "temporal-server",
        "external-resizer",
        "govmomi",
        "etcd",
    ]
    assert builds.peak == 1


def test_a_failed_module_is_raised_after_the_others_were_built(
    cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    builds = FakeBuilds(failing="helm")
    monkeypatch.setattr(gotools, "_build_module", builds)
    with pytest.raises(RuntimeError, match="go build of helm failed"):
        gotools.ensure_built(["helm", "etcd", "kwok", "livenessprobe"])
    assert sorted(builds.started) == ["etcd", "helm", "kwok", "livenessprobe"]
    assert gotools.binary_path("etcd").exists() and gotools.binary_path("kwok").exists()


def test_a_bad_job_count_is_a_clear_error(cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(gotools, "_build_module", FakeBuilds())
    monkeypatch.setenv(gotools.BUILD_JOBS_ENV, "two")
    with pytest.raises(RuntimeError, match="CLOUDLOOP_GO_BUILD_JOBS must be a whole number"):
        gotools.ensure_built(["etcd", "kwok"])
