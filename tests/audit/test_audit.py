"""
The mesh audit (meshroute.audit): synthetic logs with known losses,
duplicates, latencies and link failures give exactly those numbers; a
real routed run through an in-memory line A–B–C with a partition and a
crash audits clean; bad input is reported, never crashes the job.

Every Spark test shares one local session (L{support.spark.spark}), and
the expensive audits run once per module (fixtures) with several tests
reading their results.
"""

import json
import math
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from support.spark import spark  # noqa: F401 (a fixture)
from support.event_generator import START, MeshLog
from meshroute.testing.memory_mesh import MemoryMesh
from support.routers import mesh  # noqa: F401 (a fixture)
from support.mesh_testing import line

from meshroute import cli
from meshroute.audit import report
from meshroute.audit.inputs import AuditInputError, resolve_inputs
from meshroute.audit.job import parse_conf
from meshroute.audit.running import EXIT_BAD_INPUT, EXIT_BROKEN_PROMISES, EXIT_OK, session_conf
from meshroute.audit.settings import AuditSettings
from meshroute.audit.tables import TABLES
from support.audit_testing import audit
from support.audit_meshes import A, B, C, D, synthetic_mesh


def nearest_rank(values, p):
    ordered = sorted(values)
    return ordered[max(math.ceil(p * len(ordered)), 1) - 1]


# -- synthetic logs with known numbers -------------------------------------------


@pytest.fixture(scope="module")
def synthetic(spark, tmp_path_factory):  # noqa: F811
    directory = tmp_path_factory.mktemp("synthetic")
    made = synthetic_mesh(directory / "logs")
    out = directory / "audit"
    code, stdout, stderr, summary = audit(spark, [directory / "logs"], out)
    tables = {name: [row.asDict() for row in spark.read.parquet(str(out / "tables" / name))
                     .collect()] for name in TABLES}
    return made, code, stdout, stderr, summary, tables, out


def test_synthetic_verdict_and_exit_status(synthetic):
    made, code, stdout, stderr, summary, tables, out = synthetic
    assert code == EXIT_BROKEN_PROMISES
    assert summary["ok"] is False
    reasons = " ".join(summary["reasons"])
    assert "3 persistent message(s) lost" in reasons
    assert "2 message(s) enqueued more than once, 3 extra copies" in reasons
    assert "1 keepalive close(s) came later than 6" in reasons
    assert "NOT OK" in stdout
    warnings = " ".join(summary["warnings"])
    for text in ("malformed line", "still in flight", "never arrived", "without their "
                 "message.accepted", "cannot be checked"):
        assert text in warnings
    assert "audit [" in stderr and "read " in stderr


def test_synthetic_route_counts_are_exact(synthetic):
    made, code, stdout, stderr, summary, tables, out = synthetic
    found = {(r["origin"], r["dest"]): r for r in tables["routes"]}
    assert set(found) == set(made.expected.routes)
    for route, expected in made.expected.routes.items():
        for key in report.MESSAGE_COUNTS:
            if key == "duplicates_dropped":
                continue
            assert found[route][key] == expected[key], (route, key)
    assert found[(A, "q@router-c")]["duplicates_dropped"] == 1
    totals = summary["messages"]
    for key in ("accepted", "enqueued", "consumed", "lost", "in_flight", "dead_lettered",
                "dropped", "lost_non_persistent", "duplicated", "duplicate_copies",
                "orphans", "unobserved"):
        assert totals[key] == made.expected.total(key), key
    assert totals["accepted"] == 200 + 3 + 2 + 4 + 20 + 10 + 1 + 2 + 3 + 2


def test_synthetic_latency_percentiles(synthetic):
    made, code, stdout, stderr, summary, tables, out = synthetic
    found = {(r["origin"], r["dest"]): r for r in tables["routes"]}
    for route, latencies in made.expected.latencies.items():
        row = found[route]
        for p in (0.5, 0.95, 0.99):
            expected = nearest_rank(latencies, p)
            assert row[f"latency_p{round(p * 100)}_ms"] == pytest.approx(expected, abs=0.002)
        assert row["latency_max_ms"] == pytest.approx(max(latencies), abs=0.002)
    a_to_c = found[(A, "q@router-c")]
    assert a_to_c["latency_max_ms"] == pytest.approx(200.0, abs=0.002)
    histogram = [h for h in tables["latency_histogram"]
                 if (h["origin"], h["dest"]) == (A, "q@router-c")]
    assert sum(h["count"] for h in histogram) == a_to_c["enqueued"]
    assert all(h["lower_ms"] < h["upper_ms"] for h in histogram)


