"""
One local SparkSession for the whole test run: starting Spark costs
seconds, so every audit test shares this one.  A test module imports the
fixture::

    from conftest_spark import spark  # noqa: F401 (a fixture)

Tests that need Spark are skipped when pyspark is not installed (it is
the C{audit} extra, which C{make test} installs).
"""

import sys

import pytest


@pytest.fixture(scope="session")
def spark():
    pytest.importorskip("pyspark")
    from meshroute.audit.job import AuditSettings, start_spark

    settings = AuditSettings(
        inputs=[], out="", master="local[2]", quiet=True,
        conf={"spark.sql.shuffle.partitions": "2", "spark.driver.memory": "1g",
              "spark.ui.enabled": "false"},
    )
    session = start_spark(settings, sys.stderr)
    yield session
    session.stop()
