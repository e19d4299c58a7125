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
import atexit
import datetime
import json
import os
import sys
import tempfile
import time
from dataclasses import dataclass, field

if __package__ in (None, ""):  # spark-submit .../meshroute/audit/job.py
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

from meshroute import __version__  # noqa: E402
from meshroute.audit.inputs import AuditInputError, is_uri, resolve_inputs  # noqa: E402

EXIT_OK = 0
EXIT_BAD_INPUT = 1
EXIT_BROKEN_PROMISES = 2

DEFAULT_MASTER = "local[*]"
DEFAULT_GRACE_S = 60.0
DEFAULT_KEEPALIVE_LIMIT = 6.0
DEFAULT_LATENCY_WINDOW_S = 60.0

#: Memory for the local-mode driver (which is also the executor) unless
#: --conf spark.driver.memory says otherwise: a quarter of the machine's,
#: within these bounds (GiB).  10 million events ran in 5 (2 was too little).
LOCAL_DRIVER_MEMORY_GIB = (2, 8)


def local_driver_memory() -> str:
    """
    C{spark.driver.memory} for local mode on this machine.
    """
    low, high = LOCAL_DRIVER_MEMORY_GIB
    try:
        total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    except (ValueError, OSError, AttributeError):
        return f"{low}g"
    return f"{int(min(max(total / 4, low), high))}g"

#: Spark's own logging for the JVM we launch: warnings and up, on stderr,
#: without the notices every run would print: the native library's, and
#: the window operator's about a window over one partition, which the
#: totals' percentiles are on purpose (one group of a few rows, the
#: distinct latencies: L{meshroute.audit.views.percentiles}).
LOG4J2 = """\
rootLogger.level = {level}
rootLogger.appenderRef.stderr.ref = console
appender.console.type = Console
appender.console.name = console
appender.console.target = SYSTEM_ERR
appender.console.layout.type = PatternLayout
appender.console.layout.pattern = %d{{HH:mm:ss}} %p %c{{1}}: %m%n
logger.native.name = org.apache.hadoop.util.NativeCodeLoader
logger.native.level = error
logger.window.name = org.apache.spark.sql.execution.window.WindowExec
logger.window.level = error
"""

#: The tables written under OUT/tables/, one Parquet directory each, and
#: the columns their rows are sorted by.
TABLES = {
    "routes": ("origin", "dest"),
    "latency_histogram": ("origin", "dest", "bucket"),
    "latency_windows": ("origin", "dest", "window_start"),
    "message_problems": ("origin", "dest", "accepted_time", "msg_id"),
    "links": ("router", "peer"),
    "link_sessions": ("router", "opened", "link"),
    "keepalive_closes": ("closed_at", "router", "link"),
    "rejections": ("router", "peer", "code", "by"),
    "denials": ("router", "user", "action"),
    "routers": ("router",),
    "boots": ("router", "boot"),
    "malformed_lines": ("file", "line"),
    "inputs": ("file",),
    "failovers": ("time", "router", "role"),
    "ha_groups": ("router", "group", "role"),
}

#: The most rows of a table the driver collects for the report.
COLLECT_LIMITS = {"link_sessions": 3000, "message_problems": 200, "malformed_lines": 200,
                  "keepalive_closes": 200, "failovers": 200, "latency_windows": 500}


@dataclass
class AuditSettings:
    """
    What to audit and how.
    """

    inputs: list[str]
    out: str
    master: str | None = None
    conf: dict[str, str] = field(default_factory=dict)
    in_flight_grace_s: float = DEFAULT_GRACE_S
    keepalive_limit: float = DEFAULT_KEEPALIVE_LIMIT
    latency_window_s: float = DEFAULT_LATENCY_WINDOW_S
    quiet: bool = False
    #: Follow the inputs (directories) with the streaming audit
    #: (L{meshroute.audit.follow}) instead of reading them once.
    follow: bool = False
    trigger_s: float = 10.0
    max_files_per_trigger: int = 100
    #: With C{follow}: stop once the files there now are audited.
    once: bool = False


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


class Progress:
    """
    One line per step on stderr, with the time since the start.
    """

    def __init__(self, err, quiet: bool) -> None:
        self._err = err
        self._quiet = quiet
        self._start = time.monotonic()
        self._last = self._start
        self.steps: list[dict] = []

    def __call__(self, text: str) -> None:
        now = time.monotonic()
        self.steps.append({"step": text, "seconds": round(now - self._last, 3)})
        self._last = now
        if not self._quiet:
            self._err.write(f"audit [{now - self._start:7.1f} s] {text}\n")
            self._err.flush()

    @property
    def elapsed(self) -> float:
        return time.monotonic() - self._start


