"""
The streaming audit's cost per micro-batch as history grows.

The generator (tests/support/event_generator.py, C{write_bulk}) writes N events
for M routers; each router's log is cut into closed rotated files
(tests/support/closed_event_files.py), and the streaming audit's C{foreachBatch}
(meshroute.audit.follow.StreamingAudit) is fed a few files at a time, in
the order a router closes them, on one local Spark session.  Per
micro-batch it prints the lines read so far, the micro-batch's lines
and seconds, the seconds of a bare scan of the same files on the same
session (C{spark.read.json(files, schema=<the audit's parse schema>)}
grouped by C{event} and counted: the least Spark needs to read them), the
rows of the open-message state and the bytes of all the state on disk
(C{OUT/state}: what a day-long run keeps); with C{--compare}, also the
seconds of the batch audit over every file read so far (what each
micro-batch cost before the audit kept state).  Then the fixed cost of a
micro-batch (the median seconds of C{--empty} micro-batches of no new
file, after the last) and the last line, issue 31's measure:
C{micro-batch: R.RRx a bare scan + F s fixed (median of N micro-batches
of about L lines: S s, bare scan B s)}, R = (S - F) / B.  At the end it
checks that the streaming audit's figures are the batch audit's.

    python benchmarks/audit_follow.py                        # 1 million events, 10 micro-batches
    python benchmarks/audit_follow.py --millions 0.2 --compare
    python benchmarks/audit_follow.py --millions 5 --batches 50   # the state after 10 and 50

Needs pyspark (the audit extra) and Java.
"""

import argparse
import io
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
sys.path.insert(1, os.path.join(ROOT, "tests"))


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--millions", type=float, default=1.0, help="events, millions (default 1)")
    p.add_argument("--routers", type=int, default=4)
    p.add_argument("--batches", type=int, default=10, help="micro-batches (default 10)")
    p.add_argument("--compare", action="store_true",
                   help="also time the batch audit of everything read so far")
    p.add_argument("--empty", type=int, default=3,
                   help="micro-batches of no new file after the last, for the fixed cost (default 3)")
    args = p.parse_args()

    from support.closed_event_files import rotate_copy
    from support.event_generator import write_bulk

    from meshroute.audit import follow, job, read, views
    from meshroute.audit.running import Progress, start_spark
    from meshroute.audit.bare_scan import bare_scan
    from meshroute.audit.settings import AuditSettings

    work = Path(tempfile.mkdtemp(prefix="meshroute-audit-follow-"))
    events = int(args.millions * 1_000_000)
    write_bulk(work / "single", events, routers=args.routers)
    files_per_router = args.batches * 2
    for source in sorted((work / "single").glob("*.jsonl")):
        lines = sum(1 for _ in open(source, encoding="utf-8"))
        rotate_copy(source, work / "rotated" / source.stem / "events",
                    -(-lines // files_per_router))
    files = sorted((work / "rotated").glob("*/events/*.jsonl"),
                   key=lambda f: (f.stat().st_mtime, str(f)))
    per_batch = -(-len(files) // args.batches)
    groups = [files[i:i + per_batch] for i in range(0, len(files), per_batch)]

    settings = AuditSettings(inputs=[str(work / "rotated")], out=str(work / "streamed"),
                             quiet=True, follow=True)
    spark = start_spark(settings, sys.stderr)
    quiet = Progress(io.StringIO(), True)
    streaming = follow.StreamingAudit(spark, settings, quiet, io.StringIO())
    print(f"{events} events, {len(files)} closed files, {len(groups)} micro-batches")
    print(f"{'batch':>5} {'lines so far':>12} {'lines':>8} {'stream s':>9} {'bare s':>7}"
          f" {'ratio':>6} {'open rows':>10} {'state MiB':>10}"
          + (f" {'batch audit s':>14}" if args.compare else ""))
    read_so_far, lines = [], 0
    expected = None
    timed = []  # (stream s, bare s, lines) of each micro-batch with files
    for batch_id, group in enumerate(groups):
        paths = [str(f) for f in group]
        started = time.monotonic()
        streaming(read.located(spark.read.text(paths)), batch_id)
        took = time.monotonic() - started
        started = time.monotonic()
        bare_scan(spark, paths)
        bare = time.monotonic() - started
        read_so_far += paths
        batch_lines = streaming.summary["inputs"]["lines"] - lines
        lines = streaming.summary["inputs"]["lines"]
        timed.append((took, bare, batch_lines))
        open_rows = spark.read.parquet(
            str(work / "streamed" / "state" / "open" / f"batch={batch_id}")).count()
        row = (f"{batch_id:>5} {lines:>12} {batch_lines:>8} {took:>9.1f} {bare:>7.1f}"
               f" {took / bare:>5.2f}x {open_rows:>10} {state_mib(work / 'streamed' / 'state'):>10.1f}")
        if args.compare or batch_id == len(groups) - 1:
            started = time.monotonic()
            expected = job.audit_logs(
                spark, read.read_logs(spark, read_so_far, views.FIELDS_USED),
                AuditSettings(inputs=read_so_far, out=str(work / "batch"), quiet=True),
                quiet, settled_per_router=True)[0]
            if args.compare:
                row += f" {time.monotonic() - started:>14.1f}"
        print(row, flush=True)
    fixed = []
    for batch_id in range(len(groups), len(groups) + args.empty):
        started = time.monotonic()
        streaming(read.located(spark.read.text(read_so_far[:1]).where("false")), batch_id)
        fixed.append(time.monotonic() - started)
    spark.stop()
    if fixed and len(timed) > 1:
        # The first micro-batch also warms the JVM: leave it out.
        stream_s, bare_s = median([t[0] for t in timed[1:]]), median([t[1] for t in timed[1:]])
        fixed_s = median(fixed)
        print(f"fixed cost: {', '.join(f'{f:.1f}' for f in fixed)} s for micro-batches of no new file")
        print(f"micro-batch: {(stream_s - fixed_s) / bare_s:.2f}x a bare scan + {fixed_s:.1f} s fixed"
              f" (median of {len(timed) - 1} micro-batches of about"
              f" {median([t[2] for t in timed[1:]]):,.0f} lines: {stream_s:.1f} s,"
              f" bare scan {bare_s:.1f} s)")
    same = all(streaming.summary[key] == expected[key] for key in expected if key != "audit")
    print(f"streaming figures equal the batch audit's: {same}")
    return 0 if same else 1


def median(values: list) -> float:
    ordered = sorted(values)
    middle = len(ordered) // 2
    return ordered[middle] if len(ordered) % 2 else (ordered[middle - 1] + ordered[middle]) / 2


def state_mib(directory: Path) -> float:
    """
    The bytes of every file under the streaming audit's state directory,
    in MiB: what the follower keeps between micro-batches.
    """
    return sum(f.stat().st_size for f in directory.rglob("*") if f.is_file()) / 2**20


if __name__ == "__main__":
    sys.exit(main())