def test_synthetic_message_problems_name_the_messages(synthetic):
    made, code, stdout, stderr, summary, tables, out = synthetic
    fates = Counter(p["fate"] for p in tables["message_problems"])
    assert fates["lost"] == 3
    assert fates["lost-non-persistent"] == 3
    assert fates["orphan"] == 0  # an orphan that was enqueued is not a problem message
    assert sum(p["duplicated"] for p in tables["message_problems"]) == 2
    lost = [p for p in tables["message_problems"] if p["fate"] == "lost"]
    assert {p["last_held_by"] for p in lost} == {B}  # forwarded A → B, never further


def test_synthetic_links(synthetic):
    made, code, stdout, stderr, summary, tables, out = synthetic
    found = {(r["router"], r["peer"]): r for r in tables["links"]}
    assert set(found) == set(made.expected.links)
    for pair, expected in made.expected.links.items():
        row = found[pair]
        for key in ("connections", "sessions", "rejections", "not_closed",
                    *[f"closed_{r.replace('-', '_')}" for r in
                      ("keepalive", "stage-timeout", "peer-closed", "rejected", "shutdown")]):
            assert row[key] == expected[key], (pair, key)
        assert row["keepalive_closes"] == expected["keepalive_closes"], pair
    for pair in ((A, B), (C, B), (D, A)):
        assert found[pair]["time_in_delivery_s"] == pytest.approx(made.expected.delivery_s[pair],
                                                                  abs=1e-3), pair
    # B crashed with its ends of the first A–B and B–C links open: they
    # lasted until B's last event before the restart.
    first = [s for s in tables["link_sessions"] if s["router"] == B and s["boot"] == 1
             and s["delivery_at"] is not None]
    assert sorted((s["peer"], s["ended_by"]) for s in first) == [
        (A, "router-restart"), (C, "router-restart")]
    last_event = max(s["ended"] for s in first)
    assert all(s["ended"] == last_event < START + 110 for s in first)


def test_synthetic_keepalive_closes(synthetic):
    made, code, stdout, stderr, summary, tables, out = synthetic
    closes = {(k["router"], round(k["silence_intervals"] or 0, 1)): k
              for k in tables["keepalive_closes"]}
    assert set(closes) == {(A, 5.0), (D, 7.5), (D, 4.6), (C, 0)}
    assert closes[(D, 7.5)]["keepalive_late"] is True
    assert closes[(D, 7.5)]["silence_s"] == pytest.approx(7.5, abs=1e-3)
    assert closes[(A, 5.0)]["keepalive_late"] is False
    assert closes[(C, 0)]["last_heard"] is None  # the old version did not log it
    links = summary["links"]
    assert links["keepalive_closes"] == 4
    assert links["keepalive_checked"] == 3
    assert links["keepalive_late"] == 1
    assert links["keepalive_max_intervals"] == pytest.approx(7.5, abs=1e-3)
    assert links["closes"]["keepalive"] == 4
    assert links["closes"]["stage-timeout"] == 1


def test_synthetic_routers_rejections_and_sessions(synthetic):
    made, code, stdout, stderr, summary, tables, out = synthetic
    rejections = {(r["router"], r["code"], r["by"]): r["count"] for r in tables["rejections"]}
    assert rejections == dict(made.expected.rejections)
    denials = {(r["router"], r["user"], r["action"]): r["count"] for r in tables["denials"]}
    assert denials == dict(made.expected.denials)
    assert denials[(A, "orders-app", "send")] == 2
    assert "4 client request(s) denied" in stderr
    routers = {r["router"]: r for r in tables["routers"]}
    assert set(routers) == {A, B, C, D}
    for router in (A, B, C, D):
        for key in report.SESSION_COUNTS:
            assert routers[router][key] == made.expected.sessions[router][key], (router, key)
    assert routers[B]["starts"] == 2
    assert routers[C]["clean_stops"] == 0  # its last line, router.stopped, was cut short
    assert [r["clean_stops"] for r in (routers[A], routers[B], routers[D])] == [1, 1, 1]
    boots = [(b["router"], b["boot"], b["clean_stop"]) for b in tables["boots"]]
    assert (B, 1, False) in boots and (B, 2, True) in boots
    assert summary["routers"]["session_disconnected"] == 2
    assert summary["routers"]["per_router"][A]["session_expired"] == 0


