"""
What event-log rotation costs the writer: the same records written by
L{meshroute.events.EventLog} with files closing every C{--sizes} (fsync,
rename, directory fsync each time, in the closer thread as in a router)
and without rotation, in alternating rounds, on the disk of C{--dir}.

Records are message records as a message-heavy router makes them: one
C{emit_many} of C{--batch} C{message.enqueued} rows per reactor turn (a
L{task.Clock} turn: the writer runs as in a router, without a reactor's
other work).  Reported per configuration: the median over C{--rounds} of
the writing thread's CPU time per record (what the reactor would spend),
the process's CPU time and wall time per record, the write rate, and the
files made.  See
benchmarks/README.md.  CPU time counts every thread of the process (the
closer's too); on a busy machine wall time mostly measures the wait for a
CPU.
"""

import os
import shutil
import statistics
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from twisted.internet.task import Clock  # noqa: E402
from twisted.python import usage  # noqa: E402

from meshroute.config_keys import parse_size  # noqa: E402
from meshroute.events import EventLog, RotationSettings, event_files  # noqa: E402

#: The fields of C{message.enqueued} (meshroute/router/queues.py).
NAMES = ("msg_id", "origin", "queue", "hops", "accepted_at", "persistent")
#: "No rotation": larger than anything a round writes.
NO_ROTATION = 1024**4


class Options(usage.Options):
    optParameters = [
        ["records", "n", 1_000_000, "Records per round.", int],
        ["batch", None, 500, "Records per reactor turn.", int],
        ["rounds", None, 5, "Rounds per configuration (alternating).", int],
        ["sizes", None, "1 MiB", "Comma-separated max-file-size values to compare with none."],
        ["dir", None, None, "Where to write (default: the system's temporary directory)."],
    ]


def one_round(directory: str, max_file_size: int, records: int, batch: int) -> dict:
    data_dir = tempfile.mkdtemp(dir=directory)
    clock = Clock()
    clock.advance(1_700_000_000)
    log = EventLog(data_dir, "router-b", clock, RotationSettings(max_file_size=max_file_size),
                   close_in_thread=True)
    rows = [(f"router-a:{n:012d}", "router-a", "bench", 1, 1_700_000_000.25, True)
            for n in range(batch)]
    wall, cpu, writer = time.perf_counter(), time.process_time(), time.thread_time()
    for _ in range(records // batch):
        log.emit_many("message.enqueued", NAMES, rows)
        clock.advance(0)
    writer = time.thread_time() - writer
    log.close()
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    files = event_files(data_dir)
    size = sum(os.path.getsize(p) for p in files)
    shutil.rmtree(data_dir)
    return {"wall": wall, "cpu": cpu, "writer": writer, "files": len(files), "bytes": size}


def main(argv: list[str]) -> int:
    options = Options()
    try:
        options.parseOptions(argv)
    except usage.UsageError as e:
        print(f"{sys.argv[0]}: {e}", file=sys.stderr)
        return 2
    records, batch = options["records"], options["batch"]
    configs = [("none", NO_ROTATION)] + [
        (label.strip(), parse_size(label.strip(), path="--sizes", key=label.strip()))
        for label in options["sizes"].split(",")]
    directory = tempfile.mkdtemp(prefix="meshroute-event-log-", dir=options["dir"])
    results: dict[str, list[dict]] = {label: [] for label, _ in configs}
    try:
        for _ in range(options["rounds"]):
            for label, size in configs:
                results[label].append(one_round(directory, size, records, batch))
    finally:
        shutil.rmtree(directory, ignore_errors=True)
    print(f"{records:,} records per round, {batch} per turn, median of {options['rounds']} "
          "rounds")
    print(f"{'max-file-size':>14} {'files':>6} {'writer ns/rec':>14} {'cpu ns/rec':>11} "
          f"{'wall ns/rec':>12} {'MB/s':>7}")
    for label, _ in configs:
        rounds = results[label]
        per_record = {key: statistics.median(r[key] for r in rounds) / records * 1e9
                      for key in ("writer", "cpu", "wall")}
        rate = rounds[0]["bytes"] / statistics.median(r["wall"] for r in rounds) / 1e6
        print(f"{label:>14} {rounds[0]['files']:>6} {per_record['writer']:>14.0f} "
              f"{per_record['cpu']:>11.0f} {per_record['wall']:>12.0f} {rate:>7.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
