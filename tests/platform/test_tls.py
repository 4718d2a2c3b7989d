"""``cloudloop.tls.ca_file``: one private, whole file per distinct CA bundle."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path

from cloudloop import tls

PEM = "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n"


def test_one_private_file_per_content() -> None:
    path = tls.ca_file(PEM)
    assert Path(path).read_text() == PEM
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    assert tls.ca_file(PEM) == path
    assert tls.ca_file(PEM.encode()) == path  # bytes and text of one content: one file
    other = tls.ca_file(PEM + "\n")
    assert other != path and Path(other).read_text() == PEM + "\n"


def test_a_removed_file_is_written_again() -> None:
    content = PEM.replace("MIIB", "MIIC")
    path = tls.ca_file(content)
    os.unlink(path)
    again = tls.ca_file(content)
    assert Path(again).read_text() == content


def test_the_writing_process_removes_its_files_on_exit(tmp_path: Path) -> None:
    code = (
        "import os, sys; from cloudloop import tls\n"
        "path = tls.ca_file(sys.argv[1])\n"
        "if os.fork() == 0:\n"
        "    sys.exit(0)  # a forked child exits first: its parent's file stays\n"
        "os.wait(); assert os.path.exists(path); print(path)\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code, PEM],
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, "TMPDIR": str(tmp_path)},
    )
    path = Path(result.stdout.strip())
    assert path.parent == tmp_path
    assert not path.exists()