def test_synthetic_malformed_lines_with_file_and_line(synthetic):
    made, code, stdout, stderr, summary, tables, out = synthetic
    found = {(row["file"], row["line"]): row["problem"] for row in tables["malformed_lines"]}
    assert set(found) == set(made.expected.malformed)
    kinds = {"truncated": "truncated JSON object", "garbage": "not a JSON object",
             "blank": "blank line", "type": "a field has the wrong type",
             "missing": "time, router or event missing or of the wrong type"}
    for where, kind in made.expected.malformed.items():
        assert found[where] == kinds[kind], where
    assert summary["inputs"]["malformed"] == len(made.expected.malformed)
    first = summary["inputs"]["malformed_lines"][0]
    assert first["file"].endswith("router-a/events.jsonl") and first["line"] == 6
    assert f"{first['file']}:6 (truncated JSON object)" in stdout
    inputs = {row["file"]: row for row in tables["inputs"]}
    assert sum(row["malformed"] for row in inputs.values()) == len(made.expected.malformed)


def test_synthetic_outputs_on_disk(synthetic):
    made, code, stdout, stderr, summary, tables, out = synthetic
    for name in TABLES:
        assert (out / "tables" / name / "_SUCCESS").exists(), name
    page = (out / "report.html").read_text()
    assert page.count("<svg") >= 3
    assert "<script" not in page and "src=" not in page and "<link" not in page
    assert "router-a → q@router-c" in page
    assert "keepalive" in page
    assert summary["audit"]["spark_version"]
    assert summary["settings"]["in_flight_grace_s"] == 60
    # No topic traffic: the topic tables are there, empty.
    for name in ("subscriptions", "topic_links", "topic_routers", "topic_problems"):
        assert tables[name] == [], name
    assert summary["topics"]["publications"] == summary["topics"]["links"]["sent"] == 0


# -- a real routed run -----------------------------------------------------------


class _Consumer:
    def __init__(self, router, queue: str) -> None:
        self.received = []
        self._subscription = router.engine.queues.subscribe(queue, self._deliver, 0)
        self._subscription.add_credit(1000)

    def _deliver(self, delivery) -> None:
        self.received.append(delivery.message.msg_id)
        self._subscription.ack([delivery.delivery_id])
        self._subscription.add_credit(1)


@pytest.fixture(scope="module")
def memory_run(spark, tmp_path_factory):  # noqa: F811
    """
    Line A–B–C in memory: 3000 persistent messages A → q@C with B
    partitioned mid-stream (keepalive closes), then B crashed and
    restarted, 200 non-persistent ones; every router stopped; audited.
    """
    directory = tmp_path_factory.mktemp("memory")
    memory = MemoryMesh(directory / "logs")
    line(memory)
    consumer = _Consumer(memory.routers[C], "q")
    engine = memory.routers[A].engine
    sent = [engine.submit("q@router-c", b"%d" % i, {}, True) for i in range(1000)]
    memory.network.flush()
    memory.partition(B)
    sent += [engine.submit("q@router-c", b"%d" % i, {}, True) for i in range(1000, 2000)]
    memory.run(3)
    memory.heal(B)
    memory.run(5)
    config = memory.routers[B].config
    sent += [engine.submit("q@router-c", b"%d" % i, {}, True) for i in range(2000, 2500)]
    memory.network.flush()
    memory.crash(B)
    sent += [engine.submit("q@router-c", b"%d" % i, {}, True) for i in range(2500, 3000)]
    memory.run(2)
    memory.start(config)
    memory.run(10)
    sent += [engine.submit("q@router-c", b"np%d" % i, {}, False) for i in range(200)]
    memory.run(2)
    assert all(d.called for d in sent)
    received = list(consumer.received)
    memory.stop_all()
    out = directory / "audit"
    code, stdout, stderr, summary = audit(spark, [directory / "logs"], out, in_flight_grace_s=0.0)
    return received, code, stdout, summary


def test_memory_mesh_run_audits_clean(memory_run):
    received, code, stdout, summary = memory_run
    assert len(received) == len(set(received)) == 3200
    assert code == EXIT_OK, stdout
    assert summary["ok"] is True and summary["reasons"] == []
    messages = summary["messages"]
    assert messages["accepted"] == messages["enqueued"] == messages["consumed"] == 3200
    for key in ("lost", "lost_non_persistent", "in_flight", "duplicated", "orphans",
                "unobserved", "dead_lettered", "dropped"):
        assert messages[key] == 0, key
    [route] = summary["routes"]
    assert (route["origin"], route["dest"], route["accepted"]) == (A, "q@router-c", 3200)
    assert summary["inputs"]["malformed"] == 0
    assert "OK: every message" in stdout


