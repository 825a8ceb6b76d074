"""torchrun names parbench's root cause (docs/DISTRIBUTED.md, "Timeouts and faults").

parbench runs under the real torchrun here, every rank failing on a bad command line: each
writes $TORCHELASTIC_ERROR_FILE, and torchrun's failure summary quotes the message.
"""
import os
import subprocess
import sys

import pytest

BINARY = os.environ.get("PARBENCH_BINARY")


@pytest.mark.skipif(not BINARY, reason="PARBENCH_BINARY is set by ctest (tests/CMakeLists.txt)")
def test_torchrun_summary_quotes_the_failing_ranks_message():
    env = dict(os.environ, CUDA_VISIBLE_DEVICES="", OMP_NUM_THREADS="1")
    result = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--no-python", "--standalone", "--nproc-per-node=2",
         BINARY, "--batch=0"],
        capture_output=True, text=True, env=env, timeout=300)
    assert result.returncode != 0
    summary = result.stdout + result.stderr
    assert "Root Cause (first observed failure)" in summary, summary
    root_cause = summary.split("Root Cause (first observed failure)")[1]
    assert "traceback : parbench: --batch" in root_cause, root_cause
    assert "exitcode  : 2" in root_cause, root_cause
    assert "<N/A>" not in root_cause.split("error_file")[1].splitlines()[0], root_cause