def _local_parallelism(master: str) -> int:
    inside = master[master.find("[") + 1:master.find("]")] if "[" in master else "1"
    try:
        return max(int(inside.split(",")[0]), 1)
    except ValueError:
        return os.cpu_count() or 1


def session_conf(master: str, conf: dict[str, str], quiet: bool, tty: bool) -> dict[str, str]:
    """
    The Spark settings the job starts a session with: loopback, no UI
    and few shuffle partitions on local mode; console progress bars only
    on a terminal and not when quiet; then the user's C{conf}, which wins.
    """
    settings = {
        "spark.sql.session.timeZone": "UTC",
        "spark.sql.debug.maxToStringFields": "500",
        # The parsed events' cache is mostly nulls and short strings: it
        # compressed by some 5 % for a fifth of the read's CPU time.
        "spark.sql.inMemoryColumnarStorage.compressed": "false",
        # The JSON source checks its pushed-down filters, none here, anew
        # for every line it parses: 3 % of the tasks' time.
        "spark.sql.json.filterPushdown.enabled": "false",
        # The tables are written by concurrent jobs (L{write_views}): each
        # has its share of the cores, and a small one does not wait for a
        # large one to end.
        "spark.scheduler.mode": "FAIR",
        "spark.ui.showConsoleProgress": "true" if tty and not quiet else "false",
    }
    if master.startswith("local"):
        settings.update({
            "spark.driver.host": "127.0.0.1",
            "spark.driver.bindAddress": "127.0.0.1",
            "spark.ui.enabled": "false",
            "spark.sql.shuffle.partitions": str(2 * _local_parallelism(master)),
            # Adaptive execution plans each shuffle again from its
            # statistics, with jobs of its own: on one machine's few
            # partitions it gains nothing at ten million events and costs
            # a fifth of a small audit's (and a micro-batch's) time.
            "spark.sql.adaptive.enabled": "false",
            "spark.driver.memory": local_driver_memory(),
        })
    settings.update(conf)
    return settings


def _under_spark_submit() -> bool:
    return "PYSPARK_GATEWAY_PORT" in os.environ


def start_spark(settings: AuditSettings, err):
    """
    A SparkSession for C{settings}: local mode by default, C{--master}
    when given, spark-submit's own when launched by it.
    """
    from pyspark.sql import SparkSession

    builder = SparkSession.builder.appName("meshroute-audit")
    master = settings.master
    if _under_spark_submit():
        if master:
            err.write("meshroute audit: --master is ignored under spark-submit; "
                      "use spark-submit --master\n")
        conf = dict(settings.conf)
    else:
        master = master or DEFAULT_MASTER
        builder = builder.master(master)
        conf = session_conf(master, settings.conf, settings.quiet, err.isatty())
        if master.startswith("local"):
            os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
            if "spark.driver.extraJavaOptions" not in conf:
                conf["spark.driver.extraJavaOptions"] = f"-Dlog4j2.configurationFile=" \
                    f"file:{_log4j2_file('error' if settings.quiet else 'warn')}"
    for key, value in conf.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR" if settings.quiet else "WARN")
    return spark


def _log4j2_file(level: str) -> str:
    """
    A log4j2 configuration for the JVM about to start, in a file of this
    process's own (removed when it exits).
    """
    fd, path = tempfile.mkstemp(prefix="meshroute-audit-log4j2-", suffix=".properties")
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        f.write(LOG4J2.format(level=level))
    atexit.register(_remove, path)
    return path


def _remove(path: str) -> None:
    try:
        os.remove(path)
    except OSError:
        pass


def _write_text(spark, path: str, text: str) -> None:
    """
    Write a small file from the driver: locally (whole: written beside
    and renamed, so a reader polling it, as one does the streaming
    audit's, never sees half), or through Hadoop's FileSystem for a URI
    (C{hdfs://}, C{s3a://}).
    """
    if not is_uri(path):
        with open(f"{path}.new", "w", encoding="utf-8") as f:
            f.write(text)
        os.replace(f"{path}.new", path)
        return
    jvm = spark.sparkContext._jvm
    target = jvm.org.apache.hadoop.fs.Path(path)
    fs = target.getFileSystem(spark.sparkContext._jsc.hadoopConfiguration())
    stream = fs.create(target, True)
    try:
        stream.write(bytearray(text.encode("utf-8")))
    finally:
        stream.close()


def _sort_key(columns):
    def key(row):
        return tuple((row[c] is not None, row[c] if row[c] is not None else 0) for c in columns)
    return key


def _rows(frame, limit: int | None = None, order=()) -> list[dict]:
    """
    The rows of C{frame} as dicts (at most C{limit}), sorted by C{order}.
    """
    if limit is not None:
        frame = (frame.orderBy(*order) if order else frame).limit(limit)
    rows = [row.asDict(recursive=True) for row in frame.collect()]
    return sorted(rows, key=_sort_key(order)) if order else rows


