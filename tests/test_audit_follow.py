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

from closed_event_files import Follower, add_closed_file, rotate_copy
from conftest_spark import spark  # noqa: F401 (a fixture)
from routers import mesh  # noqa: F401 (a fixture)
from test_audit import A, B, C, audit, synthetic_mesh

from meshroute.audit import follow, job, read, views
from meshroute.audit.inputs import AuditInputError
from meshroute.audit.job import (
    EXIT_OK,
    TABLES,
    AuditSettings,
    UsageProblem,
    run,
    settings_from_args,
)

#: summary.json keys that say how and when the audit ran, not what it found.
RUN_KEYS = ("audit",)

#: Generous: Spark on a loaded two-core machine takes minutes a micro-batch.
DEADLINE_S = 900


def figures(summary: dict) -> dict:
    return {key: value for key, value in summary.items() if key not in RUN_KEYS}


def table_rows(spark, out: Path, name: str) -> list:
    frame = spark.read.parquet(str(out / "tables" / name))
    return sorted((tuple(row) for row in frame.collect()), key=repr)


def rotated_synthetic(directory: Path, per_file: int) -> Path:
    """
    The synthetic mesh of test_audit, each router's log rotated into
    closed files of C{per_file} lines under C{directory/rotated/ROUTER/events}.
    """
    synthetic_mesh(directory / "single")
    for source in sorted((directory / "single").glob("*/events.jsonl")):
        rotate_copy(source, directory / "rotated" / source.parent.name / "events", per_file)
    return directory / "rotated"


@pytest.mark.timeout(2400)
def test_streaming_and_batch_audits_agree_exactly(spark, tmp_path):  # noqa: F811
    """
    The synthetic mesh (every kind of fate, link close and malformed
    line) rotated into 27 closed files: the streaming audit, in two
    micro-batches, ends with the figures and tables of the batch audit
    of the same files.  The one column that may differ is a router's
    C{available_until} when its log does not end with its stop: the batch
    audit takes the run's last event, the streaming audit that router's
    own (its event-time watermark); here router-c's last line is cut off.
    """
    logs = rotated_synthetic(tmp_path, per_file=60)
    streamed, batch = tmp_path / "streamed", tmp_path / "batch"
    settings = AuditSettings(inputs=[str(logs)], out=str(streamed), quiet=True, follow=True,
                             once=True, max_files_per_trigger=14)
    out, err = io.StringIO(), io.StringIO()
    code = run(settings, out=out, err=err, spark=spark)
    batch_code, _, _, batch_summary = audit(spark, [logs], batch)
    streamed_summary = json.loads((streamed / "summary.json").read_text())
    assert code == batch_code, err.getvalue()
    assert streamed_summary["audit"]["stream"]["batch"] == 1
    assert figures(streamed_summary) == figures(batch_summary)
    for name in TABLES:
        if name == "routers":
            continue
        assert table_rows(spark, streamed, name) == table_rows(spark, batch, name), name
    drop = ["available_until"]
    routers = {out: sorted(tuple(r) for r in spark.read.parquet(str(out / "tables/routers"))
                           .drop(*drop).collect()) for out in (streamed, batch)}
    assert routers[streamed] == routers[batch]


def state_rows(spark, out: Path, name: str, batch_id: int) -> int:  # noqa: F811
    return spark.read.parquet(str(out / "state" / name / f"batch={batch_id}")).count()


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
    settings = AuditSettings(inputs=[str(logs)], out=str(streamed), quiet=True, follow=True,
                             in_flight_grace_s=5)
    quiet = job.Progress(io.StringIO(), True)
    streaming = follow.StreamingAudit(spark, settings, quiet, io.StringIO())
    read_so_far, sizes = [], []
    for batch_id, group in enumerate(groups):
        streaming(read.located(spark.read.text([str(f) for f in group])), batch_id)
        read_so_far += [str(f) for f in group]
        batch = tmp_path / f"batch-{batch_id}"
        expected = job.audit_logs(
            spark, read.read_logs(spark, read_so_far, views.FIELDS_USED),
            AuditSettings(inputs=read_so_far, out=str(batch), quiet=True, in_flight_grace_s=5),
            quiet, settled_per_router=True)
        assert figures(streaming.summary) == figures(expected[0]), batch_id
        for name in TABLES:
            assert table_rows(spark, streamed, name) == table_rows(spark, batch, name), (
                batch_id, name)
        seen = expected[0]["messages"]["accepted"] + expected[0]["messages"]["orphans"]
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


# -- a live mesh -----------------------------------------------------------------


@pytest.fixture(scope="module")
def live(tmp_path_factory):
    """
    Three real routers A → B → C with rotating event logs, followed by
    the streaming audit while 300 messages go from A to C; then the
    routers stop.  Returns the routers' data dirs, the follower's summary
    and stderr.
    """
    from routers import Mesh, PORTS

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
