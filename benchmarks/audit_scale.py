"""
The audit at scale: generate N million events for a mesh of M routers and
time the audit on Spark's local mode.

For each size, the generator (tests/support/event_generator.py, C{write_bulk})
writes one JSON-lines file per router, with known losses (0.1 %),
duplicates (0.1 %) and a malformed line every 100,000; then a fresh
process runs the audit job on a fresh local Spark, exactly as
C{meshroute audit DIR --out OUT} does, and reports:

  - audit s: the job's own time, from reading to report.html (Spark's
    start-up, a few seconds, is reported apart as "spark start s");
  - events/s: lines read per second of "audit s";
  - peak RSS of the Python driver process and of the JVM it launched
    (VmHWM from /proc: resident memory at its highest, so what the run
    needed from the machine, heap and off-heap);
  - correct: whether the audit found exactly the generated numbers
    (accepted, enqueued, lost, duplicated, malformed lines);
  - where the time went: the slowest Spark stages, from the run's Spark
    event log (each with the job's description, the audit's step or
    table, its seconds, the CPU seconds of its tasks and its operators),
    and the CPU seconds of all tasks: on a shared machine the figure that
    other work disturbs least; and how many Spark jobs the audit ran;
  - bare scan s: what Spark alone needs to read the same files, in a
    fresh process with a fresh local Spark beside the audit's (the same
    settings): C{spark.read.json(DIR, schema=<the audit's parse
    schema>)} grouped by C{event} and counted, from the read to the
    counts in the driver; and the audit's ratio to it, the last line
    (C{ratio to a bare scan: ...}) for the largest size;
  - with --floors, what any audit of these logs must at least do, each
    in a fresh process as the bare scan: parse every field the audit
    reads (L{meshroute.audit.views.FIELDS_USED}), and that with the
    per-message aggregation (L{meshroute.audit.views.message_partials}),
    with their ratio to the bare scan.

    python benchmarks/audit_scale.py                     # 1, 2, 5, 10 million, 10 routers
    python benchmarks/audit_scale.py --millions 0.2      # a quick smoke run
    python benchmarks/audit_scale.py --millions 10 10 10 --floors   # issue 31's measure
    python benchmarks/audit_scale.py --conf spark.driver.memory=4g

Needs pyspark (the audit extra) and Java.  See benchmarks/README.md.
"""

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
sys.path.insert(1, os.path.join(ROOT, "tests"))


def peak_rss_mb(pid: int) -> float | None:
    """
    The peak resident set (VmHWM) of process C{pid}, in MiB.
    """
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        return None
    return None


def cpu_seconds(pid: int) -> float | None:
    """
    The CPU time (user + system, every thread) process C{pid} has used.
    """
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def cpu_by_thread(pid: int) -> dict[str, float]:
    """
    The CPU seconds of process C{pid}'s live threads, summed by thread
    name without its numbers ("Executor task launch worker", "GC
    Thread", "C2 CompilerThread", ...).
    """
    seconds: dict[str, float] = {}
    tick = os.sysconf("SC_CLK_TCK")
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return seconds
    for task in tasks:
        try:
            with open(f"/proc/{pid}/task/{task}/stat") as f:
                text = f.read()
        except OSError:
            continue
        name = re.sub(r"[#\d\s-]+$", "", text[text.index("(") + 1:text.rindex(")")])
        fields = text.rsplit(")", 1)[1].split()
        seconds[name] = seconds.get(name, 0.0) + (int(fields[11]) + int(fields[12])) / tick
    return seconds


def jvm_pid(spark) -> int | None:
    """
    The pid of the JVM behind C{spark}: asked through py4j, else found
    among this process's children in /proc.
    """
    try:
        return int(spark.sparkContext._jvm.java.lang.ProcessHandle.current().pid())
    except Exception:
        pass
    me = os.getpid()
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                command = f.read()
        except OSError:
            continue
        if int(fields[1]) == me and b"java" in command:
            return int(entry)
    return None


#: The Spark settings of the event log the stage table is read from: one
#: plain JSON-lines file per run.
EVENT_LOG = {"spark.eventLog.enabled": "true", "spark.eventLog.compress": "false",
             "spark.eventLog.rolling.enabled": "false"}

#: How many of the slowest stages each run reports.
TOP_STAGES = 8


