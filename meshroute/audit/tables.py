"""
The audit's tables: the views the batch and the streaming audit compute
alike from what they read, each written as Parquet under C{OUT/tables/},
and the summary and report they add up to.

PySpark is imported where a view is computed, not with this module: the
command checks first that it is installed (L{meshroute.audit.running.have_pyspark}).
"""

import datetime
import json
import os

from meshroute import __version__
from meshroute.audit import report, threads, topic_report
from meshroute.audit.inputs import AuditInputError, display_name, is_uri
from meshroute.audit.running import Progress
from meshroute.audit.settings import AuditSettings

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
    "subscriptions": ("router", "queue", "period"),
    "topic_links": ("router", "hop"),
    "topic_routers": ("router",),
    "topic_problems": ("router", "made_time", "copy_id"),
}

#: The most rows of a table the driver collects for the report.
COLLECT_LIMITS = {"link_sessions": 3000, "message_problems": 200, "malformed_lines": 200,
                  "keepalive_closes": 200, "failovers": 200, "latency_windows": 500,
                  "topic_problems": 200}


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
    spark_name = files.__getitem__ if files is not None else str
    keys = sorted({row["file"] for row in split_rows}, key=spark_name)
    names = {key: display_name(spark_name(key)) for key in keys}
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
    topics = topic_report.topic_summary(collected["subscriptions"], collected["topic_links"],
                                        collected["topic_routers"], counts["topic_problems"])
    progress(f"messages: {total['accepted']} accepted, {total['enqueued']} enqueued, "
             f"{total['lost']} lost, {total['duplicated']} duplicated, "
             f"{counts['routes']} route(s)")
    progress(f"routers: {counts['routers']} router(s), {counts['boots']} process(es), "
             f"{sum(r['count'] for r in collected['rejections'])} rejection(s), "
             f"{sum(r['count'] for r in collected['denials'])} client request(s) denied")
    progress(f"links: {counts['links']} link(s), {counts['link_sessions']} connection(s)")
    progress(f"ha: {ha['failovers']} failover(s) of {counts['ha_groups']} HA instance(s)")
    progress(f"topics: {topics['publications']} publication(s), "
             f"{topics['durable']['subscriptions']} durable subscription(s), "
             f"{topics['links']['sent']} copies between routers, "
             f"{counts['topic_problems']} copies to look at")

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
        latency_windows=collected["latency_windows"], topics=topics,
        subscriptions=collected["subscriptions"], topic_links=collected["topic_links"],
    )
    return summary, collected, counts


def write_outputs(spark, out: str, summary: dict, tables: dict, counts: dict) -> None:
    """
    Write C{summary.json} and C{report.html} into C{out}.
    """
    base = out.rstrip("/")
    _write_text(spark, f"{base}/summary.json", json.dumps(summary, indent=1) + "\n")
    _write_text(spark, f"{base}/report.html", report.render_html(summary, tables, counts))

