"""
Running the audit job (L{meshroute.audit.job}) on the shared Spark
session (L{support.spark}), for the audit tests and the process tests
that audit their runs; and what it found, without how it ran
(L{figures}), to compare two runs.
"""

import io
import json
from pathlib import Path
from meshroute.audit.job import run
from meshroute.audit.running import EXIT_BAD_INPUT, EXIT_OK
from meshroute.audit.settings import AuditSettings

#: summary.json keys that say how and when the audit ran, not what it found.
RUN_KEYS = ("audit",)


def audit(spark, inputs, out, **options):
    """
    Run the job on the shared session; return (exit status, stdout,
    stderr, summary or None).
    """
    stdout, stderr = io.StringIO(), io.StringIO()
    settings = AuditSettings(inputs=[str(i) for i in inputs], out=str(out), **options)
    code = run(settings, out=stdout, err=stderr, spark=spark)
    path = Path(out) / "summary.json"
    summary = json.loads(path.read_text()) if code != EXIT_BAD_INPUT and path.exists() else None
    return code, stdout.getvalue(), stderr.getvalue(), summary


def audit_clean(spark, inputs, out) -> dict:
    """
    Audit the event logs of a process test's run, every message
    accounted for at once (no grace for messages in flight: the run
    ended cleanly); assert it exits 0 and finds nothing lost or doubled;
    return its summary.
    """
    code, stdout, stderr, summary = audit(spark, inputs, out, in_flight_grace_s=0.0,
                                          keepalive_limit=100.0)
    assert code == EXIT_OK, stdout + stderr
    messages = summary["messages"]
    assert messages["lost"] == messages["duplicated"] == 0, messages
    return summary


def figures(summary: dict) -> dict:
    return {key: value for key, value in summary.items() if key not in RUN_KEYS}