def test_memory_mesh_run_link_failures_are_seen(memory_run):
    received, code, stdout, summary = memory_run
    links = summary["links"]
    assert links["closes"].get("keepalive", 0) >= 1  # the partition
    assert links["keepalive_late"] == 0
    assert 4 <= links["keepalive_min_intervals"] <= links["keepalive_max_intervals"] <= 6
    assert links["closes"].get("shutdown", 0) >= 2
    assert summary["routers"]["starts"] == 4  # B twice


def test_real_routers_audit_clean(spark, mesh, tmp_path):  # noqa: F811
    """
    Real C{twistd} routers in a line A–B–C, 300 messages sent with
    C{meshroute send}, B frozen (SIGSTOP) until A drops it by keepalive,
    300 more sent meanwhile, B resumed, all 600 received, every router
    stopped: the audit of their logs reports zero lost, zero duplicated
    and 600 accepted, enqueued and consumed.  (The keepalive limit is
    relaxed here: how promptly a loaded test machine notices a frozen
    peer is the business of the keepalive tests, not of this one.)
    """
    routing = {"reroute-delay": "1s"}
    c = mesh.router(C, clients=True, routing=routing)
    b = mesh.router(B, connect=[c], clients=True, routing=routing)
    a = mesh.router(A, connect=[b], clients=True, routing=routing)
    processes = mesh.start(a, b, c)
    a_proc, b_proc, c_proc = processes
    a_proc.wait_route(C, next_hop=B)
    consumer = mesh.start_receive(c_proc, "q", 600, 120)
    first = mesh.send(a_proc, "q@router-c", 300)
    assert first.returncode == 0, first.stderr
    b_proc.sigstop()
    a_proc.wait_for(lambda: B not in a_proc.delivery_links(), timeout=30,
                    what="router-a to drop the frozen router-b")
    second = mesh.send(a_proc, "q@router-c", 300)
    assert second.returncode == 0, second.stderr
    b_proc.sigcont()
    assert consumer.wait(120) == 0, consumer.stderr
    for process in processes:
        assert process.terminate() == 0
    code, stdout, stderr, summary = audit(
        spark, [spec.events_dir for spec in (a, b, c)], tmp_path / "audit",
        in_flight_grace_s=0.0, keepalive_limit=100.0)
    assert code == EXIT_OK, stdout + stderr
    messages = summary["messages"]
    assert messages["accepted"] == messages["enqueued"] == messages["consumed"] == 600
    assert messages["lost"] == messages["duplicated"] == messages["in_flight"] == 0
    assert summary["links"]["closes"].get("keepalive", 0) >= 1
    assert summary["routers"]["clean_stops"] == 3
    assert summary["inputs"]["malformed"] == 0


# -- bad input -------------------------------------------------------------------


def test_empty_directory_is_bad_input(tmp_path, capsys):
    (tmp_path / "logs").mkdir()
    code = cli.main(["audit", str(tmp_path / "logs"), "--out", str(tmp_path / "out")])
    assert code == EXIT_BAD_INPUT
    err = capsys.readouterr().err
    assert "logs: no *.jsonl event logs in it" in err
    assert not (tmp_path / "out").exists()


def test_missing_path_and_unmatched_glob_are_bad_input(tmp_path):
    with pytest.raises(AuditInputError, match="no such file or directory"):
        resolve_inputs([str(tmp_path / "nothing")])
    with pytest.raises(AuditInputError, match="no file matches"):
        resolve_inputs([str(tmp_path / "*" / "events.jsonl")])
    with pytest.raises(AuditInputError, match="no event logs given"):
        resolve_inputs([])


@pytest.mark.parametrize("lines, bad_line", [
    ([b"x" * 17], 1),
    ([b"{}", b"x" * 9 + b"y" * 8], 2),
    ([b"a" * 16, b"b" * 16, b"c" * 40, b"d"], 3),
])
def test_a_line_longer_than_the_limit_is_bad_input(tmp_path, lines, bad_line):
    """
    A line longer than the limit (a 300 MB single-line file, say) stops the
    audit before Spark, naming the file and the line; lines up to the
    limit are read.
    """
    log = tmp_path / "events.jsonl"
    log.write_bytes(b"\n".join(lines) + b"\n")
    with pytest.raises(AuditInputError, match=f"events.jsonl: line {bad_line} is longer than 16"):
        resolve_inputs([str(log)], max_line_bytes=16)
    log.write_bytes(b"\n".join(line[:16] for line in lines))
    assert resolve_inputs([str(log)], max_line_bytes=16) == [str(log)]


