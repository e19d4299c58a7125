"""
The streaming audit (C{meshroute audit --follow}, meshroute.audit.follow):
it agrees exactly with the batch audit on the same rotated logs; it
follows a live mesh of real routers and reports nothing lost; into a copy
of those logs a test injects a loss and a duplicate, which it reports at
the next micro-batch; restarted from its checkpoint it counts nothing
twice.
"""

import io
import json
import shutil
from pathlib import Path

import pytest

from support.closed_event_files import Follower, add_closed_file
from support.spark import spark  # noqa: F401 (a fixture)
from support.event_generator import START
from pyspark.sql import functions as F
from support.routers import mesh  # noqa: F401 (a fixture)
from support.audit_testing import audit, figures
from support.audit_meshes import A, B, C, PRICES, rotated_synthetic, topic_mesh

from meshroute.audit import follow, incremental, job, read, state, views
from meshroute.audit.inputs import AuditInputError
from meshroute.audit.job import UsageProblem, run, settings_from_args
from meshroute.audit.running import EXIT_BAD_INPUT, EXIT_OK, Progress
from meshroute.audit.settings import AuditSettings
from meshroute.audit.tables import TABLES

#: Spark's streaming audit at length: run by `make test-slow` (CI runs it
#: after `make test`), so that `make test` stays under 20 minutes.
pytestmark = pytest.mark.slow

#: Generous: Spark on a loaded two-core machine takes minutes a micro-batch.
DEADLINE_S = 900


def table_rows(spark, out: Path, name: str) -> list:
    frame = spark.read.parquet(str(out / "tables" / name))
    return sorted((tuple(row) for row in frame.collect()), key=repr)


@pytest.mark.timeout(2400)
def test_streaming_and_batch_audits_agree_exactly(spark, tmp_path):  # noqa: F811
    """
    The synthetic mesh (every kind of fate, link close and malformed
    line) rotated into 27 closed files, followed ten files a
    micro-batch with latency windows of 2 s and a grace of 3 s: the
    streaming audit ends with the figures and tables of the batch audit
    of the same files.  The one column that may differ is a router's
    C{available_until} when its log does not end with its stop: the batch
    audit takes the run's last event, the streaming audit that router's
    own (its event-time watermark); here router-c's last line is cut off.
    On the way, windows close as the routers' logs go past them (before
    the last micro-batch): they leave the open C{windows} state for
    C{closed_windows}.
    """
    logs = rotated_synthetic(tmp_path, per_file=60)
    streamed, batch = tmp_path / "streamed", tmp_path / "batch"
    options = {"latency_window_s": 2.0, "in_flight_grace_s": 3.0}
    settings = AuditSettings(inputs=[str(logs)], out=str(streamed), quiet=True, follow=True,
                             once=True, max_files_per_trigger=10, **options)
    out, err = io.StringIO(), io.StringIO()
    code = run(settings, out=out, err=err, spark=spark)
    batch_code, _, _, batch_summary = audit(spark, [logs], batch, **options)
    streamed_summary = json.loads((streamed / "summary.json").read_text())
    assert code == batch_code, err.getvalue()
    last = streamed_summary["audit"]["stream"]["batch"]
    assert last == 2
    assert figures(streamed_summary) == figures(batch_summary)
    for name in TABLES:
        if name == "routers":
            continue
        assert table_rows(spark, streamed, name) == table_rows(spark, batch, name), name
    drop = ["available_until"]
    routers = {out: sorted(tuple(r) for r in spark.read.parquet(str(out / "tables/routers"))
                           .drop(*drop).collect()) for out in (streamed, batch)}
    assert routers[streamed] == routers[batch]
    slices = spark.read.parquet(str(streamed / "state" / "closed_windows"))
    assert slices.where(f"closed AND batch < {last}").count() > 0, "closed before the end"
    closed = incremental.newest(slices, incremental.WINDOW).where("closed")
    still_open = spark.read.parquet(str(streamed / "state" / "windows" / f"batch={last}"))
    assert closed.join(still_open, incremental.WINDOW, "left_semi").count() == 0
    assert still_open.select(*incremental.WINDOW).distinct().count() < closed.count()


def state_rows(spark, out: Path, name: str, batch_id: int) -> int:  # noqa: F811
    return spark.read.parquet(str(out / "state" / name / f"batch={batch_id}")).count()


