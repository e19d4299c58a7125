"""
The bare scan: what Spark alone needs to read the event logs an audit
reads, the measure the audit's cost is given against (issue 31; the
batch audit of C{benchmarks/audit_scale.py} and C{make audit-cluster}
print their ratio to it).

    python -m meshroute.audit.bare_scan EVENTS... [--master URL] [--conf KEY=VALUE]...

It reads the same files as C{meshroute audit EVENTS} with Spark's JSON
source and the audit's parse schema, groups the lines by C{event} and
counts them, on a Spark started as the audit's is; it prints one JSON
line: the seconds from the read to the counts in the driver and the
lines counted.  Spark asks the JSON source for the C{event} column
alone, so the scan reads every byte but materializes one field.
"""

import argparse
import json
import sys
import time


def bare_scan(spark, files: list[str]) -> int:
    """
    Read C{files} as the bare scan does; return how many lines it counted.
    """
    from meshroute.audit.schema import parse_schema

    counts = spark.read.json(files, schema=parse_schema()).groupBy("event").count().collect()
    return sum(row["count"] for row in counts)


def main(argv=None) -> int:
    from meshroute.audit.inputs import AuditInputError, resolve_inputs
    from meshroute.audit.job import parse_conf
    from meshroute.audit.running import EXIT_BAD_INPUT, start_spark
    from meshroute.audit.settings import AuditSettings

    parser = argparse.ArgumentParser(prog="python -m meshroute.audit.bare_scan",
                                     description=__doc__.strip().split("\n\n")[0])
    parser.add_argument("events", nargs="+", metavar="EVENTS")
    parser.add_argument("--master", default=None)
    parser.add_argument("--conf", action="append", default=[], metavar="KEY=VALUE")
    args = parser.parse_args(argv)
    try:
        files = resolve_inputs(args.events)
        conf = parse_conf(args.conf)
    except (AuditInputError, ValueError) as e:
        sys.stderr.write(f"bare scan: {e}\n")
        return EXIT_BAD_INPUT
    settings = AuditSettings(inputs=args.events, out=".", master=args.master, conf=conf,
                             quiet=True)
    spark = start_spark(settings, sys.stderr)
    try:
        began = time.monotonic()
        lines = bare_scan(spark, files)
        seconds = time.monotonic() - began
    finally:
        spark.stop()
    print(json.dumps({"seconds": round(seconds, 3), "lines": lines}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