def slowest_stages(path: str, top: int = TOP_STAGES) -> list[dict]:
    """
    The C{top} longest stages of the Spark event log at C{path}: C{stage},
    C{job} (the description the audit gave the job), C{seconds} (from
    submission to completion), C{cpu_s} (its tasks' CPU time), C{tasks}
    and C{operators} (the physical operators it ran).
    """
    jobs, stages, cpu = {}, {}, {}
    with open(path) as f:
        for line in f:
            event = json.loads(line)
            kind = event.get("Event")
            if kind == "SparkListenerJobStart":
                description = (event.get("Properties") or {}).get("spark.job.description")
                for info in event["Stage Infos"]:
                    jobs.setdefault(info["Stage ID"], description)
            elif kind == "SparkListenerTaskEnd":
                metrics = event.get("Task Metrics") or {}
                cpu[event["Stage ID"]] = (cpu.get(event["Stage ID"], 0.0)
                                          + metrics.get("Executor CPU Time", 0) / 1e9)
            elif kind == "SparkListenerStageCompleted":
                info = event["Stage Info"]
                if "Submission Time" not in info or "Completion Time" not in info:
                    continue  # skipped: its shuffle output was reused
                operators = []
                for rdd in info["RDD Info"]:
                    name = json.loads(rdd.get("Scope") or "{}").get("name", "")
                    name = name.split(" (")[0].strip()
                    if name and not name.startswith(("mapPartitions", "WholeStageCodegen",
                                                     "AdaptiveSparkPlan")) \
                            and name not in operators:
                        operators.append(name)
                stages[info["Stage ID"]] = {
                    "stage": info["Stage ID"], "tasks": info["Number of Tasks"],
                    "seconds": (info["Completion Time"] - info["Submission Time"]) / 1000,
                    "operators": operators}
    for stage in stages.values():
        stage["job"] = jobs.get(stage["stage"]) or ""
        stage["cpu_s"] = cpu.get(stage["stage"], 0.0)
    return sorted(stages.values(), key=lambda s: -s["seconds"])[:top]


def spark_jobs(path: str) -> int:
    """
    How many Spark jobs the run whose event log is at C{path} ran: issue
    31's measure of the audit's fixed cost, each job planned, compiled
    and scheduled apart.
    """
    with open(path) as f:
        return sum(1 for line in f if "SparkListenerJobStart" in line
                   and json.loads(line).get("Event") == "SparkListenerJobStart")


def child(directory: str, out: str, master: str, conf: list[str]) -> None:
    """
    Run one audit in this process and print one JSON line of figures.
    """
    import io

    from meshroute.audit.job import parse_conf, run
    from meshroute.audit.running import start_spark
    from meshroute.audit.settings import AuditSettings

    event_log = os.path.join(os.path.dirname(out), "eventlog")
    os.makedirs(event_log, exist_ok=True)
    settings = AuditSettings(inputs=[directory], out=out, master=master,
                             conf={**EVENT_LOG, "spark.eventLog.dir": f"file:{event_log}",
                                   **parse_conf(conf)}, quiet=True)
    started = time.monotonic()
    spark = start_spark(settings, sys.stderr)
    spark_start = time.monotonic() - started
    pid = jvm_pid(spark)
    jvm_cpu = cpu_seconds(pid) if pid else None
    began = time.monotonic()
    code = run(settings, out=io.StringIO(), err=sys.stderr, spark=spark)
    seconds = time.monotonic() - began
    threads = {}
    if jvm_cpu is not None:
        # Every JVM thread's: the tasks', and the collector's, compiler's
        # and scheduler's that Spark's task metrics leave out.
        jvm_cpu = cpu_seconds(pid) - jvm_cpu
        threads = dict(sorted(cpu_by_thread(pid).items(), key=lambda kv: -kv[1])[:TOP_STAGES])
    figures = {"code": code, "spark_start_s": spark_start, "audit_s": seconds,
               "python_peak_mb": peak_rss_mb(os.getpid()),
               "jvm_peak_mb": peak_rss_mb(pid) if pid else None,
               "jvm_cpu_s": jvm_cpu, "jvm_threads": threads,
               "parallelism": spark.sparkContext.defaultParallelism}
    log = os.path.join(event_log, spark.sparkContext.applicationId)
    spark.stop()
    if os.path.isfile(log):
        every = slowest_stages(log, top=10**6)
        figures["stages"] = every[:TOP_STAGES]
        figures["stage_total_s"] = sum(s["seconds"] for s in every)
        figures["stage_cpu_s"] = sum(s["cpu_s"] for s in every)
        figures["jobs"] = spark_jobs(log)
        os.remove(log)
    print(json.dumps(figures), flush=True)


#: The floors (C{--floors}): what reading the logs costs an audit of any
#: design, each in a fresh process as the bare scan runs.
FLOORS = {
    "fields": "parse every field the audit reads (no cache, no check of the lines)",
    "messages": "that, and aggregate the message events per message id",
}