def audit(spark, files: list[str], settings: AuditSettings, progress: Progress):
    """
    Run the views over C{files}; write the tables; return the summary,
    the collected tables for the page and their full row counts.

    @raise AuditInputError: when the files hold no line.
    """
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

    from meshroute.audit import read, views

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
    totals = views.totals(fates)
    frames.update(small_views(others, starts, frames["boots"], logs.splits,
                              read.malformed_lines(logs.parsed, logs.splits), names,
                              settings))
    summary = write_views(spark, frames, totals, views.ha_totals(others), split_rows, logs.lines,
                          settings, progress, names)
    for frame in (*frames.values(), fates, per_boot, starts, others):
        frame.unpersist()
    logs.release()
    return summary


def time_range(split_rows: list[dict]) -> tuple[float | None, float | None]:
    """
    The first and last event time of the file splits C{split_rows}
    (L{meshroute.audit.read.blocks}).
    """
    times = [(row["first_time"], row["last_time"]) for row in split_rows
             if row["first_time"] is not None]
    if not times:
        return None, None
    return min(t[0] for t in times), max(t[1] for t in times)


def input_names(split_rows: list[dict], lines: int, progress: Progress,
                files: dict | None = None) -> dict:
    """
    Each file read (C{file} of C{split_rows}) → its name in the reports,
    in the order of Spark's names; says how many lines were read.

    @param files: C{file} → the file as Spark names it
        (L{meshroute.audit.read.EventLogs.files}); by default C{file} is
        that name.
    @raise AuditInputError: when no line is an event.
    """
    from meshroute.audit import read

    spark_name = files.__getitem__ if files is not None else str
    keys = sorted({row["file"] for row in split_rows}, key=spark_name)
    names = {key: read.display_name(spark_name(key)) for key in keys}
    malformed_count = sum(row["malformed"] for row in split_rows)
    progress(f"read {lines} lines from {len(names)} file(s): "
             f"{lines - malformed_count} events, {malformed_count} malformed")
    if time_range(split_rows)[1] is None:
        raise AuditInputError(f"no event in {len(names)} file(s): all {lines} lines "
                              "are malformed")
    return names


def small_views(events, starts, boots, splits, malformed, names: dict[str, str],
                settings: AuditSettings) -> dict:
    """
    The views of the few events that are not about messages (links,
    rejections, denials, HA) and of the inputs: the tables L{audit_logs}
    and the streaming audit compute alike.

    @param events: the events that are not about a message
        (L{meshroute.audit.views.other_events}).
    @param malformed: L{meshroute.audit.read.malformed_lines}.
    """
    from pyspark import StorageLevel
    from pyspark.sql import functions as F

    from meshroute.audit import read, views

    name_of = F.create_map(*[F.lit(x) for pair in names.items() for x in pair])
    frames = {}
    frames["rejections"] = views.rejections(events)
    frames["denials"] = views.denials(events)
    frames["inputs"] = read.input_files(splits).withColumn("file", name_of[F.col("file")])
    frames["malformed_lines"] = malformed.withColumn("file", name_of[F.col("file")])
    sessions = views.link_sessions(events, starts, boots, settings.keepalive_limit
                                   ).persist(StorageLevel.MEMORY_AND_DISK)
    frames["link_sessions"] = sessions
    frames["links"] = views.links(sessions)
    frames["keepalive_closes"] = views.keepalive_closes(sessions)
    frames["failovers"] = views.failovers(events)
    frames["ha_groups"] = views.ha_groups(events)
    return frames


