"""
One local SparkSession for the whole test run: starting Spark costs
seconds, so every audit test shares this one.  A test module imports the
fixture::

    from support.spark import spark  # noqa: F401 (a fixture)

Tests that need Spark are skipped when pyspark is not installed (it is
the C{audit} extra, which C{make test} installs).
"""

import sys

import pytest


@pytest.fixture(scope="session")
def spark():
    pytest.importorskip("pyspark")
    from meshroute.audit.running import start_spark
    from meshroute.audit.settings import AuditSettings

    settings = AuditSettings(
        inputs=[], out="", master="local[2]", quiet=True,
        # The session serves every audit test of the run: it keeps no
        # more than a few finished queries' plans and jobs (Spark keeps
        # a thousand by default, large ones for the audit's plans), and
        # its heap has room for the audit's concurrent table jobs and a
        # long follower's state (2g ran out of memory for an aggregation
        # once, late in a follower test of make test-slow).
        conf={"spark.sql.shuffle.partitions": "2", "spark.driver.memory": "3g",
              "spark.ui.enabled": "false", "spark.sql.ui.retainedExecutions": "20",
              "spark.ui.retainedJobs": "50", "spark.ui.retainedStages": "50"},
    )
    session = start_spark(settings, sys.stderr)
    yield session
    session.stop()