def test_the_command_refuses_an_over_long_line_with_exit_status_1(tmp_path, capsys,
                                                                  monkeypatch):
    from meshroute.audit import inputs

    monkeypatch.setattr(inputs, "MAX_EVENT_LINE_BYTES", 1000)
    (tmp_path / "events.jsonl").write_bytes(b"{" + b" " * 5000 + b"}")
    code = cli.main(["audit", str(tmp_path), "--out", str(tmp_path / "out")])
    assert code == EXIT_BAD_INPUT
    err = capsys.readouterr().err
    assert "events.jsonl: line 1 is longer than 1000 bytes" in err
    assert not (tmp_path / "out").exists()


def test_inputs_resolve_files_directories_globs(tmp_path):
    for router in ("a", "b"):
        (tmp_path / router).mkdir()
        (tmp_path / router / "events.jsonl").write_text("{}\n")
    (tmp_path / "b" / "notes.txt").write_text("not a log")
    (tmp_path / "single.log").write_text("{}\n")
    logs = [str(tmp_path / r / "events.jsonl") for r in ("a", "b")]
    assert resolve_inputs([str(tmp_path / "a"), str(tmp_path / "b")]) == logs
    assert resolve_inputs([str(tmp_path / "*" / "events.jsonl")]) == logs
    assert resolve_inputs([str(tmp_path / "single.log"), logs[0], logs[0]]) == [
        str(tmp_path / "single.log"), logs[0]]
    assert resolve_inputs(["hdfs:///mesh/*/events.jsonl"]) == ["hdfs:///mesh/*/events.jsonl"]


def test_empty_files_are_bad_input(spark, tmp_path):  # noqa: F811
    (tmp_path / "logs").mkdir()
    (tmp_path / "logs" / "events.jsonl").write_text("")
    code, stdout, stderr, summary = audit(spark, [tmp_path / "logs"], tmp_path / "out")
    assert code == EXIT_BAD_INPUT
    assert "the event logs are empty" in stderr
    assert stdout == ""


def test_only_malformed_lines_is_bad_input(spark, tmp_path):  # noqa: F811
    path = tmp_path / "events.jsonl"
    path.write_text('{"time": 1, "rou\nnot json\n')
    code, stdout, stderr, summary = audit(spark, [path], tmp_path / "out")
    assert code == EXIT_BAD_INPUT
    assert "all 2 lines are malformed" in stderr


def test_bad_options_exit_1(tmp_path, capsys):
    logs = tmp_path / "events.jsonl"
    logs.write_text("{}\n")
    assert cli.main(["audit", str(logs)]) == EXIT_BAD_INPUT  # no --out
    assert "--out" in capsys.readouterr().err
    assert cli.main(["audit", str(logs), "--out", "x", "--conf", "novalue"]) == EXIT_BAD_INPUT
    assert "key=value" in capsys.readouterr().err
    assert cli.main(["audit", str(logs), "--out", "x", "--in-flight-grace", "-1"]) == 1
    assert "must not be negative" in capsys.readouterr().err
    assert cli.main(["audit", "--out", "x"]) == EXIT_BAD_INPUT  # no EVENTS
    assert "EVENTS" in capsys.readouterr().err


# -- pieces ----------------------------------------------------------------------


def test_conf_and_local_session_settings():
    assert parse_conf(["a=1", "spark.x=y=z"]) == {"a": "1", "spark.x": "y=z"}
    with pytest.raises(ValueError):
        parse_conf(["=1"])
    conf = session_conf("local[3]", {"spark.sql.shuffle.partitions": "7"}, quiet=True, tty=True)
    assert conf["spark.driver.bindAddress"] == conf["spark.driver.host"] == "127.0.0.1"
    assert conf["spark.ui.enabled"] == "false"
    assert conf["spark.sql.shuffle.partitions"] == "7"  # the user's setting wins
    assert conf["spark.ui.showConsoleProgress"] == "false"
    local = session_conf("local[2]", {}, False, False)
    assert local["spark.sql.shuffle.partitions"] == "4"
    assert local["spark.sql.adaptive.enabled"] == "false"
    remote = session_conf("spark://h:7077", {}, quiet=False, tty=True)
    assert "spark.driver.host" not in remote and "spark.sql.shuffle.partitions" not in remote
    assert "spark.sql.adaptive.enabled" not in remote


