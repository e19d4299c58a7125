"""
The bare scan (meshroute.audit.bare_scan), the measure the audit's cost
is given against: it reads what the audit reads and counts the lines the
JSON source makes rows of.
"""

import json
import subprocess
import sys

from support.routers import router_env
from support.spark import spark  # noqa: F401 (a fixture)

from meshroute.audit.bare_scan import bare_scan

EVENT = '{"time": %d.5, "router": "router-a", "event": "router.started", "version": "1"}\n'


def logs(tmp_path):
    directory = tmp_path / "events"
    directory.mkdir()
    (directory / "events-a.jsonl").write_text(EVENT % 1 + EVENT % 2 + "garbage\n")
    (directory / "events-b.jsonl").write_text(EVENT % 3)
    (directory / "notes.txt").write_text(EVENT % 4)
    return directory


def test_the_bare_scan_counts_every_line_of_the_files_the_audit_reads(spark, tmp_path):  # noqa: F811
    # The audit reads *.jsonl under a directory; a malformed line is a row too.
    directory = logs(tmp_path)
    files = sorted(str(path) for path in directory.glob("*.jsonl"))
    assert bare_scan(spark, files) == 4


def test_the_bare_scan_command_prints_its_seconds_and_lines(tmp_path):
    directory = logs(tmp_path)
    run = subprocess.run([sys.executable, "-m", "meshroute.audit.bare_scan", str(directory),
                          "--master", "local[1]"],
                         env=router_env(), capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr[-3000:]
    figures = json.loads(run.stdout.splitlines()[-1])
    assert figures["lines"] == 4 and figures["seconds"] > 0


def test_the_bare_scan_command_names_a_missing_input(tmp_path):
    run = subprocess.run([sys.executable, "-m", "meshroute.audit.bare_scan",
                          str(tmp_path / "nowhere")],
                         env=router_env(), capture_output=True, text=True, timeout=600)
    assert run.returncode == 1
    assert "nowhere" in run.stderr