def agreeing_micro_batches(spark, tmp_path: Path, logs: Path, groups: list, tables):  # noqa: F811
    """
    Feed the streaming audit (C{tmp_path/streamed}, a grace of 5 s) the
    files of C{logs} a group of C{groups} a micro-batch; after each,
    check that its figures and its C{tables} are those of the batch
    audit of the files read so far (with the same per-destination
    watermark), and yield the micro-batch's number, the batch audit's
    summary and the streaming audit.
    """
    streamed = tmp_path / "streamed"
    settings = AuditSettings(inputs=[str(logs)], out=str(streamed), quiet=True, follow=True,
                             in_flight_grace_s=5)
    quiet = Progress(io.StringIO(), True)
    streaming = follow.StreamingAudit(spark, settings, quiet, io.StringIO())
    read_so_far = []
    for batch_id, group in enumerate(groups):
        streaming(read.located(spark.read.text([str(f) for f in group])), batch_id)
        read_so_far += [str(f) for f in group]
        batch = tmp_path / f"batch-{batch_id}"
        expected = job.audit_logs(
            spark, read.read_logs(spark, read_so_far, views.FIELDS_USED),
            AuditSettings(inputs=read_so_far, out=str(batch), quiet=True, in_flight_grace_s=5),
            quiet, settled_per_router=True)
        assert figures(streaming.summary) == figures(expected[0]), batch_id
        for name in tables:
            assert table_rows(spark, streamed, name) == table_rows(spark, batch, name), (
                batch_id, name)
        yield batch_id, expected[0], streaming