def test_cli_options_map_to_settings(monkeypatch, tmp_path):
    seen = []
    monkeypatch.setattr("meshroute.audit.job.run", lambda settings, out: seen.append(settings) or 0)
    code = cli.main(["audit", "a.jsonl", "b", "--out", str(tmp_path), "--master", "spark://h:7077",
                     "--conf", "spark.executor.memory=4g", "--conf", "x=1",
                     "--in-flight-grace", "30", "--keepalive-limit", "7", "--quiet"])
    assert code == 0
    [settings] = seen
    assert settings == AuditSettings(inputs=["a.jsonl", "b"], out=str(tmp_path),
                                     master="spark://h:7077",
                                     conf={"spark.executor.memory": "4g", "x": "1"},
                                     in_flight_grace_s=30.0, keepalive_limit=7.0, quiet=True)


def test_in_flight_grace_and_a_destination_stopped_at_the_end(spark, tmp_path):  # noqa: F811
    """
    Not enqueued: lost only if accepted more than the grace before the end
    of what the destination's log can show (its orderly stop, when it was
    down at the end).
    """
    from meshroute.audit import read, views

    log = MeshLog([A, B])
    for router in (A, B):
        log.boot(router, START)
    log.message([A, B], START + 10, fate="lost")     # 90 s before B's stop: lost
    log.message([A, B], START + 70, fate="lost")     # 30 s before B's stop: in flight
    log.message([A, B], START + 150, fate="lost")    # after B stopped: in flight
    log.stop(B, START + 100)
    log.emit(A, START + 400, "router.stopped")
    paths = log.write(tmp_path)
    logs = read.read_logs(spark, list(paths.values()))
    routers = views.routers(logs.events, START + 400)
    fates = {r["accepted_time"] - START: r["fate"]
             for r in views.message_fates(logs.events, routers, 60.0).collect()}
    assert fates == {10: "lost", 70: "in-flight", 150: "in-flight"}
    shorter = {r["accepted_time"] - START: r["fate"]
               for r in views.message_fates(logs.events, routers, 20.0).collect()}
    assert shorter == {10: "lost", 70: "lost", 150: "in-flight"}
    logs.release()


def test_line_numbers_across_file_splits(spark, tmp_path):  # noqa: F811
    """
    A file Spark reads in several splits still gets true line numbers.
    """
    from meshroute.audit import read

    lines = [json.dumps({"time": START + i, "router": A, "event": "x", "pad": "y" * 200})
             for i in range(3000)]
    bad = {17, 1234, 2999}
    for number in bad:
        lines[number - 1] = f"broken line {number}"
    path = tmp_path / "events.jsonl"
    path.write_text("\n".join(lines) + "\n")
    spark.conf.set("spark.sql.files.maxPartitionBytes", "65536")
    try:
        logs = read.read_logs(spark, [str(path)])
        assert logs.splits.count() > 5
        found = {(r["line"], r["text"]) for r in
                 read.malformed_lines(logs.parsed, logs.splits).collect()}
    finally:
        spark.conf.unset("spark.sql.files.maxPartitionBytes")
    assert found == {(n, f"broken line {n}") for n in bad}
    logs.release()


def test_the_docs_list_the_schema_the_audit_reads_with():
    """
    docs/events.md's table of the schema is the schema's own
    (L{meshroute.audit.schema.describe_fields}), so the two cannot drift.
    """
    from meshroute.audit import schema

    docs = Path(__file__).resolve().parents[2] / "docs" / "events.md"
    assert schema.describe_fields() in docs.read_text(encoding="utf-8")


#: Lines where Spark's JSON source and from_json could part ways.
ODD_LINES = [
    b"", b"   ", b"\t", b"[]", b"[1, 2]", b'[{"time":1800000000,"router":"router-a","event":"x"}]',
    b"garbage", b"null", b"42", b' {"time":1800000001,"router":"router-a","event":"x"}',
    b'{"time":1800000002,"router":"router-a","event":"x","detail":"caf\xe9"}',
    b'{"router":"router-a","event":"link.stage"}',
    b'{"time":"soon","router":"router-a","event":"link.stage"}',
    b'{"time":1800000003,"router":"router-a","event":"session.opened","ttl_ms":"forever"}',
    b'{"time":1800000004,"router":"router-a","event":"message.accepted","size":"big"}',
    b'{"time":1800000005,"router":"router-a","event":"x"} trailing',
    b'{"time":1800000006,"router":"router-a","event":"link.st',
]


