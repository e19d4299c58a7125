"""
The audit job: read the routers' event logs, compute the views, write the
Parquet tables, C{summary.json} and C{report.html}, print the verdict.

Three ways to run it, one code path:

    meshroute audit var/lab --out var/lab/audit
    python -m meshroute.audit 'logs/*/events/' --out audit --master spark://host:7077
    spark-submit --master spark://host:7077 path/to/meshroute/audit/job.py \\
        hdfs:///mesh/logs --out hdfs:///mesh/audit

Without C{--master} the job runs on Spark's local mode (C{local[*]},
bound to 127.0.0.1); under C{spark-submit}, spark-submit's master and
settings rule.  C{--conf key=value} passes any Spark setting through.
The job uses no Python UDF, so executors need no meshroute: only the
driver imports it (run as a script, this file finds its own package).

Exit status: 0 the mesh kept its promises, 2 it did not (see
C{summary.json}'s C{reasons}), 1 bad input or options.
"""

import argparse
import os
import sys

if __package__ in (None, ""):  # spark-submit .../meshroute/audit/job.py
    # Run as a script, Python puts this file's folder on the path, where
    # incremental.py would hide the package of that name Twisted imports:
    # the checkout's root takes its place.
    _here = os.path.dirname(os.path.abspath(__file__))
    sys.path[:] = [entry for entry in sys.path
                   if os.path.abspath(entry or os.curdir) != _here]
    sys.path.insert(0, os.path.dirname(os.path.dirname(_here)))

from meshroute.audit import follow  # noqa: E402
from meshroute.audit.inputs import AuditInputError, is_uri, resolve_inputs  # noqa: E402
from meshroute.audit.running import (  # noqa: E402
    EXIT_BAD_INPUT,
    Progress,
    finish,
    have_pyspark,
    start_spark,
)
from meshroute.audit.settings import (  # noqa: E402
    DEFAULT_GRACE_S,
    DEFAULT_KEEPALIVE_LIMIT,
    DEFAULT_LATENCY_WINDOW_S,
    DEFAULT_MASTER,
    AuditSettings,
)
from meshroute.audit.tables import (  # noqa: E402
    input_names,
    small_views,
    time_range,
    write_outputs,
    write_views,
)


def parse_conf(pairs) -> dict[str, str]:
    """
    C{["key=value", ...]} → C{{key: value}}.

    @raise ValueError: for an item without C{=} or with an empty key.
    """
    conf = {}
    for pair in pairs or ():
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise ValueError(f"--conf {pair!r}: expected key=value")
        conf[key.strip()] = value
    return conf


def audit(spark, files: list[str], settings: AuditSettings, progress: Progress):
    """
    Run the views over C{files}; write the tables; return the summary,
    the collected tables for the page and their full row counts.

    @raise AuditInputError: when the files hold no line.
    """
    # PySpark, which read and views import, is imported when an audit
    # runs, not with the command: have_pyspark says first if it is missing.
    from meshroute.audit import read, views

    spark.sparkContext.setJobDescription("audit: read")
    return audit_logs(spark, read.read_logs(spark, files, views.FIELDS_USED), settings,
                      progress)


