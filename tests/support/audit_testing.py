"""
Running the audit job (L{meshroute.audit.job}) on the shared Spark
session (L{support.spark}), for the audit tests and the process tests
that audit their runs.
"""

import io
import json
from pathlib import Path
from meshroute.audit.job import run
from meshroute.audit.running import EXIT_BAD_INPUT
from meshroute.audit.settings import AuditSettings


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