def bare_child(directory: str, master: str, conf: list[str], kind: str = "scan") -> None:
    """
    Run the bare scan of C{directory} (C{kind} C{scan}), or one of the
    L{FLOORS}, in this process, on a Spark started as L{child} starts the
    audit's, and print one JSON line of figures.

    The bare scan (L{meshroute.audit.bare_scan}) asks Spark for the
    C{event} column alone, so its JSON source materializes that field and
    skips the others' values (it still reads every byte); the floors
    write what they compute to Spark's C{noop} sink, which makes Spark
    compute every column.
    """
    from pyspark.sql import functions as F

    from meshroute.audit import views
    from meshroute.audit.bare_scan import bare_scan
    from meshroute.audit.job import parse_conf
    from meshroute.audit.running import start_spark
    from meshroute.audit.schema import parse_schema
    from meshroute.audit.settings import AuditSettings

    settings = AuditSettings(inputs=[directory], out=directory, master=master,
                             conf=parse_conf(conf), quiet=True)
    spark = start_spark(settings, sys.stderr)
    pid = jvm_pid(spark)
    jvm_cpu = cpu_seconds(pid) if pid else None
    began = time.monotonic()
    rows = None
    if kind == "scan":
        rows = bare_scan(spark, [directory])
    else:
        fields = spark.read.json(directory, schema=parse_schema(views.FIELDS_USED))
        if kind == "messages":
            fields = views.message_partials(fields.where(F.col("event").isNotNull()))
        fields.write.format("noop").mode("overwrite").save()
    seconds = time.monotonic() - began
    if jvm_cpu is not None:
        jvm_cpu = cpu_seconds(pid) - jvm_cpu
    figures = {"bare_s": seconds, "bare_jvm_cpu_s": jvm_cpu, "bare_rows": rows}
    spark.stop()
    print(json.dumps(figures), flush=True)


def run_child(mode: str, args: list[str], log: str, what: str) -> dict:
    """
    Run this script as a child in C{mode} with C{args}, its stderr into
    C{log}, and return the figures of the JSON line it printed last.
    """
    with open(log, "w") as stderr:
        result = subprocess.run(
            [sys.executable, os.path.abspath(__file__), mode, *args],
            stdout=subprocess.PIPE, stderr=stderr, text=True,
            env={**os.environ, "PYTHONPATH": ROOT + os.pathsep + os.environ.get("PYTHONPATH", "")},
        )
    lines = [line for line in result.stdout.splitlines() if line.startswith("{")]
    if result.returncode != 0 or not lines:
        with open(log) as f:
            errors = [line for line in f if "Error" in line or "Exception" in line]
        raise SystemExit(f"{what} failed ({result.returncode}); "
                         f"see {log}:\n{''.join(errors[:20])}")
    os.remove(log)
    return json.loads(lines[-1])


def measure(millions: float, routers: int, master: str, conf: list[str], base: str,
            floors: bool = False) -> dict:
    from support.event_generator import write_bulk

    events = int(millions * 1_000_000)
    directory = os.path.join(base, f"logs-{events}")
    out = os.path.join(base, f"audit-{events}")
    began = time.monotonic()
    expected = write_bulk(directory, events, routers=routers)
    generate_s = time.monotonic() - began
    size_mb = sum(os.path.getsize(os.path.join(directory, f))
                  for f in os.listdir(directory)) / 2**20
    conf_args = [item for pair in conf for item in ("--conf", pair)]
    began = time.monotonic()
    figures = run_child("_child", [directory, out, master, *conf_args],
                        os.path.join(base, f"audit-{events}.stderr"), f"audit of {events} events")
    wall_s = time.monotonic() - began
    figures |= run_child("_bare", [directory, master, "scan", *conf_args],
                         os.path.join(base, f"bare-{events}.stderr"),
                         f"bare scan of {events} events")
    figures["floors"] = {
        kind: run_child("_bare", [directory, master, kind, *conf_args],
                        os.path.join(base, f"floor-{kind}-{events}.stderr"),
                        f"floor {kind} of {events} events")
        for kind in (FLOORS if floors else ())}
    with open(os.path.join(out, "summary.json")) as f:
        summary = json.load(f)
    messages = summary["messages"]
    found = {"events": summary["inputs"]["lines"], "accepted": messages["accepted"],
             "enqueued": messages["enqueued"], "lost": messages["lost"],
             "duplicated": messages["duplicated"], "malformed": summary["inputs"]["malformed"]}
    # The generator's totals leave out what it wrote none of (no malformed
    # line below 100,000 events).
    expected = {key: expected.get(key, 0) for key in found} | expected
    correct = all(found[key] == expected[key] for key in found)
    shutil.rmtree(directory, ignore_errors=True)
    shutil.rmtree(out, ignore_errors=True)
    steps = ", ".join(f"{s['step'].split(':')[0].split()[0]} {s['seconds']:.0f}"
                      for s in summary["audit"]["steps"][1:-1])
    return {"events": expected["events"], "size_mb": size_mb, "generate_s": generate_s,
            "wall_s": wall_s, **figures, "correct": correct, "found": found,
            "expected": expected, "steps": steps}