def audit_logs(spark, logs, settings: AuditSettings, progress: Progress,
               settled_per_router: bool = False):
    """
    L{audit} of logs already read and parsed (L{meshroute.audit.read.EventLogs}),
    which it releases.

    @param settled_per_router: how far a router's log can show what
        happened to the messages sent to it (L{meshroute.audit.views.routers}'
        C{available_until}): the run's last event when the logs are
        complete (the batch audit), else that router's own last event,
        the event-time watermark of the streaming audit, which has not
        seen the files a router has not closed yet.
    """
    from pyspark import StorageLevel

    from meshroute.audit import read, topic_views, views

    keep = StorageLevel.MEMORY_AND_DISK
    split_rows = logs.split_rows
    try:
        names = input_names(split_rows, logs.lines, progress, logs.files)
    except AuditInputError:
        logs.release()
        raise
    horizon = time_range(split_rows)[1]
    events = logs.events
    # One pass over every event picks the few the small views read.
    others = views.other_events(events).persist(keep)
    starts = views.boot_starts(others).persist(keep)
    frames = {}
    # One pass over every event counts per router process, for both.
    per_boot = views.boot_counts(events, starts).persist(keep)
    frames["boots"] = views.boots(others, starts, per_boot).persist(keep)
    frames["routers"] = views.routers_of(per_boot, None if settled_per_router else horizon
                                         ).persist(keep)
    fates = views.message_fates(events, frames["routers"], settings.in_flight_grace_s
                                ).persist(keep)
    frames["routes"] = views.routes(fates)
    frames["latency_histogram"] = views.latency_histogram(fates)
    frames["latency_windows"] = views.latency_windows(fates, settings.latency_window_s)
    frames["message_problems"] = views.message_problems(fates)
    copies = topic_views.copy_fates(topic_views.copy_partials(events), frames["routers"],
                                    settings.in_flight_grace_s)
    if any(row["topic_events"] for row in split_rows):
        copies = copies.persist(keep)
        frames.update(topic_views.topic_tables(events, others, copies))
    else:
        # Nothing about topics: their tables are empty, and cost no job.
        frames.update(topic_views.empty_like(spark, topic_views.topic_tables(events, others,
                                                                             copies)))
    totals = views.totals(fates)
    frames.update(small_views(others, starts, frames["boots"], logs.splits,
                              read.malformed_lines(logs.parsed, logs.splits), names,
                              settings))
    summary = write_views(spark, frames, totals, views.ha_totals(others), split_rows, logs.lines,
                          settings, progress, names)
    for frame in (*frames.values(), fates, copies, per_boot, starts, others):
        frame.unpersist()
    logs.release()
    return summary


def run(settings: AuditSettings, out=None, err=None, spark=None) -> int:
    """
    The whole job; returns the exit status.

    @param spark: a SparkSession to use (and leave running); by default
        one is started from C{settings} and stopped at the end.
    """
    out = out or sys.stdout
    err = err or sys.stderr
    if settings.follow:
        return follow.run(settings, out, err, spark)
    try:
        files = resolve_inputs(settings.inputs)
    except AuditInputError as e:
        err.write(f"meshroute audit: {e}\n")
        return EXIT_BAD_INPUT
    if not have_pyspark(err):
        return EXIT_BAD_INPUT
    progress = Progress(err, settings.quiet)
    progress(f"auditing {len(files)} file(s)")
    owned = spark is None
    if owned:
        spark = start_spark(settings, err)
        progress(f"Spark {spark.version} on {spark.sparkContext.master}")
    try:
        if not is_uri(settings.out):
            os.makedirs(settings.out, exist_ok=True)
        summary, tables, counts = audit(spark, files, settings, progress)
        summary["audit"]["steps"] = progress.steps
        summary["audit"]["elapsed_s"] = round(progress.elapsed, 3)
        write_outputs(spark, settings.out, summary, tables, counts)
        progress("wrote summary.json and report.html")
    except AuditInputError as e:
        err.write(f"meshroute audit: {e}\n")
        return EXIT_BAD_INPUT
    finally:
        if owned:
            spark.stop()
    return finish(summary, settings, out)


class UsageProblem(ValueError):
    """
    The command line is wrong: bad input, exit status 1 (not argparse's 2,
    which here means the mesh broke its promises).
    """


class _Parser(argparse.ArgumentParser):
    def error(self, message):
        raise UsageProblem(f"{message} (see meshroute audit --help)")


