"""
The streaming audit's cost per micro-batch as history grows.

The generator (tests/support/event_generator.py, C{write_bulk}) writes N events
for M routers; each router's log is cut into closed rotated files
(tests/support/closed_event_files.py), and the streaming audit's C{foreachBatch}
(meshroute.audit.follow.StreamingAudit) is fed a few files at a time, in
the order a router closes them, on one local Spark session.  Per
micro-batch it prints the lines read so far, the micro-batch's seconds,
and the rows of the open-message state; with C{--compare}, also the
seconds of the batch audit over every file read so far (what each
micro-batch cost before the audit kept state).  At the end it checks that
the streaming audit's figures are the batch audit's.

    python benchmarks/audit_follow.py                        # 1 million events, 10 micro-batches
    python benchmarks/audit_follow.py --millions 0.2 --compare

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
    args = p.parse_args()

    from support.closed_event_files import rotate_copy
    from support.event_generator import write_bulk

    from meshroute.audit import follow, job, read, views
    from meshroute.audit.running import Progress, start_spark
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
    print(f"{'batch':>5} {'lines so far':>12} {'stream s':>9} {'open rows':>10}"
          + (f" {'batch audit s':>14}" if args.compare else ""))
    read_so_far, lines = [], 0
    expected = None
    for batch_id, group in enumerate(groups):
        started = time.monotonic()
        streaming(read.located(spark.read.text([str(f) for f in group])), batch_id)
        took = time.monotonic() - started
        read_so_far += [str(f) for f in group]
        lines = streaming.summary["inputs"]["lines"]
        open_rows = spark.read.parquet(
            str(work / "streamed" / "state" / "open" / f"batch={batch_id}")).count()
        row = f"{batch_id:>5} {lines:>12} {took:>9.1f} {open_rows:>10}"
        if args.compare or batch_id == len(groups) - 1:
            started = time.monotonic()
            expected = job.audit_logs(
                spark, read.read_logs(spark, read_so_far, views.FIELDS_USED),
                AuditSettings(inputs=read_so_far, out=str(work / "batch"), quiet=True),
                quiet, settled_per_router=True)[0]
            if args.compare:
                row += f" {time.monotonic() - started:>14.1f}"
        print(row, flush=True)
    spark.stop()
    same = all(streaming.summary[key] == expected[key] for key in expected if key != "audit")
    print(f"streaming figures equal the batch audit's: {same}")
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
