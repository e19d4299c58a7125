"""
Whether two audits of the same logs found the same: their summary.json
(but for what differs from run to run: the steps' seconds, the time it
was generated, the output paths) and every Parquet table, row by row in
the order written.

    python benchmarks/audit_compare.py OUT_A OUT_B

Meant for a change to how the audit computes, not what: audit the same
logs with the code before and after (each OUT from
C{meshroute audit LOGS --out OUT}) and compare.  Prints each difference
(at most a few per table) and exits 1 if there is one.  Needs pyspark.
See benchmarks/README.md.
"""

import json
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

#: Keys of summary.json's "audit" that say how and where the run went,
#: not what it found.
RUN_KEYS = ("steps", "elapsed_s", "generated_at", "out", "tables", "meshroute_version")

#: Differences shown per table.
SHOWN = 5


def summary_of(out: str) -> dict:
    with open(os.path.join(out, "summary.json"), encoding="utf-8") as f:
        summary = json.load(f)
    for key in RUN_KEYS:
        summary.get("audit", {}).pop(key, None)
    return summary


def differences(a, b, where: str = "summary"):
    """
    Where the JSON values C{a} and C{b} differ, as lines.
    """
    if isinstance(a, dict) and isinstance(b, dict):
        for key in sorted(set(a) | set(b)):
            yield from differences(a.get(key), b.get(key), f"{where}.{key}")
    elif isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        for i, (x, y) in enumerate(zip(a, b)):
            yield from differences(x, y, f"{where}[{i}]")
    elif a != b:
        yield f"{where}: {a!r} != {b!r}"


def table_rows(spark, path: str) -> list[dict]:
    """
    The rows of the Parquet table at C{path}, in the order written (the
    audit writes each table as one sorted file).
    """
    files = sorted(name for name in os.listdir(path) if name.endswith(".parquet"))
    rows = []
    for name in files:
        rows.extend(row.asDict(recursive=True)
                    for row in spark.read.parquet(os.path.join(path, name)).collect())
    return rows


def compare(spark, first: str, second: str) -> list[str]:
    found = list(differences(summary_of(first), summary_of(second)))
    tables_a = os.path.join(first, "tables")
    tables_b = os.path.join(second, "tables")
    names = sorted(set(os.listdir(tables_a)) | set(os.listdir(tables_b)))
    for name in names:
        if not (os.path.isdir(os.path.join(tables_a, name))
                and os.path.isdir(os.path.join(tables_b, name))):
            found.append(f"table {name}: only in one of the outputs")
            continue
        rows_a = table_rows(spark, os.path.join(tables_a, name))
        rows_b = table_rows(spark, os.path.join(tables_b, name))
        shown = [line for line in differences(rows_a, rows_b, name)][:SHOWN]
        if len(rows_a) != len(rows_b):
            shown.insert(0, f"{name}: {len(rows_a)} rows != {len(rows_b)} rows")
        found.extend(shown)
        print(f"{name}: {len(rows_a)} rows, {'same' if not shown else 'DIFFERENT'}", flush=True)
    return found


def main() -> int:
    if len(sys.argv) != 3:
        sys.stderr.write(f"usage: {sys.argv[0]} OUT_A OUT_B\n")
        return 2
    from meshroute.audit.running import start_spark
    from meshroute.audit.settings import AuditSettings

    spark = start_spark(AuditSettings(inputs=[], out="", quiet=True), sys.stderr)
    try:
        found = compare(spark, sys.argv[1], sys.argv[2])
    finally:
        spark.stop()
    for line in found:
        print(line)
    print("identical" if not found else f"{len(found)} difference(s)")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