@pytest.mark.parametrize("fields, good_odd_lines", [(None, 3), ("used", 4)])
def test_the_json_source_reads_every_line_as_from_json_does(spark, tmp_path, fields,  # noqa: F811
                                                             good_odd_lines):
    """
    The batch audit parses most file splits with Spark's JSON source and
    the others (a blank line, a JSON array, a line not in UTF-8, an
    object without time...) from the text: its rows, problems and line
    numbers are those of parsing every line of the text, with the whole
    schema or with the fields the views read (where a wrong type in a
    field no view reads, C{ttl_ms}, is not a problem).
    """
    from pyspark.sql import functions as F

    from meshroute.audit import read, views

    lines = [json.dumps({"time": START + i, "router": A, "event": "x", "pad": "y" * 200}).encode()
             for i in range(6000)]
    for i, odd in enumerate(ODD_LINES):  # one per split or so, plain splits between
        lines.insert(150 + 600 * i, odd)
    path = tmp_path / "events.jsonl"
    path.write_bytes(b"\n".join(lines) + b"\n")
    spark.conf.set("spark.sql.files.maxPartitionBytes", "65536")
    try:
        if fields == "used":
            fields = views.FIELDS_USED
        logs = read.read_logs(spark, [str(path)], fields)
        assert "json" in logs.parsed._jdf.queryExecution().executedPlan().toString().lower()
        expected = read.parse_lines(read.load_lines(spark, [str(path)]), fields)

        def rows(frame):
            ordered = frame.orderBy("block", "rid").drop("rid", "file")
            return [row.asDict() for row in ordered.collect()]

        assert rows(logs.parsed) == rows(expected)
        splits = read.blocks(expected)
        # The cache names a file by its key, which logs.files names back.
        found = [(logs.files[row["file"]], *row[1:])
                 for row in read.malformed_lines(logs.parsed, logs.splits).collect()]
        assert sorted(found) == sorted(map(tuple, read.malformed_lines(expected, splits).collect()))
        assert logs.lines == len(lines)
        problems = logs.parsed.where(F.col("problem").isNotNull()).count()
        assert problems == len(ODD_LINES) - good_odd_lines
    finally:
        spark.conf.unset("spark.sql.files.maxPartitionBytes")
    logs.release()


def test_run_all_runs_a_few_at_a_time_and_raises_after_the_running_end(spark):  # noqa: F811
    """
    The audit's jobs run a few at a time (threads.run_all): started in
    their order, never more than the workers at once, their results in
    the tasks' order whichever ends first; after a failure no task starts
    and the failure is raised once the running tasks have ended.
    """
    import threading

    from meshroute.audit import threads

    lock = threading.Lock()
    running, most, started = [0], [0], []
    second_done = threading.Event()

    def task(name, wait=None, done=None):
        def run():
            with lock:
                started.append(name)
                running[0] += 1
                most[0] = max(most[0], running[0])
            if wait is not None:
                assert wait.wait(60)
            if done is not None:
                done.set()
            with lock:
                running[0] -= 1
            return name
        return run

    tasks = [task("first", wait=second_done), task("second", done=second_done),
             *[task(f"t{i}") for i in range(6)]]
    assert threads.run_all(tasks, workers=2) == ["first", "second", *[f"t{i}" for i in range(6)]]
    assert most[0] == 2
    assert set(started[:2]) == {"first", "second"}

    release, finished = threading.Event(), threading.Event()

    def fails():
        release.set()
        raise ValueError("task failed")

    def slow():
        assert release.wait(60)
        finished.set()
        return "slow"

    with pytest.raises(ValueError, match="task failed"):
        threads.run_all([slow, fails], workers=2)
    assert finished.is_set()
    after = []
    with pytest.raises(ValueError, match="task failed"):
        threads.run_all([fails, lambda: after.append(1)], workers=1)
    assert after == []