def print_stages(row: dict) -> None:
    """
    The slowest Spark stages of a run, one line each.
    """
    if row.get("jvm_threads"):
        print(f"{'':>11} JVM CPU s by thread (its life, start-up included): "
              + ", ".join(f"{name} {seconds:.1f}" for name, seconds in row["jvm_threads"].items()),
              flush=True)
    if not row.get("stages"):
        return
    print(f"{'':>11} slowest stages (all {row['stage_total_s']:.0f} s, "
          f"{row['stage_cpu_s']:.0f} CPU s of tasks, {row['jobs']} Spark jobs):", flush=True)
    for stage in row["stages"]:
        print(f"{'':>13}{stage['seconds']:7.1f} s {stage['cpu_s']:7.1f} CPU s "
              f"{stage['tasks']:>4} tasks  {stage['job'] or '-':<26} "
              f"{', '.join(stage['operators'])}", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--millions", type=float, nargs="+", default=[1, 2, 5, 10],
                        help="sizes to run, in millions of events (default 1 2 5 10)")
    parser.add_argument("--routers", type=int, default=10, help="routers in the mesh (10)")
    parser.add_argument("--master", default="local[*]", help="Spark master (local[*])")
    parser.add_argument("--conf", action="append", default=[], metavar="KEY=VALUE",
                        help="a Spark setting for the audit (repeatable)")
    parser.add_argument("--floors", action="store_true",
                        help="also time the floors, each in a fresh process: parsing "
                             "every field the audit reads, and that with the "
                             "per-message aggregation")
    parser.add_argument("--dir", default=None,
                        help="where to write the logs (default: a temporary directory; "
                             "kept when given, and the failed runs' stderr with it)")
    args = parser.parse_args()
    base = args.dir or tempfile.mkdtemp(prefix="meshroute-audit-scale-")
    os.makedirs(base, exist_ok=True)
    print(f"audit scale: {args.routers} routers, master {args.master}, {os.cpu_count()} CPUs, "
          f"conf {args.conf or 'defaults'}", flush=True)
    header = (f"{'events':>11} {'MiB':>7} {'generate s':>11} {'spark start s':>14} "
              f"{'audit s':>8} {'events/s':>10} {'python MiB':>11} {'JVM MiB':>8} {'JVM CPU s':>10} "
              f"{'bare scan s':>12} {'bare CPU s':>11} {'ratio':>6} {'correct':>8}")
    print(header, flush=True)
    row = None
    try:
        for millions in args.millions:
            row = measure(millions, args.routers, args.master, args.conf, base, args.floors)
            print(f"{row['events']:>11,} {row['size_mb']:>7.0f} {row['generate_s']:>11.1f} "
                  f"{row['spark_start_s']:>14.1f} {row['audit_s']:>8.1f} "
                  f"{row['events'] / row['audit_s']:>10,.0f} {row['python_peak_mb']:>11.0f} "
                  f"{row['jvm_peak_mb'] or 0:>8.0f} {row['jvm_cpu_s'] or 0:>10.1f} "
                  f"{row['bare_s']:>12.1f} {row['bare_jvm_cpu_s'] or 0:>11.1f} "
                  f"{row['audit_s'] / row['bare_s']:>5.2f}x "
                  f"{'yes' if row['correct'] else 'NO':>8}",
                  flush=True)
            print(f"{'':>11} steps (s): {row['steps']}", flush=True)
            print_stages(row)
            for kind, floor in row["floors"].items():
                print(f"{'':>11} floor, {FLOORS[kind]}: {floor['bare_s']:.1f} s, "
                      f"{floor['bare_jvm_cpu_s'] or 0:.1f} JVM CPU s, "
                      f"{floor['bare_s'] / row['bare_s']:.2f}x the bare scan", flush=True)
            if not row["correct"]:
                print(f"  found {row['found']}\n  expected {row['expected']}", flush=True)
        if row is not None:
            print(f"ratio to a bare scan: {row['audit_s'] / row['bare_s']:.2f}x "
                  f"(audit {row['audit_s']:.1f} s, bare scan {row['bare_s']:.1f} s, "
                  f"{row['events']:,} events)", flush=True)
    finally:
        if args.dir is None and sys.exc_info()[0] is None:
            shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "_child":
        rest = sys.argv[2:]
        directory, out, master = rest[:3]
        conf = [rest[i + 1] for i in range(3, len(rest) - 1, 2) if rest[i] == "--conf"]
        child(directory, out, master, conf)
    elif len(sys.argv) > 1 and sys.argv[1] == "_bare":
        directory, master, kind = sys.argv[2:5]
        conf = [sys.argv[i + 1] for i in range(5, len(sys.argv) - 1, 2) if sys.argv[i] == "--conf"]
        bare_child(directory, master, conf, kind)
    else:
        main()
