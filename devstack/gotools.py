"""Builds the stack's Go binaries from Go modules and caches them by version.

Every tool is one :class:`GoTool` line in :data:`TOOLS`. A tool's module is a small wrapper module
committed under ``gotools/<module>/`` (``go.mod`` + ``go.sum`` pin every version), built with
``GOTOOLCHAIN=local`` and cached under ``<cache>/bin/<module>-<digest>/`` where the digest covers
the wrapper's pins, so a version bump rebuilds and anything else reuses the cached binary. A
wrapper may carry ``patches.json``: exact one-time string replacements in files of its modules
(backported upstream fixes), built from an edited copy of the module (the module cache is never
changed) and covered by the digest.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

GOTOOLS_DIR = Path(__file__).parent / "gotools"

K8S_VERSION = "v1.34.4"
ETCD_VERSION = "v3.6.4"
KWOK_VERSION = "v0.8.0"
#: Cluster API core: v1.12 is the newest release on k8s 0.34 libraries (management cluster 1.34).
CLUSTER_API_VERSION = "v1.12.5"
#: vcsim: v0.46.3 is the last govmomi whose root module holds the command (see gotools/govmomi).
GOVMOMI_VERSION = "v0.46.3"
#: The CSI sidecars and csi-sanity (all on CSI spec v1.13.0; sidecars on k8s 0.36/0.37 libraries).
CSI_SANITY_VERSION = "v5.6.0"
CSI_PROVISIONER_VERSION = "v6.4.0"
CSI_ATTACHER_VERSION = "v4.13.0"
CSI_RESIZER_VERSION = "v2.3.0"
#: The chart's livenessprobe image tag. The Go module proxy does not serve
#: github.com/kubernetes-csi/livenessprobe, so the stack builds a stand-in with the same flags and
#: /healthz answers from csi-lib-utils (gotools/livenessprobe, versioned by its own sources).
LIVENESSPROBE_VERSION = "v2.17.0"
#: csi-snapshotter and the snapshot-controller (one module; its client module holds the CRDs).
CSI_SNAPSHOTTER_VERSION = "v8.7.0"
#: Helm renders, lints and validates the chart in the install tests (not needed by the stack).
HELM_VERSION = "v3.22.0"
#: amazon-ec2-metadata-mock: the instance metadata service the termination handler's IMDS mode
#: polls in tests (the mock aws-node-termination-handler's own end-to-end tests use).
EC2_METADATA_MOCK_VERSION = "v1.13.0"

#: The production-shaped Temporal server and its SQL schema tool (PostgreSQL persistence and
#: visibility; see devstack/temporal_server.py). v1.31.2 is the newest release whose go.mod accepts
#: the machine's Go 1.26.8 (v1.30.9, v1.31.5 and v1.32.x require go >= 1.26.10).
TEMPORAL_SERVER_VERSION = "v1.31.2"

_K8S_LDFLAGS = (
    f"-X k8s.io/component-base/version.gitVersion={K8S_VERSION}",
    "-X k8s.io/component-base/version.gitMajor=1",
    f"-X k8s.io/component-base/version.gitMinor={K8S_VERSION.split('.')[1]}",
    f"-X k8s.io/client-go/pkg/version.gitVersion={K8S_VERSION}",
)


@dataclass(frozen=True)
class GoTool:
    """One binary built from a package of a committed wrapper module."""

    name: str
    module: str
    package: str
    version: str
    ldflags: tuple[str, ...] = ()


TOOLS: dict[str, GoTool] = {
    tool.name: tool
    for tool in (
        GoTool(
            "kube-apiserver",
            "kubernetes",
            "k8s.io/kubernetes/cmd/kube-apiserver",
            K8S_VERSION,
            _K8S_LDFLAGS,
        ),
        GoTool(
            "kube-controller-manager",
            "kubernetes",
            "k8s.io/kubernetes/cmd/kube-controller-manager",
            K8S_VERSION,
            _K8S_LDFLAGS,
        ),
        GoTool(
            "kube-scheduler",
            "kubernetes",
            "k8s.io/kubernetes/cmd/kube-scheduler",
            K8S_VERSION,
            _K8S_LDFLAGS,
        ),
        GoTool("kubectl", "kubernetes", "k8s.io/kubernetes/cmd/kubectl", K8S_VERSION, _K8S_LDFLAGS),
        GoTool("etcd", "etcd", "go.etcd.io/etcd/server/v3", ETCD_VERSION),
        GoTool("kwok", "kwok", "sigs.k8s.io/kwok/cmd/kwok", KWOK_VERSION),
        GoTool("vcsim", "govmomi", "github.com/vmware/govmomi/vcsim", GOVMOMI_VERSION),
        GoTool(
            "csi-sanity",
            "csi-test",
            "github.com/kubernetes-csi/csi-test/v5/cmd/csi-sanity",
            CSI_SANITY_VERSION,
            (f"-X main.VERSION={CSI_SANITY_VERSION}",),
        ),
        GoTool(
            "csi-provisioner",
            "external-provisioner",
            "github.com/kubernetes-csi/external-provisioner/v6/cmd/csi-provisioner",
            CSI_PROVISIONER_VERSION,
            (f"-X main.version={CSI_PROVISIONER_VERSION}",),
        ),
        GoTool(
            "csi-attacher",
            "external-attacher",
            "github.com/kubernetes-csi/external-attacher/v4/cmd/csi-attacher",
            CSI_ATTACHER_VERSION,
            (f"-X main.version={CSI_ATTACHER_VERSION}",),
        ),
        GoTool(
            "csi-resizer",
            "external-resizer",
            "github.com/kubernetes-csi/external-resizer/v2/cmd/csi-resizer",
            CSI_RESIZER_VERSION,
            (f"-X main.version={CSI_RESIZER_VERSION}",),
        ),
        GoTool(
            "livenessprobe",
            "livenessprobe",
            "cloudloop.invalid/gotools/livenessprobe/cmd/livenessprobe",
            "csi-lib-utils-v0.24.0",
        ),
        GoTool(
            "csi-snapshotter",
            "external-snapshotter",
            "github.com/kubernetes-csi/external-snapshotter/v8/cmd/csi-snapshotter",
            CSI_SNAPSHOTTER_VERSION,
            (f"-X main.version={CSI_SNAPSHOTTER_VERSION}",),
        ),
        GoTool(
            "snapshot-controller",
            "external-snapshotter",
            "github.com/kubernetes-csi/external-snapshotter/v8/cmd/snapshot-controller",
            CSI_SNAPSHOTTER_VERSION,
            (f"-X main.version={CSI_SNAPSHOTTER_VERSION}",),
        ),
        GoTool(
            "cluster-api-manager",
            "cluster-api",
            "sigs.k8s.io/cluster-api",
            CLUSTER_API_VERSION,
            (
                f"-X sigs.k8s.io/cluster-api/version.gitVersion={CLUSTER_API_VERSION}",
                "-X sigs.k8s.io/cluster-api/version.gitMajor=1",
                f"-X sigs.k8s.io/cluster-api/version.gitMinor={CLUSTER_API_VERSION.split('.')[1]}",
            ),
        ),
        GoTool(
            "helm",
            "helm",
            "helm.sh/helm/v3/cmd/helm",
            HELM_VERSION,
            (f"-X helm.sh/helm/v3/internal/version.version={HELM_VERSION}",),
        ),
        GoTool(
            "ec2-metadata-mock",
            "ec2-metadata-mock",
            "github.com/aws/amazon-ec2-metadata-mock/cmd/ec2-metadata-mock",
            EC2_METADATA_MOCK_VERSION,
        ),
        GoTool(
            "temporal-server",
            "temporal-server",
            "go.temporal.io/server/cmd/server",
            TEMPORAL_SERVER_VERSION,
        ),
        GoTool(
            "temporal-sql-tool",
            "temporal-server",
            "go.temporal.io/server/cmd/tools/sql",
            TEMPORAL_SERVER_VERSION,
        ),
    )
}


#: What ``cloudloop stack build`` without names builds (``make tools``, so CI's set-up): every tool
#: a test needs, the Temporal server on PostgreSQL included, so no test builds one inside its
#: timeout (a cold Temporal server build outlived the PostgreSQL tests' 300 s on a new machine).
DEFAULT_TOOLS = list(TOOLS)


def cache_root() -> Path:
    """Where built binaries live: ``$CLOUDLOOP_CACHE_DIR`` or ``~/.cache/cloudloop``."""
    explicit = os.environ.get("CLOUDLOOP_CACHE_DIR")
    if explicit:
        return Path(explicit)
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "cloudloop"


PATCHES_FILE = "patches.json"


def _module_digest(module: str) -> str:
    """The wrapper's pins and patches, and the Go sources of a wrapper that has its own."""
    digest = hashlib.sha256()
    folder = GOTOOLS_DIR / module
    for name in ("go.mod", "go.sum", PATCHES_FILE):
        path = folder / name
        if path.exists():
            digest.update(path.read_bytes())
    for path in sorted(folder.rglob("*.go")):
        digest.update(str(path.relative_to(folder)).encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()[:12]


def binary_path(name: str) -> Path:
    """The cached location of a tool's binary (it may not be built yet)."""
    tool = TOOLS[name]
    return (
        cache_root() / "bin" / f"{tool.module}-{tool.version}-{_module_digest(tool.module)}" / name
    )


def _log(message: str) -> None:
    print(f"[cloudloop gotools] {message}", file=sys.stderr, flush=True)


def _go_env(module_dir: Path) -> dict[str, str]:
    env = dict(os.environ)
    env.update({"GOTOOLCHAIN": "local", "GOFLAGS": "-mod=mod", "CGO_ENABLED": "0"})
    env.pop("GOWORK", None)
    return env


def _go_binary_name(package: str) -> str:
    """The file name ``go build -o DIR/`` gives a main package (a ``/vN`` suffix is skipped)."""
    parts = package.rstrip("/").split("/")
    if len(parts) > 1 and re.fullmatch(r"v[0-9]+", parts[-1]):
        return parts[-2]
    return parts[-1]


def _patched(module: str, staging: Path) -> list[str]:
    """``go build`` arguments applying the wrapper's ``patches.json`` (none without one): each
    patched module is copied into ``staging``, edited there and swapped in by a ``replace`` in
    a copy of the wrapper's ``go.mod`` (``-modfile``); Go refuses overlays of the module cache."""
    path = GOTOOLS_DIR / module / PATCHES_FILE
    if not path.exists():
        return []
    replaces: list[str] = []
    for module_path, files in json.loads(path.read_text())["modules"].items():
        copy = staging / "src" / module_path.replace("/", "_")
        shutil.copytree(module_source(module, module_path), copy)
        for relative, edits in files.items():
            target = copy / relative
            text = target.read_text()
            for old, new in edits:
                if text.count(old) != 1:
                    raise RuntimeError(f"{PATCHES_FILE}: {old!r} is not once in {relative}")
                text = text.replace(old, new)
            target.chmod(0o644)
            target.write_text(text)
        replaces.append(f"replace {module_path} => {copy}")
    modfile = staging / "go.mod"
    modfile.write_text(
        (GOTOOLS_DIR / module / "go.mod").read_text() + "\n" + "\n".join(replaces) + "\n"
    )
    shutil.copyfile(GOTOOLS_DIR / module / "go.sum", staging / "go.sum")
    return ["-modfile", str(modfile)]


def _build_module(module: str, tools: list[GoTool]) -> None:
    go = shutil.which("go")
    if go is None:
        raise RuntimeError(
            "the Go toolchain is needed to build the local stack's binaries; install Go"
        )
    module_dir = GOTOOLS_DIR / module
    out_dir = binary_path(tools[0].name).parent
    out_dir.mkdir(parents=True, exist_ok=True)
    staging = out_dir / ".staging"
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir()
    ldflags = " ".join(("-s", "-w", *tools[0].ldflags))
    cmd = [
        go,
        "build",
        "-trimpath",
        "-ldflags",
        ldflags,
        *_patched(module, staging),
        "-o",
        f"{staging}/",
        *[t.package for t in tools],
    ]
    names = ", ".join(t.name for t in tools)
    _log(f"building {names} ({tools[0].version}) from Go modules; a cold build takes minutes")
    started = time.monotonic()
    done = threading.Event()

    def progress() -> None:
        while not done.wait(30):
            _log(f"  still building {names}: {time.monotonic() - started:.0f}s")

    ticker = threading.Thread(target=progress, daemon=True)
    ticker.start()
    try:
        result = subprocess.run(
            cmd, cwd=module_dir, env=_go_env(module_dir), capture_output=True, text=True
        )
    finally:
        done.set()
    if result.returncode != 0:
        raise RuntimeError(f"go build of {names} failed:\n{result.stderr[-4000:]}")
    for tool in tools:
        os.replace(staging / _go_binary_name(tool.package), out_dir / tool.name)
    shutil.rmtree(staging, ignore_errors=True)
    _log(f"built {names} in {time.monotonic() - started:.0f}s")


def ensure_built(names: Iterable[str]) -> dict[str, Path]:
    """Build whatever of ``names`` is not cached yet; return each tool's binary path.

    Tools of one wrapper module are built by a single ``go build``. A file lock per module makes
    concurrent callers (two test sessions, ``dev`` and a test run) wait for one build.
    """
    wanted = [TOOLS[n] for n in dict.fromkeys(names)]
    by_module: dict[str, list[GoTool]] = {}
    for tool in wanted:
        by_module.setdefault(tool.module, []).append(tool)
    for module, tools in by_module.items():
        lock_path = binary_path(tools[0].name).parent.with_suffix(".lock")
        lock_path.parent.mkdir(parents=True, exist_ok=True)
        with open(lock_path, "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            missing = [t for t in tools if not binary_path(t.name).exists()]
            if missing:
                _build_module(module, missing)
    return {t.name: binary_path(t.name) for t in wanted}


def module_source(module: str, module_path: str) -> Path:
    """The source folder of a Go module required by a wrapper (downloaded when missing)."""
    go = shutil.which("go")
    if go is None:
        raise RuntimeError("the Go toolchain is needed; install Go")
    result = subprocess.run(
        [go, "mod", "download", "-json", module_path],
        cwd=GOTOOLS_DIR / module,
        env=_go_env(GOTOOLS_DIR / module),
        capture_output=True,
        text=True,
        check=True,
    )
    return Path(json.loads(result.stdout)["Dir"])


def main(argv: list[str] | None = None) -> None:
    """``python -m devstack.gotools [NAME...]``: build (or find) tools and print paths."""
    names = (argv if argv is not None else sys.argv[1:]) or DEFAULT_TOOLS
    for name, path in ensure_built(names).items():
        print(f"{name}={path}")


if __name__ == "__main__":
    main()
