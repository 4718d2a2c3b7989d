"""Generates the CSI gRPC stubs of ``cloudloop.csi.v1`` from the spec's own ``csi.proto``.

``csi.proto`` comes from the Go module ``github.com/container-storage-interface/spec`` at the
version csi-sanity's wrapper module pins (``gotools/csi-test/go.mod``), downloaded through the Go
module proxy; grpcio-tools compiles it (``csi_pb2.py``/``.pyi``, ``csi_pb2_grpc.py``) and
mypy-protobuf's plugin types the service stubs (``csi_pb2_grpc.pyi``). The output is committed
so the product needs neither Go nor grpcio-tools; ``python -m devstack.csi_stubs`` rewrites it,
``--check`` only compares (a test runs that), so the committed stubs cannot drift from the spec.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from devstack import gotools

SPEC_MODULE = "github.com/container-storage-interface/spec"
#: Where the stubs live, as a path of the Python package (also the proto's path for protoc, so
#: the generated imports are ``from cloudloop.csi.v1 import csi_pb2``).
PACKAGE_PATH = Path("cloudloop/csi/v1")
STUB_FILES = ("csi_pb2.py", "csi_pb2.pyi", "csi_pb2_grpc.py", "csi_pb2_grpc.pyi")
REPO_ROOT = Path(__file__).resolve().parent.parent


def spec_version() -> str:
    """The spec version csi-sanity is built against (its wrapper module's ``require``)."""
    for line in (gotools.GOTOOLS_DIR / "csi-test" / "go.mod").read_text().splitlines():
        parts = line.split()
        if len(parts) >= 2 and parts[0] == SPEC_MODULE:
            return parts[1]
    raise RuntimeError(f"{SPEC_MODULE} is not required by gotools/csi-test/go.mod")


def generate(out_dir: Path) -> dict[str, bytes]:
    """Compile the spec's ``csi.proto`` into ``out_dir``; return the stubs by file name."""
    proto = gotools.module_source("csi-test", f"{SPEC_MODULE}@{spec_version()}") / "csi.proto"
    source = out_dir / "in" / PACKAGE_PATH
    source.mkdir(parents=True)
    shutil.copyfile(proto, source / "csi.proto")
    target = out_dir / "out"
    target.mkdir()
    bin_dir = str(Path(sys.executable).parent)  # protoc-gen-mypy_grpc sits beside python
    env = {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}"}
    subprocess.run(
        [
            sys.executable,
            "-m",
            "grpc_tools.protoc",
            f"-I{out_dir / 'in'}",
            f"--python_out={target}",
            f"--pyi_out={target}",
            f"--grpc_python_out={target}",
            f"--mypy_grpc_out={target}",
            str(PACKAGE_PATH / "csi.proto"),
        ],
        cwd=out_dir / "in",
        env=env,
        check=True,
        capture_output=True,
    )
    return {name: (target / PACKAGE_PATH / name).read_bytes() for name in STUB_FILES}


def stale(root: Path = REPO_ROOT) -> list[str]:
    """The committed stub files that differ from a fresh generation (empty: up to date)."""
    with tempfile.TemporaryDirectory() as tmp:
        fresh = generate(Path(tmp))
    package = root / PACKAGE_PATH
    return [
        name
        for name, content in fresh.items()
        if not (package / name).exists() or (package / name).read_bytes() != content
    ]


def write(root: Path = REPO_ROOT) -> list[str]:
    """Regenerate the committed stubs; return the files that changed."""
    with tempfile.TemporaryDirectory() as tmp:
        fresh = generate(Path(tmp))
    changed = []
    for name, content in fresh.items():
        path = root / PACKAGE_PATH / name
        if not path.exists() or path.read_bytes() != content:
            path.write_bytes(content)
            changed.append(name)
    return changed


def main(argv: list[str] | None = None) -> None:
    """``python -m devstack.csi_stubs [--check]``."""
    args = argv if argv is not None else sys.argv[1:]
    if "--check" in args:
        files = stale()
        if files:
            print(f"stale CSI stubs: {', '.join(files)}; run python -m devstack.csi_stubs")
            sys.exit(1)
        print(f"CSI stubs match spec {spec_version()}")
        return
    changed = write()
    print(f"CSI stubs from spec {spec_version()}: {', '.join(changed) or 'unchanged'}")


if __name__ == "__main__":
    main()
