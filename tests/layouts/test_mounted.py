"""Layout inputs reach only the mount: a path outside ``layouts.source_dir`` (absolute, ``..``,
a symlink leading out), a non-file or a too large file is refused before it is opened, and the
refusal names the requested file, never the mount, the target or any content."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from temporalio.exceptions import ApplicationError
from temporalio.testing import ActivityEnvironment

from activities.layout import LayoutActivities
from activities.layout_cluster import ClusterResourceActivities
from cloudloop import mounted
from cloudloop.cloud.registry import Settings
from cloudloop.layouts.config import ClusterIdentity
from cloudloop.layouts.model import ConfigSource
from cloudloop.messages.layout import ClearClusterInput, DefineInput
from cloudloop.settings import LayoutSettings

SECRET = "outside-s3cr3t-never-read"


@pytest.fixture
def mount(tmp_path: Path) -> Path:
    """The mount (``mount/``) with a file in it and a secret beside it (``outside.yaml``)."""
    inside = tmp_path / "mount"
    inside.mkdir()
    (inside / "cluster.yaml").write_text("kind: AWSClusterConfiguration\n")
    (tmp_path / "outside.yaml").write_text(f"password: {SECRET}\n")
    return inside


@pytest.fixture
def opened(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """Every path :mod:`cloudloop.mounted` opens (``os.open``)."""
    seen: list[str] = []
    real_open = os.open

    def spy(path: Any, flags: int, *args: Any, **kwargs: Any) -> int:
        seen.append(str(path))
        return real_open(path, flags, *args, **kwargs)

    monkeypatch.setattr(os, "open", spy)  # the module calls os.open
    yield seen


def escapes(mount: Path) -> dict[str, str]:
    """Names that lead outside ``mount`` (made where they need a symlink)."""
    (mount / "link.yaml").symlink_to(mount.parent / "outside.yaml")
    (mount / "dir").symlink_to(mount.parent)
    return {
        "absolute": str(mount.parent / "outside.yaml"),
        "etc-passwd": "/etc/passwd",
        "dotdot": "../outside.yaml",
        "dotdot-absolute": f"{mount}/../outside.yaml",
        "symlink": "link.yaml",
        "symlinked-dir": "dir/outside.yaml",
        "the-mount-itself": str(mount),
        "dot": ".",
    }


@pytest.mark.parametrize(
    "case",
    [
        "absolute",
        "etc-passwd",
        "dotdot",
        "dotdot-absolute",
        "symlink",
        "symlinked-dir",
        "the-mount-itself",
        "dot",
    ],
)
def test_a_path_outside_the_mount_is_refused_unopened(
    mount: Path, opened: list[str], case: str
) -> None:
    name = escapes(mount)[case]
    with pytest.raises(mounted.Refused) as refused:
        mounted.read_under(mount, name, max_bytes=1 << 20)
    assert opened == []  # refused before anything was opened
    text = str(refused.value)
    assert text.startswith(name) and "layouts.source_dir" in text and "nothing read" in text
    assert str(mount) not in text.removeprefix(name)  # the mount is named by its setting only
    assert SECRET not in text


def test_a_file_inside_the_mount_is_read_through_its_symlinks(
    mount: Path, opened: list[str]
) -> None:
    # a Secret volume: key -> ..data/key -> ..<timestamp>/key, all inside the mount
    stamp = mount / "..2026_12_01"
    stamp.mkdir()
    (stamp / "key.yaml").write_text("a: 1\n")
    (mount / "..data").symlink_to(stamp.name)
    (mount / "key.yaml").symlink_to("..data/key.yaml")
    for name in ("key.yaml", str(mount / "key.yaml"), "./sub/../key.yaml"):
        read = mounted.read_under(mount, name, max_bytes=100)
        assert read.text == "a: 1\n"
    assert opened and all(p == str(stamp / "key.yaml") for p in opened)  # by its real path
    # a new Secret version (the symlink moved) is another stamp even with the same mtime
    first = mounted.read_under(mount, "key.yaml", max_bytes=100).stamp
    newer = mount / "..2026_12_02"
    newer.mkdir()
    (newer / "key.yaml").write_text("a: 2\n")
    os.utime(newer / "key.yaml", ns=(os.stat(stamp / "key.yaml").st_mtime_ns,) * 2)
    (mount / "..data").unlink()
    (mount / "..data").symlink_to(newer.name)
    again = mounted.read_under(mount, "key.yaml", max_bytes=100)
    assert again.text == "a: 2\n" and again.stamp != first


def test_a_large_file_a_fifo_a_directory_and_a_missing_file(mount: Path, opened: list[str]) -> None:
    (mount / "big.yaml").write_text("x" * 101)
    os.mkfifo(mount / "pipe")
    (mount / "folder").mkdir()
    for name, why in (
        ("big.yaml", "larger than layouts.max_file_bytes"),
        ("pipe", "not a regular file"),
        ("folder", "not a regular file"),
    ):
        with pytest.raises(mounted.Refused, match=why):
            mounted.read_under(mount, name, max_bytes=100)
    assert opened == []  # the FIFO is not even opened (it would block)
    assert mounted.read_under(mount, "big.yaml", max_bytes=101).text == "x" * 101
    with pytest.raises(mounted.Unreadable, match="No such file"):
        mounted.read_under(mount, "absent.yaml", max_bytes=100)
    for bad in ("", "a\x00b"):
        with pytest.raises(mounted.Refused):
            mounted.read_under(mount, bad, max_bytes=100)


def test_not_utf8_is_refused_without_its_bytes(mount: Path) -> None:
    (mount / "bin.yaml").write_bytes(b"ok: \xff\xfe" + SECRET.encode())
    with pytest.raises(mounted.Refused) as refused:
        mounted.read_under(mount, "bin.yaml", max_bytes=100)
    assert str(refused.value) == "bin.yaml: not UTF-8 text"


def _layouts(mount: Path) -> LayoutActivities:
    return LayoutActivities(Settings(layouts=LayoutSettings(source_dir=mount, max_file_bytes=64)))


def _define(activities: LayoutActivities, file: str) -> ApplicationError:
    with pytest.raises(ApplicationError) as raised:
        ActivityEnvironment().run(
            activities.define,
            DefineInput(
                provider="aws",
                source=ConfigSource(file=file),
                cluster=ClusterIdentity(prefix="p", uuid="3c1d62a1-0b9c-4d3e-8f4e-1d2c3b4a5f60"),
            ),
        )
    return raised.value


def test_the_layout_activity_refuses_outside_paths_non_retryably(
    mount: Path, opened: list[str]
) -> None:
    activities = _layouts(mount)
    for name in escapes(mount).values():
        refused = _define(activities, name)
        assert refused.type == "LayoutConfigRefused" and refused.non_retryable
        assert refused.message.startswith(f"configuration {name}: ")
        assert SECRET not in refused.message and str(mount) not in refused.message.split(": ", 1)[1]
    assert opened == []
    (mount / "big.yaml").write_text("x" * 65)
    assert _define(activities, "big.yaml").type == "LayoutConfigRefused"
    missing = _define(activities, "absent.yaml")
    assert missing.type == "LayoutConfigMissing" and missing.non_retryable


def test_destroys_kubeconfig_outside_the_mount_is_refused_before_loading(mount: Path) -> None:
    loaded: list[str] = []

    def factory(path: str) -> Any:
        loaded.append(path)
        raise AssertionError("not reached")

    activities = ClusterResourceActivities(kube_factory=factory, source_dir=mount)
    for name in ("/etc/passwd", "../outside.yaml"):
        with pytest.raises(ApplicationError) as raised:
            ActivityEnvironment().run(
                activities.clear_cluster,
                ClearClusterInput(
                    kubeconfig=name,
                    cluster=ClusterIdentity(prefix="p", uuid="u"),
                    step="verify-cluster",
                ),
            )
        assert raised.value.type == "KubeconfigRefused" and raised.value.non_retryable
        assert raised.value.message.startswith(f"kubeconfig {name}: outside layouts.source_dir")
    assert loaded == []


def test_a_broken_kubeconfig_is_named_without_its_content(mount: Path) -> None:
    import yaml

    from activities.layout_cluster import _kubeconfig_problem

    try:
        yaml.safe_load(f"token: {SECRET}\n  bad: [\n")
    except yaml.YAMLError as exc:
        problem = _kubeconfig_problem(exc)
    assert SECRET not in problem and problem.startswith("not YAML (line ")
    assert _kubeconfig_problem(FileNotFoundError(2, "No such file or directory")) == (
        "No such file or directory"
    )
    assert SECRET not in _kubeconfig_problem(ValueError(SECRET))


def test_the_mount_is_a_setting_the_chart_sets_by_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    assert Settings().layouts.source_dir == Path("/etc/cloudloop/layouts")  # the chart's default
    monkeypatch.setenv("CLOUDLOOP_LAYOUTS__SOURCE_DIR", "/srv/layouts")
    monkeypatch.setenv("CLOUDLOOP_LAYOUTS__MAX_FILE_BYTES", "4096")
    layouts = Settings().layouts
    assert layouts.source_dir == Path("/srv/layouts") and layouts.max_file_bytes == 4096
