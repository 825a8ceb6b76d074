"""`cmake --install BUILD --prefix DIR`: the binaries in DIR/bin, running from there, and the
documentation in DIR/share/doc/parbench."""
import os
import shutil
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def parbench_binary():
    """The binary ctest passes (PARBENCH_BINARY), else build/parbench."""
    return Path(os.environ.get("PARBENCH_BINARY", REPO / "build" / "parbench"))


def cmake():
    """The cmake ctest passes (CMAKE_COMMAND: the one that configured the build), else PATH's."""
    return os.environ.get("CMAKE_COMMAND") or shutil.which("cmake")


@pytest.mark.skipif(not (parbench_binary().parent / "cmake_install.cmake").exists(),
                    reason="no configured build beside the parbench binary: build it (ci/build.sh)")
def test_install_puts_runnable_binaries_and_the_docs_under_the_prefix(tmp_path):
    prefix = tmp_path / "prefix"
    installed = subprocess.run([cmake(), "--install", str(parbench_binary().parent), "--prefix", str(prefix)],
                               capture_output=True, text=True, timeout=300)
    assert installed.returncode == 0, installed.stdout + installed.stderr
    for name in ("parbench", "parbench_bare_loop"):
        binary = prefix / "bin" / name
        assert binary.is_file() and os.access(binary, os.X_OK), name
    # It runs from the prefix, not from the build folder (its libraries found by its RPATH).
    version = subprocess.run([str(prefix / "bin" / "parbench"), "--version"], cwd=tmp_path, capture_output=True,
                             text=True, timeout=120)
    assert version.returncode == 0, version.stderr
    assert version.stdout.splitlines()[0].startswith("parbench "), version.stdout
    docs = prefix / "share" / "doc" / "parbench"
    assert (docs / "README.md").is_file()
    assert (docs / "docs" / "RUNNING.md").is_file()
