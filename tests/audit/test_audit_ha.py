"""
The audit reads the C{ha.*} events of HA pairs: failovers (takeovers and
hand-overs) with their durations, fencing and forced activations, in its
tables, C{summary.json}, the console and the page.  Synthetic logs of a
pair and a witness: both instances write under the router's name, each
to its own data dir's log.
"""

import pytest

from support.spark import spark  # noqa: F401 (a fixture)
from support.event_generator import START
from support.audit_testing import audit
from support.audit_meshes import B, pair_logs

from meshroute.audit import report
from meshroute.audit.running import EXIT_OK


@pytest.fixture(scope="module")
def ha_audit(spark, tmp_path_factory):  # noqa: F811
    directory = tmp_path_factory.mktemp("ha")
    pair_logs(directory / "logs")
    return audit(spark, [directory / "logs"], directory / "audit"), directory / "audit"


def test_failovers_and_their_durations_in_the_summary(ha_audit):
    (code, stdout, stderr, summary), _ = ha_audit
    assert code == EXIT_OK
    assert summary["ha"] == {
        "failovers": 2, "takeovers": 1, "handovers": 1,
        "failover_ms": {"p50": 420.5, "p99": 3900.0, "max": 3900.0},
        "fenced": 1, "epochs": 5, "alone_epochs": 3, "forced_activations": 1,
        "list": [
            {"time_utc": report.stamp(START + 104.1), "router": B, "group": B,
             "from": "primary", "to": "backup", "epoch": 3, "kind": "takeover",
             "duration_ms": 3900.0},
            {"time_utc": report.stamp(START + 200), "router": B, "group": B,
             "from": "backup", "to": "primary", "epoch": 5, "kind": "handover",
             "duration_ms": 420.5},
        ],
    }


def test_forced_activations_are_a_warning_not_a_broken_promise(ha_audit):
    (code, stdout, stderr, summary), _ = ha_audit
    assert summary["ok"] is True
    assert any("1 forced activation(s)" in w for w in summary["warnings"])


def test_the_console_names_the_failovers(ha_audit):
    (code, stdout, stderr, summary), _ = ha_audit
    assert ("ha: 2 failover(s) (1 takeover(s), 1 hand-over(s)), took p50 420.5 ms, "
            "max 3900.0 ms; 1 fenced, 1 forced activation(s)") in stdout.splitlines()


def test_the_tables_and_the_page(ha_audit, spark):  # noqa: F811
    _, out = ha_audit
    rows = [r.asDict() for r in spark.read.parquet(str(out / "tables" / "failovers")).collect()]
    assert sorted((r["time"] - START, r["kind"], r["duration_ms"]) for r in rows) == [
        (pytest.approx(104.1), "takeover", 3900.0), (200.0, "handover", 420.5)]
    groups = [r.asDict() for r in spark.read.parquet(str(out / "tables" / "ha_groups")).collect()]
    assert [(g["router"], g["group"], g["role"], g["failovers"], g["fenced"], g["epochs"])
            for g in sorted(groups, key=lambda g: g["role"])] == [
        (B, B, "backup", 1, 1, 2), (B, B, "primary", 1, 0, 3)]
    page = (out / "report.html").read_text()
    assert "HA failovers" in page and "takeover" in page and "3900" in page


def test_a_mesh_without_ha_reports_none():
    summary = report.ha_summary({}, [])
    assert summary["failovers"] == 0 and summary["failover_ms"] == {
        "p50": None, "p99": None, "max": None}
    assert report.ha_lines(summary) == []
