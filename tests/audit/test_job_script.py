"""
C{meshroute/audit/job.py} run as a script, as docs/events.md tells
spark-submit to run it: it finds its own package, and its folder's
modules (C{incremental.py}) do not hide the packages of those names the
job's imports need.
"""

import subprocess
import sys
from pathlib import Path

import meshroute.audit.job

JOB = Path(meshroute.audit.job.__file__)


def test_the_job_runs_as_a_script(tmp_path):
    done = subprocess.run([sys.executable, str(JOB), "--help"], cwd=tmp_path,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "--out DIR" in done.stdout
