"""Builds ``deploy/Dockerfile`` without a daemon: buildah (chroot isolation, vfs storage).

No container registry is reachable from the project's machines, so the Dockerfile's base image
(``ARG BASE_IMAGE``, an exact ``debian:12.x-slim`` tag) cannot be pulled. It is made here the way
Debian's official images are made — a ``minbase`` bookworm root file system, by ``mmdebstrap`` from
Debian's archive — and tagged with the Dockerfile's own base name in a private image store, so the
Dockerfile builds unchanged with ``--pull=never``. Everything else comes from where a user's build
gets it: Debian's packages and PyPI (the locks' hashes checked).

Rules: the store lives in a folder the caller owns and removes; the base root file system is cached
for a week under the Go tools' cache root; the host's CA bundle is mounted into the build only
(``PIP_CERT``), for machines behind a TLS-intercepting proxy, and never reaches the image.
"""

from __future__ import annotations

import os
import re
import shutil
import ssl
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from devstack import gotools

REPO = Path(__file__).resolve().parents[2]
DOCKERFILE = REPO / "deploy" / "Dockerfile"
#: Debian tools the builds need (``make installdeps`` installs them when missing).
TOOLS = ("buildah", "mmdebstrap")
BASE_MAX_AGE_S = 7 * 24 * 3600


def missing_tools() -> list[str]:
    return [tool for tool in TOOLS if shutil.which(tool) is None]


def dockerfile_base(dockerfile: Path = DOCKERFILE) -> str:
    """The default of the Dockerfile's ``ARG BASE_IMAGE``."""
    found = re.search(r"^ARG BASE_IMAGE=(\S+)$", dockerfile.read_text(), re.MULTILINE)
    if found is None:
        raise ValueError(f"{dockerfile} declares no ARG BASE_IMAGE=<image>")
    return found.group(1)


def debian_suite(image: str) -> str:
    """The Debian suite of a ``debian:<major>[.<minor>]-slim`` or ``debian:<codename>-...`` tag."""
    tag = image.rsplit(":", 1)[-1]
    major = tag.split(".", 1)[0].split("-", 1)[0]
    return {"12": "bookworm", "13": "trixie"}.get(major, major)


def base_rootfs(suite: str) -> Path:
    """A ``minbase`` root file system of ``suite`` as a tar, made by mmdebstrap (cached a week)."""
    folder = gotools.cache_root() / "image"
    folder.mkdir(parents=True, exist_ok=True)
    tar = folder / f"debian-{suite}-minbase.tar"
    if tar.exists() and time.time() - tar.stat().st_mtime < BASE_MAX_AGE_S:
        return tar
    partial = tar.with_suffix(".partial.tar")
    subprocess.run(
        ["mmdebstrap", "--quiet", "--variant=minbase", "--mode=auto", suite, str(partial)],
        check=True,
        capture_output=True,
        timeout=900,
    )
    os.replace(partial, tar)
    return tar


def ca_bundle() -> Path | None:
    """The host's CA bundle (it trusts whatever proxy stands between this machine and PyPI)."""
    for candidate in (os.environ.get("PIP_CERT"), ssl.get_default_verify_paths().cafile):
        if candidate and Path(candidate).is_file():
            return Path(candidate)
    return None


@dataclass(frozen=True)
class Buildah:
    """buildah over a private vfs store under ``root`` (chroot isolation: no daemon, no runtime)."""

    root: Path

    def command(self, *args: str) -> list[str]:
        return [
            "buildah",
            "--root",
            str(self.root / "storage"),
            "--runroot",
            str(self.root / "run"),
            "--storage-driver",
            "vfs",
            *args,
        ]

    def run(self, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            self.command(*args), capture_output=True, text=True, timeout=timeout, check=False
        )

    def check(self, *args: str, timeout: float = 120) -> str:
        result = self.run(*args, timeout=timeout)
        if result.returncode != 0:
            raise RuntimeError(f"buildah {' '.join(args)} failed:\n{result.stderr[-4000:]}")
        return result.stdout.strip()

    def import_rootfs(self, tar: Path, name: str) -> None:
        """Commit a root file system tar as image ``name``."""
        container = self.check("from", "scratch")
        try:
            self.check("add", container, str(tar), "/", timeout=600)
            self.check("commit", "--quiet", container, name, timeout=600)
        finally:
            self.run("rm", container)

    def build(self, dockerfile: Path, context: Path, tag: str, log: Path) -> None:
        """``buildah bud`` of ``dockerfile``; the whole output goes to ``log``."""
        args = ["bud", "--isolation", "chroot", "--pull=never", "-f", str(dockerfile), "-t", tag]
        bundle = ca_bundle()
        if bundle is not None:
            args += ["-v", f"{bundle}:/run/build-ca.crt:ro"]
            args += ["--build-arg", "PIP_CERT=/run/build-ca.crt"]
        with log.open("w") as out:
            result = subprocess.run(
                ["nice", "-n", "10", *self.command(*args, str(context))],
                stdout=out,
                stderr=subprocess.STDOUT,
                timeout=1800,
                check=False,
            )
        if result.returncode != 0:
            tail = "\n".join(log.read_text().splitlines()[-40:])
            raise RuntimeError(f"image build failed (log: {log}):\n{tail}")

    def config(self, image: str, field: str) -> str:
        return self.check("inspect", "--type", "image", "--format", f"{{{{{field}}}}}", image)

    def run_in(self, image: str, *argv: str, user: str) -> subprocess.CompletedProcess[str]:
        """Run ``argv`` in a fresh container of ``image`` as ``user``; the container is removed."""
        container = self.check("from", "--pull=never", image)
        try:
            return self.run("run", "--isolation", "chroot", "--user", user, container, "--", *argv)
        finally:
            self.run("rm", container)

    def remove_all(self) -> None:
        self.run("rm", "--all")
        self.run("rmi", "--all", "--force", timeout=600)
