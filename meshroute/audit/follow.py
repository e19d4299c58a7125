"""
The streaming audit: C{meshroute audit --follow DIR... --out DIR}.

Spark Structured Streaming's file source follows the routers' closed
event files (C{events-*.jsonl} below each directory: neither the file
being written, C{current.jsonl}, nor one being closed, which ends
C{.open}, ever matches, docs/events.md), at most
C{--max-files-per-trigger} new files per micro-batch, one micro-batch per
C{--trigger} seconds when there is something new.

Why C{foreachBatch} and state tables of our own, not Structured
Streaming's stateful operators: the audit's figures come from
aggregations chained on one another (per message, then per route; per
connection, then per link; a router's boots before its connections),
exact percentiles, and verdicts that change when a late file arrives (in
flight becomes enqueued, or lost).  One streaming query allows one
stateful aggregation in append mode and no exact percentile.  So each
micro-batch is parsed once, by the batch audit's reader
(L{meshroute.audit.read}), and folded into the state under C{OUT/state}
by L{meshroute.audit.incremental} (and the topic copies' by
L{meshroute.audit.topic_state}): per message id the partial aggregates
of the batch audit's per-message view, merged with those of the
messages still open (and only those); settled messages move into
per-route counts and latency value counts, and a latency window that no
message can enter any more is closed with its final figures; the few
events that are not about messages are kept and their views recomputed.  A micro-batch's
work is its own lines plus the open state, not the history (that
module's docstring says what bounds each table).  The views are the
batch audit's functions over merged state, and latency percentiles are
exact nearest ranks from value counts in both
(L{meshroute.audit.views.percentiles}), so the streaming and the batch
audit agree exactly once they have read the same files.

Nothing is counted twice across restarts: the checkpoint
(C{OUT/checkpoint}) records which files each micro-batch read and which
batches completed; a batch run again after a crash reads the same files,
starts from the state of the batch before it and overwrites its own
C{batch=N} directories.  (Deleting the checkpoint
but not C{OUT/state} would count everything again: delete C{OUT}.)

Lost and in flight use event time: a message not yet enqueued is lost
only once its destination's own log has gone on for the grace period
past its acceptance (or the destination stopped in order).  That
per-destination watermark is where the streaming audit differs from the
batch one, which takes the run's last event for every router still up:
a destination whose files arrive late, because it rotates less often or
its files are copied later, holds back only its own verdicts, and a
late file never makes a false loss.

When a message is established lost or duplicated, a line says so on
stderr at once (once per message: C{OUT/state/announced}).
"""

import json
import os
import signal
import threading

from meshroute.audit import report
from meshroute.audit.inputs import AuditInputError, display_name, is_uri
from meshroute.audit.running import (
    EXIT_BAD_INPUT,
    EXIT_OK,
    Progress,
    finish,
    have_pyspark,
    start_spark,
)
from meshroute.audit.tables import write_outputs, write_views

#: The closed event files of a router (docs/events.md, "Rotation").
CLOSED_FILES = "events-*.jsonl"

#: The most problems a micro-batch announces one by one; the rest in a count.
ANNOUNCE_LIMIT = 50


def follow_paths(paths: list[str]) -> list[str]:
    """
    The directories to follow, as given (URIs untouched).

    @raise AuditInputError: for a local path that is not a directory.
    """
    if not paths:
        raise AuditInputError("no directory to follow")
    resolved = []
    for path in paths:
        if is_uri(path):
            resolved.append(path)
        elif not os.path.isdir(display_name(path)):
            raise AuditInputError(f"{path}: not a directory (--follow reads directories of "
                                  f"rotated {CLOSED_FILES} event files)")
        else:
            resolved.append(os.path.abspath(display_name(path)))
    return list(dict.fromkeys(resolved))


def closed_files_stream(spark, directories: list[str], max_files: int):
    """
    The lines of every closed event file below C{directories}, as they
    appear: L{meshroute.audit.read.located} of a text stream per directory.
    """
    # PySpark, which read, views and incremental import, is imported when
    # the audit runs, not with the command: have_pyspark says first if it
    # is missing.
    from meshroute.audit import read

    streams = [
        read.located(
            spark.readStream.format("text")
            .option("recursiveFileLookup", "true")
            .option("pathGlobFilter", CLOSED_FILES)
            .option("maxFilesPerTrigger", max_files)
            # A router's files span weeks: none is too old to read.
            .option("maxFileAge", "36500d")
            .load(directory))
        for directory in directories
    ]
    union = streams[0]
    for stream in streams[1:]:
        union = union.unionByName(stream)
    return union