def parser() -> argparse.ArgumentParser:
    p = _Parser(
        prog="meshroute audit",
        description="Audit a mesh from its routers' event logs on Spark: per route, messages\n"
                    "accepted, enqueued, consumed, lost, duplicated and their latency; per link,\n"
                    "sessions, time in delivery, close reasons and keepalive closes; per router,\n"
                    "rejections and client-session events.",
        epilog="exit status: 0 the mesh kept its promises, 2 it did not, 1 bad input.\n\n"
               "following the mesh (the streaming audit, over closed rotated files):\n"
               "  meshroute audit --follow DIR... --out DIR\n\n"
               "the same job:\n"
               "  python -m meshroute.audit EVENTS... --out DIR\n"
               "  spark-submit --master URL path/to/meshroute/audit/job.py EVENTS... --out DIR\n\n"
               "docs/events.md, 'Audit', describes the schema, every figure and the outputs.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("events", nargs="+", metavar="EVENTS",
                   help="event logs: files, directories (every *.jsonl below) or globs")
    p.add_argument("--out", required=True, metavar="DIR",
                   help="where to write tables/, summary.json and report.html")
    p.add_argument("--master", default=None,
                   help=f"Spark master URL (default {DEFAULT_MASTER}; "
                        "spark://…, yarn, k8s://…)")
    p.add_argument("--conf", action="append", default=[], metavar="KEY=VALUE",
                   help="a Spark setting (repeatable)")
    p.add_argument("--in-flight-grace", type=float, default=DEFAULT_GRACE_S, metavar="SECONDS",
                   help="messages accepted this close to the end of the logs and not yet "
                        f"enqueued count as in flight, not lost (default {DEFAULT_GRACE_S:g})")
    p.add_argument("--keepalive-limit", type=float, default=DEFAULT_KEEPALIVE_LIMIT,
                   metavar="INTERVALS",
                   help="a keepalive close later than this many intervals after the peer's "
                        "last sign of life breaks the promise "
                        f"(default {DEFAULT_KEEPALIVE_LIMIT:g})")
    p.add_argument("--latency-window", type=float, default=DEFAULT_LATENCY_WINDOW_S,
                   metavar="SECONDS",
                   help="latency percentiles per route and window of this many seconds "
                        f"(default {DEFAULT_LATENCY_WINDOW_S:g})")
    p.add_argument("--quiet", "-q", action="store_true", help="no progress lines")
    streaming = p.add_argument_group(
        "the streaming audit",
        "--follow: EVENTS are directories (routers' data or events directories, or a "
        "directory above them); their closed events-*.jsonl files are audited as they "
        "appear, OUT/summary.json and OUT/report.html are rewritten after each, and a "
        "restart resumes from OUT/checkpoint")
    streaming.add_argument("--follow", action="store_true",
                        help="follow the directories until interrupted")
    streaming.add_argument("--trigger", type=float, default=AuditSettings.trigger_s,
                        metavar="SECONDS",
                        help="look for new closed files this often "
                             f"(default {AuditSettings.trigger_s:g})")
    streaming.add_argument("--max-files-per-trigger", type=int,
                        default=AuditSettings.max_files_per_trigger, metavar="N",
                        help="read at most N new files at a time "
                             f"(default {AuditSettings.max_files_per_trigger})")
    streaming.add_argument("--once", action="store_true",
                        help="audit the closed files there now, then stop (a later run "
                             "resumes from the checkpoint)")
    return p


def settings_from_args(argv=None) -> AuditSettings:
    """
    L{AuditSettings} from a command line (without the program name).

    @raise UsageProblem: naming what is wrong.
    """
    p = parser()
    args = p.parse_args(argv)
    try:
        conf = parse_conf(args.conf)
    except ValueError as e:
        p.error(str(e))
    if args.in_flight_grace < 0:
        p.error("--in-flight-grace must not be negative")
    if args.keepalive_limit <= 0:
        p.error("--keepalive-limit must be positive")
    if args.latency_window <= 0:
        p.error("--latency-window must be positive")
    if args.trigger <= 0:
        p.error("--trigger must be positive")
    if args.max_files_per_trigger < 1:
        p.error("--max-files-per-trigger must be at least 1")
    if args.once and not args.follow:
        p.error("--once goes with --follow")
    return AuditSettings(inputs=args.events, out=args.out, master=args.master, conf=conf,
                         in_flight_grace_s=args.in_flight_grace,
                         keepalive_limit=args.keepalive_limit,
                         latency_window_s=args.latency_window, quiet=args.quiet,
                         follow=args.follow, trigger_s=args.trigger,
                         max_files_per_trigger=args.max_files_per_trigger, once=args.once)


def main(argv=None) -> int:
    try:
        settings = settings_from_args(argv)
    except UsageProblem as e:
        sys.stderr.write(f"meshroute audit: {e}\n")
        return EXIT_BAD_INPUT
    return run(settings)


if __name__ == "__main__":
    sys.exit(main())