def test_summary_judgement_without_spark():
    routes = [{"origin": A, "dest": "q@router-c", "lost": 2, "duplicated": 0}]
    summary = {
        "messages": {key: 0 for key in report.MESSAGE_COUNTS},
        "links": {"keepalive_late": 0, "keepalive_early": 0, "keepalive_limit_intervals": 6.0,
                  "keepalive_max_intervals": None},
        "inputs": {"malformed": 0, "malformed_lines": []},
        "settings": {"in_flight_grace_s": 60.0},
        "reasons": [], "warnings": [],
    }
    report.judge(summary, routes)
    assert summary["ok"] is True
    summary["messages"]["lost"] = 2
    report.judge(summary, routes)
    assert summary["ok"] is False
    assert summary["reasons"] == [
        "2 persistent message(s) lost: accepted, never enqueued (router-a → q@router-c: 2)"]


# -- the command as a process ------------------------------------------------------


def test_python_m_meshroute_audit_exit_status_on_bad_input(tmp_path):
    """
    The module entry point refuses an empty directory and a bad option
    with exit status 1, before starting Spark.
    """
    (tmp_path / "logs").mkdir()
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    for args, message in (([str(tmp_path / "logs"), "--out", str(tmp_path / "out")],
                           "no *.jsonl event logs in it"),
                          ([str(tmp_path / "logs")], "--out")):
        result = subprocess.run([sys.executable, "-m", "meshroute.audit", *args],
                                capture_output=True, text=True, timeout=60, env=env)
        assert result.returncode == EXIT_BAD_INPUT, result.stderr
        assert message in result.stderr
        assert result.stdout == ""


def test_a_consumed_message_whose_enqueue_record_died_with_its_router(spark, tmp_path):  # noqa: F811
    """
    A router killed with SIGKILL can lose its last turn's event records
    while the messages are durable: a message consumed at its destination
    was enqueued there, even when its message.enqueued record is missing.
    """
    from meshroute.audit import read, views

    log = MeshLog([A, B])
    for router in (A, B):
        log.boot(router, START)
    survived = log.message([A, B], START + 10, fate="lost")
    log.emit(B, START + 20, "message.consumed", msg_id=survived, queue="q", origin=A,
             accepted_at=START + 10, persistent=True, redelivered=False)
    really_lost = log.message([A, B], START + 11, fate="lost")
    log.emit(A, START + 400, "router.stopped")
    log.emit(B, START + 400, "router.stopped")
    paths = log.write(tmp_path)
    logs = read.read_logs(spark, list(paths.values()))
    routers = views.routers(logs.events, START + 400)
    fates = {r["msg_id"]: r["fate"]
             for r in views.message_fates(logs.events, routers, 60.0).collect()}
    assert fates == {survived: "enqueued", really_lost: "lost"}
    logs.release()


def test_an_expired_message_is_accounted_for_apart_from_lost(spark, tmp_path):  # noqa: F811
    """
    A message whose time to live ran out (message.expired, wherever it
    was: at its destination after it was enqueued, or on its way) is
    neither lost nor enqueued: its fate is expired, counted apart, and a
    consumer draining $expired does not make it consumed.
    """
    from meshroute.audit import read, views

    log = MeshLog([A, B])
    for router in (A, B):
        log.boot(router, START)
    in_queue = log.message([A, B], START + 10, fate="enqueued", consumed=False)
    log.emit(B, START + 30, "message.expired", msg_id=in_queue, origin=A, dest="q@router-b",
             where="queue", expires_ms=int((START + 20) * 1000), persistent=True)
    log.emit(B, START + 31, "message.consumed", msg_id=in_queue, queue="$expired", origin=A,
             accepted_at=START + 10, persistent=True, redelivered=False)
    on_the_way = log.message([A, B], START + 11, fate="lost")
    log.emit(A, START + 40, "message.expired", msg_id=on_the_way, origin=A, dest="q@router-b",
             where="backlog", expires_ms=int((START + 21) * 1000), persistent=True)
    really_lost = log.message([A, B], START + 12, fate="lost")
    log.emit(A, START + 400, "router.stopped")
    log.emit(B, START + 400, "router.stopped")
    paths = log.write(tmp_path)
    logs = read.read_logs(spark, list(paths.values()))
    routers = views.routers(logs.events, START + 400)
    fates = {r["msg_id"]: (r["fate"], r["expired_at"], r["consumed_events"])
             for r in views.message_fates(logs.events, routers, 60.0).collect()}
    assert fates == {in_queue: ("expired", B, 0), on_the_way: ("expired", A, 0),
                     really_lost: ("lost", None, 0)}
    totals = views.totals(views.message_fates(logs.events, routers, 60.0)).collect()[0]
    assert (totals["expired"], totals["lost"], totals["enqueued"]) == (2, 1, 0)
    logs.release()
