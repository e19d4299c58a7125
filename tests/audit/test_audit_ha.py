"""
The audit reads the C{ha.*} events of HA pairs: failovers (takeovers and
hand-overs) with their durations, fencing and forced activations, in its
tables, C{summary.json}, the console and the page.  Synthetic logs of a
pair and a witness: both instances write under the router's name, each
to its own data dir's log.
"""

import json

import pytest

from support.spark import spark  # noqa: F401 (a fixture)
from support.event_generator import START
from support.audit_testing import audit

from meshroute.audit import report
from meshroute.audit.running import EXIT_OK

A, B = "router-a", "router-b"


def ha(role: str, at: float, event: str, **fields) -> dict:
    return {"time": START + at, "router": B, "event": event, "group": B, "role": role,
            **fields}


def pair_logs(directory) -> None:
    """
    B's primary serves, is SIGKILLed at +100 (the backup last heard it at
    +100.2 and serves at +104.1: a takeover of 3900 ms), returns, catches
    up and gets the router back by a hand-over of 420.5 ms at +200; the
    backup's instance was fenced on the way and later force-activated.
    """
    logs = {
        "a/events.jsonl": [
            {"time": START, "router": A, "event": "router.started", "version": "1", "pid": 1},
            {"time": START + 300, "router": A, "event": "router.stopped"},
        ],
        "b-primary/events.jsonl": [
            {"time": START, "router": B, "event": "router.started", "version": "1", "pid": 2},
            ha("primary", 1, "ha.state", state="starting", epoch=0, reason=None),
            ha("primary", 2, "ha.epoch", epoch=1, mode="alone"),
            ha("primary", 2, "ha.state", state="active-alone", epoch=1, reason=None),
            ha("primary", 10, "ha.replication", status="in-sync", position=40, lag=0),
            ha("primary", 10, "ha.epoch", epoch=2, mode="replicated"),
            # SIGKILLed at +100; restarted at +150.
            {"time": START + 150, "router": B, "event": "router.started", "version": "1",
             "pid": 3},
            ha("primary", 199.9, "ha.epoch", epoch=5, mode="replicated"),
            ha("primary", 200, "ha.failover", **{"from": "backup", "to": "primary"}, epoch=5,
               kind="handover", duration_ms=420.5),
            {"time": START + 300, "router": B, "event": "router.stopped"},
        ],
        "b-backup/events.jsonl": [
            {"time": START, "router": B, "event": "router.started", "version": "1", "pid": 4},
            ha("backup", 104.0, "ha.epoch", epoch=3, mode="alone"),
            ha("backup", 104.1, "ha.failover", **{"from": "primary", "to": "backup"}, epoch=3,
               kind="takeover", duration_ms=3900.0),
            ha("backup", 120, "ha.fenced", epoch=3, reason="lease-lost"),
            ha("backup", 121, "ha.epoch", epoch=4, mode="alone"),
            ha("backup", 250, "ha.force-activate", step="recorded",
               requested_by="ops@host-1", epoch=None),
            {"time": START + 300, "router": B, "event": "router.stopped"},
        ],
    }
    for name, records in logs.items():
        path = directory / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("".join(json.dumps(r) + "\n" for r in records))


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