class StreamingAudit:
    """
    The C{foreachBatch} of the streaming audit: fold the batch's parsed
    lines into the state, write the outputs from it, announce new problems.
    """

    def __init__(self, spark, settings, progress, err) -> None:
        self.spark = spark
        self.settings = settings
        self.progress = progress
        self.err = err
        base = settings.out.rstrip("/")
        self.announced_dir = f"{base}/state/announced"
        self.tables_dir = f"{base}/tables"
        self.summary = None

    def __call__(self, batch, batch_id: int) -> None:
        from meshroute.audit import incremental, read, views

        lines = read.parse_lines(read.numbered(batch), views.FIELDS_USED)
        try:
            state = incremental.advance(self.spark, lines, batch_id, self.settings,
                                        self.progress)
        except AuditInputError as e:
            # Empty or wholly malformed files so far: nothing to say yet.
            self.progress(f"batch {batch_id}: {e}")
            return
        try:
            summary, tables, counts = write_views(
                self.spark, state.frames, state.totals, state.ha_totals, state.split_rows,
                state.lines, self.settings, self.progress, state.names)
        finally:
            for frame in (*state.frames.values(), *state.cached):
                frame.unpersist()
        summary["audit"]["stream"] = {"batch": batch_id, "trigger_s": self.settings.trigger_s,
                                      "follows": self.settings.inputs}
        write_outputs(self.spark, self.settings.out, summary, tables, counts)
        self.progress(f"batch {batch_id}: {summary['inputs']['files']} file(s) audited, "
                      f"{summary['messages']['lost']} lost, "
                      f"{summary['messages']['duplicated']} duplicated, "
                      f"{summary['messages']['in_flight']} in flight")
        self.announce(batch_id)
        self.summary = summary

    def announce(self, batch_id: int) -> None:
        """
        Say on stderr which messages this batch established as lost or
        duplicated that no earlier batch announced, and remember them.
        """
        from pyspark.sql import functions as F

        problems = self.spark.read.parquet(f"{self.tables_dir}/message_problems")
        kind = F.when(F.col("duplicated"), F.lit("duplicated")).otherwise(F.col("fate"))
        problems = problems.where(
            F.col("fate").isin("lost", "lost-non-persistent") | F.col("duplicated")
        ).withColumn("kind", kind)
        if self._announced_any():
            before = self.spark.read.parquet(self.announced_dir).drop("batch")
            problems = problems.join(before, ["msg_id", "kind"], "left_anti")
        problems = problems.persist()
        try:
            rows = [row.asDict() for row in
                    problems.orderBy("accepted_time", "msg_id").limit(ANNOUNCE_LIMIT).collect()]
            if not rows:
                return
            total = problems.count()
            for row in rows:
                self.err.write(
                    f"meshroute audit: {row['kind'].upper()} {row['msg_id']} "
                    f"({row['origin']} → {row['dest']}), accepted "
                    f"{report.stamp(row['accepted_time'])}, enqueued {row['enqueued_events']} "
                    f"time(s), last held by {row['last_held_by']}\n")
            if total > len(rows):
                self.err.write(f"meshroute audit: … and {total - len(rows)} more lost or "
                               f"duplicated message(s): {self.tables_dir}/message_problems\n")
            self.err.flush()
            problems.select("msg_id", "kind").write.mode("overwrite").parquet(
                f"{self.announced_dir}/batch={batch_id}")
        finally:
            problems.unpersist()

    def _announced_any(self) -> bool:
        if is_uri(self.announced_dir):
            try:
                self.spark.read.parquet(self.announced_dir).limit(0).collect()
                return True
            except Exception:
                return False
        return os.path.isdir(self.announced_dir) and any(
            name.startswith("batch=") for name in os.listdir(self.announced_dir))


def _last_summary(out: str) -> dict | None:
    """
    The summary an earlier run left in C{out}, when this one found
    nothing new to audit.
    """
    try:
        with open(os.path.join(display_name(out), "summary.json"), encoding="utf-8") as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def run(settings, out, err, spark=None) -> int:
    """
    Follow C{settings.inputs} until interrupted (SIGINT, SIGTERM) or, with
    C{settings.once}, until the files there now are audited; returns the
    exit status of the last summary (L{meshroute.audit.job.run}'s).
    """
    from meshroute.audit.state import StateTables

    try:
        directories = follow_paths(settings.inputs)
    except AuditInputError as e:
        err.write(f"meshroute audit: {e}\n")
        return EXIT_BAD_INPUT
    if not have_pyspark(err):
        return EXIT_BAD_INPUT
    progress = Progress(err, settings.quiet)
    progress(f"following {len(directories)} directory(ies): {', '.join(directories)}")
    owned = spark is None
    if owned:
        spark = start_spark(settings, err)
        progress(f"Spark {spark.version} on {spark.sparkContext.master}")
    stop = threading.Event()
    previous = {}
    if threading.current_thread() is threading.main_thread():
        for number in (signal.SIGINT, signal.SIGTERM):
            previous[number] = signal.signal(number, lambda *_: stop.set())
    audit = StreamingAudit(spark, settings, progress, err)
    try:
        if not is_uri(settings.out):
            os.makedirs(settings.out, exist_ok=True)
        StateTables(spark, settings.out).claim()
        writer = (closed_files_stream(spark, directories, settings.max_files_per_trigger)
                  .writeStream.foreachBatch(audit)
                  .option("checkpointLocation", f"{settings.out.rstrip('/')}/checkpoint")
                  .queryName("meshroute-audit"))
        writer = (writer.trigger(availableNow=True) if settings.once
                  else writer.trigger(processingTime=f"{settings.trigger_s:g} seconds"))
        query = writer.start()
        while query.isActive and not stop.is_set():
            query.awaitTermination(1)
        if query.isActive:
            # Asked to stop: let the micro-batch under way finish first.
            while query.isActive and query.status["isTriggerActive"]:
                query.awaitTermination(1)
            query.stop()
        failure = query.exception()
        if failure is not None and not stop.is_set():
            err.write(f"meshroute audit: the streaming audit failed: {failure.desc}\n")
            return EXIT_BAD_INPUT
    except AuditInputError as e:
        err.write(f"meshroute audit: {e}\n")
        return EXIT_BAD_INPUT
    finally:
        for number, handler in previous.items():
            signal.signal(number, handler)
        if owned:
            spark.stop()
    summary = audit.summary or _last_summary(settings.out)
    if summary is None:
        progress("no closed event file yet")
        return EXIT_OK
    return finish(summary, settings, out)