@pytest.mark.timeout(2400)
def test_each_micro_batch_agrees_with_the_batch_audit_and_keeps_only_open_messages(
        spark, tmp_path):  # noqa: F811
    """
    The rotated synthetic mesh fed to the streaming audit half its files
    at a time, then a late file that enqueues a long settled message again:
    after every micro-batch, its tables and figures are those of the
    batch audit of the files read so far (with the same per-destination
    watermark); the messages whose fate is settled leave the open state
    (which stays smaller than the messages seen), and the late duplicate
    takes its message back from the settled state and is counted once.
    """
    logs = rotated_synthetic(tmp_path, per_file=60)
    files = sorted(logs.glob("*/events/*.jsonl"), key=lambda p: (p.stat().st_mtime, str(p)))
    enqueued = [json.loads(line) for path in files if path.parent.parent.name == C
                for line in path.read_text().splitlines() if '"message.enqueued"' in line]
    late = add_closed_file(tmp_path / "late" / C / "events",
                           [dict(enqueued[0], time=enqueued[-1]["time"])])
    groups = [files[:len(files) // 2], files[len(files) // 2:], [late]]
    streamed = tmp_path / "streamed"
    sizes = []
    for batch_id, expected, streaming in agreeing_micro_batches(spark, tmp_path, logs, groups,
                                                                TABLES):
        seen = expected["messages"]["accepted"] + expected["messages"]["orphans"]
        still_open = spark.read.parquet(str(streamed / "state" / "open" / f"batch={batch_id}"))
        settled = (spark.read.parquet(str(streamed / "state" / "settled"))
                   .where(f"batch <= {batch_id}").select("msg_id").distinct()
                   .join(still_open, "msg_id", "left_anti").count())
        assert still_open.count() + settled == seen, batch_id
        sizes.append(still_open.count())
    assert sizes[-1] < seen / 20 < settled, "settled messages left the open state"
    assert max(sizes) < seen
    assert streaming.summary["messages"]["duplicated"] == 3
    assert state_rows(spark, streamed, "settled", len(groups) - 1) == 1, "settled again"
    # A day-long run keeps two of each cumulative table, a slice per batch
    # of each appended one.
    tables = state.StateTables(spark, str(streamed))
    for name in ("routers", "boots", "open", "routes", "latency", "windows", "problems"):
        assert tables.batches(name) == [1, 2], name
    for name in ("files", "events", "settled", "closed_windows"):
        assert tables.batches(name) == [0, 1, 2], name


@pytest.mark.timeout(2400)
def test_topic_tables_agree_with_the_batch_audit_micro_batch_by_micro_batch(
        spark, tmp_path):  # noqa: F811
    """
    The topic mesh (every fate of a topic copy) rotated and fed to the
    streaming audit half its files at a time, then a late file in which
    the copy left waiting in a durable subscription is consumed: after
    every micro-batch the topic tables are those of the batch audit of
    the files read so far; the copies whose fate is settled leave the
    open state, and the late consumption takes its copy back from the
    settled state: consumed, no longer waiting, counted once.
    """
    logs = rotated_synthetic(tmp_path, per_file=40, mesh=topic_mesh)
    files = sorted(logs.glob("*/events/*.jsonl"), key=lambda p: (p.stat().st_mtime, str(p)))
    waiting = [json.loads(line) for path in files if path.parent.parent.name == C
               for line in path.read_text().splitlines()
               if '"message.enqueued"' in line and PRICES in line]
    waiting = [r for r in waiting if r["time"] > START + 23 and r["time"] < START + 24][0]
    late = add_closed_file(tmp_path / "late" / C / "events", [dict(
        waiting, event="message.consumed", time=START + 290, redelivered=False)])
    groups = [files[:len(files) // 2], files[len(files) // 2:], [late]]
    streamed = tmp_path / "streamed"
    topic_tables = ("subscriptions", "topic_links", "topic_routers", "topic_problems")
    *_, (_, _, streaming) = agreeing_micro_batches(spark, tmp_path, logs, groups, topic_tables)
    still_open = spark.read.parquet(str(streamed / "state" / "copies_open" / "batch=1")).count()
    settled = spark.read.parquet(str(streamed / "state" / "copies_settled")).where(
        "batch <= 1").count()
    assert still_open < settled / 10
    durable = streaming.summary["topics"]["durable"]
    assert (durable["waiting"], durable["consumed"], durable["due"]) == (0, 45, 48)
    assert state_rows(spark, streamed, "copies_settled", 2) == 1, "settled again"


# -- latency windows that close -------------------------------------------------


def test_a_window_closes_when_its_destination_is_past_it_and_no_open_message_is_in_it(
        spark):  # noqa: F811
    """
    L{incremental.closing}, windows of 10 s, grace 5 s: router-c's
    watermark is 25, so its windows [0, 10) and [10, 20) close (20 + 5
    reaches 25) and [20, 30) does not; router-b's is far on, but an open
    message is in its window [0, 10); a destination whose log is not read
    (router-e) or that is no router (no C{@}) closes nothing.
    """
    windows = spark.createDataFrame(
        [(A, "q@router-c", C, 0.0), (A, "q@router-c", C, 10.0), (A, "q@router-c", C, 20.0),
         (A, "q@router-b", B, 0.0), (A, "q@router-b", B, 10.0), (A, "q@router-e", "router-e", 0.0),
         (A, "q", None, 0.0)],
        "origin string, dest string, dest_router string, window_start double"
    ).selectExpr("*", "1.5 AS latency_ms", "CAST(2 AS BIGINT) AS count")
    until = spark.createDataFrame([(C, 25.0), (B, 1000.0)], "dest_router string, _until double")
    open_windows = windows.where(f"dest = 'q@{B}' AND window_start = 0").select(
        *incremental.WINDOW)
    closes = incremental.closing(windows, until, open_windows, 10.0, 5.0)
    assert sorted(tuple(row) for row in closes.collect()) == [
        (A, "q@router-b", B, 10.0), (A, "q@router-c", C, 0.0), (A, "q@router-c", C, 10.0)]


def window_history(spark, out: Path, origin: str, dest: str, at: float,  # noqa: F811
                   window_s: float) -> list:
    """
    The C{closed_windows} rows of the window of route C{origin} → C{dest}
    that holds time C{at}: (batch, closed), oldest first.
    """
    rows = spark.read.parquet(str(out / "state" / "closed_windows")).where(
        (F.col("origin") == origin) & (F.col("dest") == dest) & (F.col("window_start") <= at)
        & (F.col("window_start") + window_s > at)).select("batch", "closed").collect()
    return sorted(tuple(row) for row in rows)


def open_state_holds(spark, out: Path, batch_id: int, origin: str, dest: str,  # noqa: F811
                     at: float, window_s: float) -> bool:
    """
    Whether the open C{windows} state of batch C{batch_id} holds the
    window of C{origin} → C{dest} that holds time C{at}.
    """
    rows = spark.read.parquet(str(out / "state" / "windows" / f"batch={batch_id}")).where(
        (F.col("origin") == origin) & (F.col("dest") == dest) & (F.col("window_start") <= at)
        & (F.col("window_start") + window_s > at))
    return rows.count() > 0


def records(path: Path) -> list[dict]:
    """
    The events of a closed file, its malformed lines left out.
    """
    found = []
    for line in path.read_text().splitlines():
        try:
            found.append(json.loads(line))
        except ValueError:
            continue
    return [record for record in found if isinstance(record, dict) and "time" in record]


@pytest.mark.timeout(2400)
def test_a_late_event_reopens_a_closed_window_until_it_closes_again(
        spark, tmp_path):  # noqa: F811
    """
    The rotated synthetic mesh in one micro-batch closes the windows of
    its first message to q@router-c and of the orphan router-z:1:1 at
    router-b.  A second brings a late consumption of that first message
    at router-c's last moment (it reopens, and with it its window, which
    its closed row no longer shows) and the late acceptance of the orphan
    by router-y (its route changes: its old window, now empty, reopens
    and shows nothing; its new one closes at once).  A third has router-c
    start and stop later, so the message settles and its window closes
    again.  After each, the latency windows are the batch audit's.
    """
    logs = rotated_synthetic(tmp_path, per_file=60)
    files = sorted(logs.glob("*/events/*.jsonl"), key=lambda p: (p.stat().st_mtime, str(p)))
    at_c = [record for path in files if path.parent.parent.name == C
            for record in records(path)]
    first = next(r for r in at_c if r["event"] == "message.enqueued")
    c_end = max(r["time"] for r in at_c)
    orphan, orphan_at = "router-z:1:1", START + 200
    late = tmp_path / "late"
    reopening = [
        add_closed_file(late / C / "events", [
            {"time": c_end, "router": C, "event": "message.consumed", "msg_id": first["msg_id"],
             "origin": first["origin"], "queue": "q", "persistent": True,
             "redelivered": False}]),
        add_closed_file(late / "router-y" / "events", [
            {"time": orphan_at - 0.01, "router": "router-y", "event": "message.accepted",
             "msg_id": orphan, "origin": "router-y", "dest": f"q@{B}", "size": 5,
             "persistent": True}])]
    closing_again = [add_closed_file(late / C / "events", [
        {"time": c_end + 60, "router": C, "event": "router.started", "version": "0.1.0",
         "pid": 4100},
        {"time": c_end + 61, "router": C, "event": "router.stopped"}])]
    streamed = tmp_path / "streamed"
    window_s = 10.0
    settings = AuditSettings(inputs=[str(logs)], out=str(streamed), quiet=True, follow=True,
                             in_flight_grace_s=5, latency_window_s=window_s)
    quiet = Progress(io.StringIO(), True)
    streaming = follow.StreamingAudit(spark, settings, quiet, io.StringIO())
    read_so_far = []
    for batch_id, group in enumerate([files, reopening, closing_again]):
        streaming(read.located(spark.read.text([str(f) for f in group])), batch_id)
        read_so_far += [str(f) for f in group]
        batch = tmp_path / f"batch-{batch_id}"
        expected = job.audit_logs(
            spark, read.read_logs(spark, read_so_far, views.FIELDS_USED),
            AuditSettings(inputs=read_so_far, out=str(batch), quiet=True, in_flight_grace_s=5,
                          latency_window_s=window_s),
            quiet, settled_per_router=True)
        assert figures(streaming.summary) == figures(expected[0]), batch_id
        for name in ("latency_windows", "routes"):
            assert table_rows(spark, streamed, name) == table_rows(spark, batch, name), (
                batch_id, name)
    first_window = window_history(spark, streamed, first["origin"], f"q@{C}", first["time"],
                                  window_s)
    assert first_window == [(0, True), (1, False), (2, True)]
    assert open_state_holds(spark, streamed, 1, first["origin"], f"q@{C}", first["time"],
                            window_s)
    assert not open_state_holds(spark, streamed, 2, first["origin"], f"q@{C}", first["time"],
                                window_s)
    assert window_history(spark, streamed, "router-z", f"q@{B}", orphan_at, window_s) == [
        (0, True), (1, False)]
    assert window_history(spark, streamed, "router-y", f"q@{B}", orphan_at, window_s) == [
        (1, True)]
    windows = spark.read.parquet(str(streamed / "tables" / "latency_windows"))
    assert windows.where(F.col("origin") == "router-z").count() == 0


def test_follow_refuses_what_is_not_a_directory(tmp_path):
    with pytest.raises(AuditInputError, match="not a directory"):
        follow.follow_paths([str(tmp_path / "nowhere")])
    settings = AuditSettings(inputs=[str(tmp_path / "nowhere")], out=str(tmp_path / "o"),
                             follow=True, quiet=True)
    err = io.StringIO()
    assert run(settings, out=io.StringIO(), err=err) == 1
    assert "not a directory" in err.getvalue()


def test_follow_options():
    settings = settings_from_args(["--follow", "a", "b", "--out", "o", "--trigger", "5",
                                   "--max-files-per-trigger", "7", "--once",
                                   "--latency-window", "30"])
    assert (settings.follow, settings.inputs, settings.trigger_s, settings.once) == (
        True, ["a", "b"], 5.0, True)
    assert (settings.max_files_per_trigger, settings.latency_window_s) == (7, 30.0)
    for wrong in (["--once"], ["--follow", "--trigger", "0"],
                  ["--follow", "--max-files-per-trigger", "0"], ["--latency-window", "0"]):
        with pytest.raises(UsageProblem):
            settings_from_args(["a", "--out", "o", *wrong])


def test_a_state_of_another_layout_is_refused_and_a_new_one_marked(spark, tmp_path):  # noqa: F811
    """
    A follow run over an C{OUT} whose state an earlier version wrote (no
    format mark) stops at once with a message saying what to do; over a
    new C{OUT} it marks the state, and a run resuming it goes on.
    """
    logs = tmp_path / "logs"
    logs.mkdir()
    old = tmp_path / "old"
    (old / "state" / "open" / "batch=0").mkdir(parents=True)
    err = io.StringIO()
    settings = AuditSettings(inputs=[str(logs)], out=str(old), quiet=True, follow=True, once=True)
    assert run(settings, out=io.StringIO(), err=err, spark=spark) == EXIT_BAD_INPUT
    assert "state format 1" in err.getvalue() and f"delete {old}" in err.getvalue()
    assert not (old / "checkpoint").exists(), "stopped before following anything"
    new = tmp_path / "new"
    for _ in range(2):
        settings = AuditSettings(inputs=[str(logs)], out=str(new), quiet=True, follow=True,
                                 once=True)
        err = io.StringIO()
        assert run(settings, out=io.StringIO(), err=err, spark=spark) == EXIT_OK, err.getvalue()
    mark = spark.read.json(str(new / "state" / "format")).collect()
    assert [row["format"] for row in mark] == [state.STATE_FORMAT]


# -- a live mesh -----------------------------------------------------------------


@pytest.fixture(scope="module")
def live(tmp_path_factory):
    """
    Three real routers A → B → C with rotating event logs, followed by
    the streaming audit while 300 messages go from A to C; then the
    routers stop.  Returns the routers' data dirs, the follower's summary
    and stderr.
    """
    from support.routers import Mesh, PORTS

    directory = tmp_path_factory.mktemp("live")
    mesh = Mesh(directory, PORTS)
    try:
        routing = {"reroute-delay": "1s"}
        c = mesh.router(C, clients=True, routing=routing)
        b = mesh.router(B, connect=[c], clients=True, routing=routing)
        a = mesh.router(A, connect=[b], clients=True, routing=routing)
        for spec in (a, b, c):
            spec.extra["events"] = {"max-file-size": "16 KiB", "max-age": "2s"}
            spec.write()
            spec.data_dir.mkdir(parents=True, exist_ok=True)
        follower = Follower([spec.data_dir for spec in (a, b, c)], directory / "audit",
                            "--trigger", "2", "--in-flight-grace", "5")
        try:
            processes = mesh.start(a, b, c)
            a_proc = processes[0]
            a_proc.wait_route(C, next_hop=B)
            consumer = mesh.start_receive(processes[2], "q", 300, 120)
            for _ in range(3):
                sent = mesh.send(a_proc, "q@router-c", 100)
                assert sent.returncode == 0, sent.stderr
            assert consumer.wait(120) == 0
            follower.wait_summary(lambda s: s["messages"]["enqueued"] >= 1, DEADLINE_S,
                                  "the streaming audit to see messages while the mesh runs")
            for process in processes:
                assert process.terminate() == 0
            summary = follower.wait_summary(
                lambda s: s["routers"]["clean_stops"] == 3 and s["messages"]["consumed"] == 300,
                DEADLINE_S, "the streaming audit to see every message and every router stop")
            assert follower.stop() == EXIT_OK, follower.stderr()
            yield {"data_dirs": {spec.name: spec.data_dir for spec in (a, b, c)},
                   "summary": summary,
                   "stderr": follower.stderr(), "directory": directory}
        finally:
            follower.kill()
    finally:
        mesh.cleanup()


@pytest.mark.timeout(2400)
def test_live_mesh_followed_reports_nothing_lost(live):
    summary = live["summary"]
    messages = summary["messages"]
    assert messages["accepted"] == messages["enqueued"] == messages["consumed"] == 300
    assert messages["lost"] == messages["duplicated"] == messages["in_flight"] == 0
    assert summary["ok"] and summary["inputs"]["malformed"] == 0
    assert summary["inputs"]["files"] > 3, "the routers' logs rotated"
    assert summary["audit"]["stream"]["batch"] >= 1
    assert "LOST" not in live["stderr"] and "DUPLICATED" not in live["stderr"]


@pytest.mark.timeout(2400)
def test_an_injected_loss_and_duplicate_are_reported_at_the_next_batch(live, spark):  # noqa: F811
    """
    A copy of the live mesh's logs, followed; then one new closed file at
    router-a accepts a message for q@router-c that never arrives, and one
    at router-c enqueues a delivered message a second time.  The next
    micro-batch reports both (summary.json, and a line each on stderr).
    Then the follower stops and a new one (in this process, on the
    tests' Spark session) resumes from the checkpoint with one more
    closed file: nothing is counted twice.
    """
    copy = live["directory"] / "copy"
    for name, data_dir in live["data_dirs"].items():
        shutil.copytree(data_dir / "events", copy / name / "events")
    out = live["directory"] / "copy-audit"
    follower = Follower([copy], out, "--trigger", "2", "--in-flight-grace", "5",
                        "--max-files-per-trigger", "10000")
    try:
        clean = follower.wait_summary(lambda s: s["messages"]["consumed"] == 300, DEADLINE_S,
                                      "the streaming audit of the copy")
        assert clean["messages"]["lost"] == clean["messages"]["duplicated"] == 0
        batch = clean["audit"]["stream"]["batch"]
        stopped_at = clean["time"]["last"]
        enqueued = [json.loads(line) for path in sorted((copy / C).glob("events/*.jsonl"))
                    for line in path.read_text().splitlines()
                    if '"message.enqueued"' in line]
        again = dict(enqueued[0], time=enqueued[-1]["time"])
        # Both files appear at once (one rename), as a late copy would.
        staging = live["directory"] / "staging"
        add_closed_file(staging / C / "events", [again])
        add_closed_file(staging / A / "events", [
            {"time": stopped_at - 30, "router": A, "event": "message.accepted",
             "msg_id": "router-a:injected:1", "origin": A, "dest": "q@router-c", "size": 5,
             "persistent": True}])
        staging.rename(copy / "late")
        broken = follower.wait_summary(
            lambda s: s["audit"]["stream"]["batch"] > batch, DEADLINE_S,
            "the next micro-batch after the injection")
        assert broken["audit"]["stream"]["batch"] == batch + 1
        assert broken["messages"]["lost"] == 1
        assert broken["messages"]["duplicated"] == 1
        assert not broken["ok"]
        follower.wait_summary(lambda s: True, 1, "the summary")
        assert follower.stop() == 2
        stderr = follower.stderr()
        assert "LOST router-a:injected:1" in stderr
        assert f"DUPLICATED {again['msg_id']}" in stderr
        # Restart from the checkpoint with one more file: counted once.
        add_closed_file(copy / B / "events", [
            {"time": stopped_at - 20, "router": B, "event": "message.accepted",
             "msg_id": "router-b:late:1", "origin": B, "dest": "q@router-c", "size": 5,
             "persistent": True}])
        resume = settings_from_args(["--follow", str(copy), "--out", str(out), "--once",
                                     "--in-flight-grace", "5"])
        said, resume_err = io.StringIO(), io.StringIO()
        assert run(resume, out=said, err=resume_err, spark=spark) == 2, resume_err.getvalue()
        resumed = json.loads((out / "summary.json").read_text())
        assert resumed["audit"]["stream"]["batch"] == batch + 2
        assert resumed["messages"]["accepted"] == 302
        assert resumed["messages"]["lost"] == 2
        assert resumed["messages"]["duplicated"] == 1
        assert resumed["messages"]["enqueued"] == 300
        assert resumed["inputs"]["lines"] == broken["inputs"]["lines"] + 1
        assert "LOST router-b:late:1" in resume_err.getvalue()
        assert "LOST router-a:injected:1" not in resume_err.getvalue(), "announced once"
    finally:
        follower.kill()