def write_views(spark, frames: dict, totals, ha_totals, split_rows: list[dict], lines: int,
                settings: AuditSettings, progress: Progress, names: dict[str, str]):
    """
    Write the L{TABLES} C{frames}; return the summary, the collected
    tables for the page and their full row counts.

    @param totals: L{meshroute.audit.views.totals}.
    @param ha_totals: L{meshroute.audit.views.ha_totals}.
    @param split_rows: the file splits read (L{meshroute.audit.read.blocks}).
    """
    from pyspark import StorageLevel

    from meshroute.audit import report, threads

    keep = StorageLevel.MEMORY_AND_DISK
    malformed_count = sum(row["malformed"] for row in split_rows)
    first, horizon = time_range(split_rows)
    tables_dir = f"{settings.out.rstrip('/')}/tables"
    collected, counts = {}, {}

    # Each Spark job is described by what it computes, so that Spark's UI
    # and event log (benchmarks/audit_scale.py's stage table) say where
    # the time goes.
    def write_one(name):
        spark.sparkContext.setJobDescription(f"audit: {name}")
        order = TABLES[name]
        frame = frames[name]
        if not frame.is_cached:
            frame = frames[name] = frame.persist(keep)
        frame.coalesce(1).sortWithinPartitions(*order).write.mode("overwrite").parquet(
            f"{tables_dir}/{name}")
        limit = COLLECT_LIMITS.get(name)
        collected[name] = _rows(frame, None if limit is None else limit + 1, order)
        counts[name] = len(collected[name])
        if limit is not None and counts[name] > limit:
            counts[name] = frame.count()
            collected[name] = collected[name][:limit]

    def collect_totals():
        spark.sparkContext.setJobDescription("audit: totals")
        total.update(_rows(totals)[0])

    def collect_ha_totals():
        spark.sparkContext.setJobDescription("audit: ha totals")
        ha_row.update(_rows(ha_totals)[0])

    # A few jobs at a time (threads.run_all), those on the longest path
    # (the messages', which wait for their aggregation) first.
    total, ha_row = {}, {}
    threads.run_all([collect_totals, *[lambda name=name: write_one(name) for name in TABLES],
                     collect_ha_totals])
    spark.sparkContext.setJobDescription(None)
    progress(f"wrote {len(TABLES)} Parquet tables to {tables_dir}")
    ha = report.ha_summary(ha_row, collected["failovers"])
    progress(f"messages: {total['accepted']} accepted, {total['enqueued']} enqueued, "
             f"{total['lost']} lost, {total['duplicated']} duplicated, "
             f"{counts['routes']} route(s)")
    progress(f"routers: {counts['routers']} router(s), {counts['boots']} process(es), "
             f"{sum(r['count'] for r in collected['rejections'])} rejection(s), "
             f"{sum(r['count'] for r in collected['denials'])} client request(s) denied")
    progress(f"links: {counts['links']} link(s), {counts['link_sessions']} connection(s)")
    progress(f"ha: {ha['failovers']} failover(s) of {counts['ha_groups']} HA instance(s)")

    audit_info = {
        "meshroute_version": __version__,
        "spark_version": spark.version,
        "master": spark.sparkContext.master,
        "generated_at": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "inputs": list(names.values()),
        "out": settings.out,
        "tables": {name: f"{tables_dir}/{name}" for name in TABLES},
    }
    summary = report.build_summary(
        totals=total, routes=collected["routes"], links=collected["links"],
        routers=collected["routers"], inputs=collected["inputs"],
        malformed=collected["malformed_lines"], malformed_count=malformed_count,
        keepalive_limit=settings.keepalive_limit, grace_s=settings.in_flight_grace_s,
        audit=audit_info, time_range=(first, horizon), ha=ha,
        latency_windows=collected["latency_windows"],
    )
    return summary, collected, counts


def have_pyspark(err) -> bool:
    """
    Whether pyspark can be imported; if not, say how to install it.
    """
    try:
        import pyspark  # noqa: F401
    except ImportError:
        err.write("meshroute audit: pyspark is not installed; "
                  "install meshroute with the audit extra: pip install 'meshroute[audit]'\n")
        return False
    return True


def write_outputs(spark, out: str, summary: dict, tables: dict, counts: dict) -> None:
    """
    Write C{summary.json} and C{report.html} into C{out}.
    """
    from meshroute.audit import report

    base = out.rstrip("/")
    _write_text(spark, f"{base}/summary.json", json.dumps(summary, indent=1) + "\n")
    _write_text(spark, f"{base}/report.html", report.render_html(summary, tables, counts))


def run(settings: AuditSettings, out=None, err=None, spark=None) -> int:
    """
    The whole job; returns the exit status.

    @param spark: a SparkSession to use (and leave running); by default
        one is started from C{settings} and stopped at the end.
    """
    from meshroute.audit import report

    out = out or sys.stdout
    err = err or sys.stderr
    if settings.follow:
        from meshroute.audit import follow

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
    for line in report.console_lines(summary, settings.out.rstrip("/")):
        out.write(line + "\n")
    out.flush()
    return EXIT_OK if summary["ok"] else EXIT_BROKEN_PROMISES


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
    follow = p.add_argument_group(
        "the streaming audit",
        "--follow: EVENTS are directories (routers' data or events directories, or a "
        "directory above them); their closed events-*.jsonl files are audited as they "
        "appear, OUT/summary.json and OUT/report.html are rewritten after each, and a "
        "restart resumes from OUT/checkpoint")
    follow.add_argument("--follow", action="store_true",
                        help="follow the directories until interrupted")
    follow.add_argument("--trigger", type=float, default=AuditSettings.trigger_s,
                        metavar="SECONDS",
                        help="look for new closed files this often "
                             f"(default {AuditSettings.trigger_s:g})")
    follow.add_argument("--max-files-per-trigger", type=int,
                        default=AuditSettings.max_files_per_trigger, metavar="N",
                        help="read at most N new files at a time "
                             f"(default {AuditSettings.max_files_per_trigger})")
    follow.add_argument("--once", action="store_true",
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
