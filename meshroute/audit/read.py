"""
Finding event logs and reading them with malformed-line accounting.

Each line is read as text and parsed with L{from_json} against the
explicit schema (L{meshroute.audit.schema}), so a line that is not an
event (truncated by a crash, garbage, a field of the wrong type) becomes a
row with a C{problem} instead of failing the job or being misread.  Line
numbers are not something Spark keeps; they are rebuilt from two facts:
every row knows the file split it came from (C{_metadata.file_block_start})
and C{monotonically_increasing_id} numbers the rows of one split
consecutively, so a row's line is the number of lines in the file's
earlier splits plus its distance from the first row of its split.

The batch audit (L{read_logs}) parses most lines with Spark's JSON file
source instead, which parses the same lines in about two thirds of
L{from_json}'s time, but drops blank lines and makes a row of each
element of a line holding a JSON array.  So a cheap pass over the text,
run while the JSON source parses, counts each split's lines and finds
the lines that do not start with C{{} or are not UTF-8 (the JSON source
decodes bytes, L{from_json} a string); only for the splits without such
a line, where the JSON source gave exactly one row per line and quoted
every malformed line (a line without C{time}, C{router} or C{event} but
otherwise a good object has no corrupt record), are its rows kept.
Every other split is read as above, so line numbers and problems are
the same either way.

The batch audit's cache names each line's file by a 64-bit hash of its
name (L{file_key}), not by the name: a name is some fifty bytes that
every row would copy into the cache and every cached batch compare for
its statistics, for a few files; the text pass, which groups by the
name, gives each key its name back (L{EventLogs.files}).
"""

from dataclasses import dataclass

from pyspark import StorageLevel
from pyspark.sql import Column, DataFrame, SparkSession, Window
from pyspark.sql import functions as F

from meshroute.audit import schema as S
from meshroute.audit import threads
from meshroute.audit.inputs import AuditInputError

#: How much of a malformed line the reports keep.
SNIPPET = 200

#: What identifies a file split in the batch audit's cache: the file
#: (L{file_key}) and where the split starts.
SPLIT_KEY = "file long, block long"


def file_key(name: Column) -> Column:
    """
    The batch audit's key of the file Spark names C{name}.
    """
    return F.xxhash64(name)


def located(text: DataFrame) -> DataFrame:
    """
    The lines of Spark's text source (C{spark.read.text} or
    C{spark.readStream.format("text")}) with where they were read:
    C{file} (as Spark names it, a URI), C{block} (the start of the file
    split) and C{value} (the text).
    """
    return text.select(
        F.col("_metadata.file_path").alias("file"),
        F.col("_metadata.file_block_start").alias("block"),
        F.col("value"),
    )


def numbered(lines: DataFrame) -> DataFrame:
    """
    L{located} lines of a static DataFrame with C{rid}, consecutive
    within a split (a streaming micro-batch is numbered in its
    C{foreachBatch}, where it is static).
    """
    return lines.select("file", "block", F.monotonically_increasing_id().alias("rid"), "value")


def load_lines(spark: SparkSession, files: list[str]) -> DataFrame:
    """
    Every line of C{files}: C{file}, C{block}, C{rid} and C{value}
    (L{located}, L{numbered}).
    """
    return numbered(located(spark.read.text(files)))


def problem_of(value, parsed, checked=None):
    """
    Why the line C{value}, parsed as C{parsed}, is not an event; null if
    it is one.

    @param checked: for the JSON source (L{json_source_lines}), a
        condition always true that uses every parsed column.
    """
    text = F.trim(value)
    required = [parsed[name] for name in S.REQUIRED]
    nothing = parsed[S.CORRUPT].isNotNull()
    for column in required:
        nothing = nothing & column.isNull()
    missing = required[0].isNull()
    for column in required[1:]:
        missing = missing | column.isNull()
    if checked is not None:
        missing = missing & checked
    return (
        F.when(text == "", F.lit("blank line"))
        .when(parsed.isNull() | nothing,
              F.when(text.startswith("{") & ~text.endswith("}"), F.lit("truncated JSON object"))
              .otherwise(F.lit("not a JSON object")))
        .when(missing, F.lit("time, router or event missing or of the wrong type"))
        .when(parsed[S.CORRUPT].isNotNull(), F.lit("a field has the wrong type"))
    )


def parse_lines(lines: DataFrame, fields=None) -> DataFrame:
    """
    C{lines} (from L{load_lines}) parsed: the line's position, the event
    C{fields} (default: all of the schema; a line is checked in these
    alone, L{meshroute.audit.schema.parse_schema}), C{problem} (null for
    a good event) and C{text} (the start of the line, only when it has a
    problem).
    """
    options = {"mode": "PERMISSIVE", "columnNameOfCorruptRecord": S.CORRUPT}
    schema = S.parse_schema(fields)
    parsed = lines.select("file", "block", "rid", "value",
                          F.from_json("value", schema, options).alias("e"))
    problem = problem_of(F.col("value"), F.col("e"))
    return parsed.select(
        "file", "block", "rid",
        *[F.col("e")[name].alias(name) for name in schema.fieldNames() if name != S.CORRUPT],
        problem.alias("problem"),
        F.when(problem.isNotNull(), F.substring("value", 1, SNIPPET)).alias("text"),
    )


def events_of(parsed: DataFrame) -> DataFrame:
    """
    The good events of C{parsed}, with their position (C{file}, C{block}, C{rid}).
    """
    return parsed.where(F.col("problem").isNull()).drop("problem", "text")


def blocks(parsed: DataFrame, *more: Column) -> DataFrame:
    """
    One row per file split: its lines, the first C{rid}, its malformed
    lines, the time range of its events and how many are about topics
    (L{meshroute.audit.schema.about_topics}: without any, the topic
    views have nothing to compute), and the aggregates C{more}.
    """
    good = F.col("problem").isNull()
    return parsed.groupBy("file", "block").agg(
        F.count(F.lit(1)).alias("lines"),
        F.min("rid").alias("first_rid"),
        F.count("problem").alias("malformed"),
        F.min(F.when(good, F.col("time"))).alias("first_time"),
        F.max(F.when(good, F.col("time"))).alias("last_time"),
        F.count(F.when(good & S.about_topics(), F.lit(1))).alias("topic_events"),
        *more,
    )


def malformed_lines(parsed: DataFrame, splits: DataFrame) -> DataFrame:
    """
    The malformed lines: C{file}, C{line} (from 1), C{problem}, C{text}.

    @param splits: L{blocks} of C{parsed}.
    """
    earlier = Window.partitionBy("file").orderBy("block").rowsBetween(
        Window.unboundedPreceding, -1)
    offsets = splits.select(
        "file", "block", "first_rid",
        F.coalesce(F.sum("lines").over(earlier), F.lit(0)).alias("lines_before"),
    )
    bad = parsed.where(F.col("problem").isNotNull()).select("file", "block", "rid", "problem",
                                                             "text")
    return bad.join(F.broadcast(offsets), ["file", "block"]).select(
        "file",
        (F.col("lines_before") + F.col("rid") - F.col("first_rid") + 1).alias("line"),
        "problem",
        "text",
    )


def input_files(splits: DataFrame) -> DataFrame:
    """
    One row per file read: C{lines}, C{events}, C{malformed}, time range.
    """
    return splits.groupBy("file").agg(
        F.sum("lines").alias("lines"),
        (F.sum("lines") - F.sum("malformed")).alias("events"),
        F.sum("malformed").alias("malformed"),
        F.min("first_time").alias("first_time"),
        F.max("last_time").alias("last_time"),
    )


@dataclass
class EventLogs:
    """
    The logs read and parsed, persisted for the views computed from them.
    """

    #: Every line (L{parse_lines}' columns), read from C{cache}.
    parsed: DataFrame
    events: DataFrame
    splits: DataFrame
    #: The rows of C{splits}, collected.
    split_rows: list[dict]
    lines: int
    #: What is persisted: C{parsed} L{packed}.
    cache: DataFrame
    #: C{file} (L{file_key}) → the file as Spark names it; None when
    #: C{file} is the name.
    files: dict | None = None

    def release(self) -> None:
        self.cache.unpersist()
        self.splits.unpersist()


def read_logs(spark: SparkSession, files: list[str], fields=None) -> EventLogs:
    """
    Read and parse C{files} once, and keep the result (memory, spilling to
    disk) for the views: by Spark's JSON source where it gives what
    L{parse_lines} would (the module's docstring), else by L{parse_lines}.

    @param fields: the event fields to parse and keep (default: all of
        the schema); a line is checked in these alone.
    @raise AuditInputError: when there is not one line to read.
    """
    what = f"{len(files)} file{'s' if len(files) != 1 else ''}"
    lines = load_lines(spark, files)
    fast = json_source_lines(spark, files, fields)
    # The text pass runs while the JSON source parses: the splits it
    # would not read alike are rare, and dropped from its rows after.
    shape_rows, first = threads.run_all([
        lambda: split_shapes(lines).collect(),
        lambda: persisted(fast, F.count(F.when(F.col("problem").isNotNull()
                                               & F.col("text").isNull(), F.lit(1))
                                        ).alias("unquoted"))], workers=2)
    shapes = {(row["key"], row["block"]): row for row in shape_rows}
    names = {row["key"]: row["file"] for row in shape_rows}
    if len(names) != len({row["file"] for row in shape_rows}):
        first.release()
        raise AuditInputError(f"two of the {what} have names of the same 64-bit hash "
                              "(read.file_key): rename one")
    first.files = names
    read = {(row["file"], row["block"]): row for row in first.split_rows}
    good = [split for split, row in shapes.items() if not row["irregular"]
            and split in read and read[split]["lines"] == row["lines"]
            and not read[split]["unquoted"]]
    if len(good) == len(shapes) and first.lines:
        return first
    # The splits kept as a table, not a condition: a term per split made
    # a condition too deep to plan for thousands of rotated files.
    kept_splits = F.broadcast(spark.createDataFrame(good, SPLIT_KEY))
    keyed = lines.withColumn("file", file_key(F.col("file")))
    again = first.parsed.join(kept_splits, ["file", "block"], "left_semi").unionByName(
        parse_lines(keyed.join(kept_splits, ["file", "block"], "left_anti"), fields))
    try:
        logs = logs_of(again, what)
    finally:
        first.release()
    logs.files = names
    return logs


def split_shapes(lines: DataFrame) -> DataFrame:
    """
    Per file split of L{load_lines} C{lines}: the file's C{key}
    (L{file_key}), its C{lines} and how many are C{irregular}: not
    starting with C{{} (blank, a JSON array, garbage), or not UTF-8,
    where the JSON source and L{from_json} could differ.
    """
    irregular = ~F.col("value").startswith("{") | ~F.is_valid_utf8("value")
    return lines.groupBy("file", "block").agg(
        F.count(F.lit(1)).alias("lines"),
        F.count(F.when(irregular, F.lit(1))).alias("irregular"),
    ).withColumn("key", file_key(F.col("file")))


def json_source_lines(spark: SparkSession, files: list[str], fields=None) -> DataFrame:
    """
    C{files} parsed by Spark's JSON source, as L{parse_lines} gives them
    (the same C{fields}) for the splits whose every line starts with
    C{{}, but C{file}, the file's L{file_key}, and C{text}: the start of
    the line for a malformed line that Spark quoted as a corrupt record,
    null for one it did not (a good object without C{time}, C{router} or
    C{event}).
    """
    schema = S.parse_schema(fields)
    parsed = (spark.read.schema(schema)
              .options(mode="PERMISSIVE", columnNameOfCorruptRecord=S.CORRUPT).json(files))
    record = F.struct(*[F.col(name) for name in schema.fieldNames()])
    # A column the query does not use the JSON source does not parse (nor
    # check its type); the rendering, never null and only evaluated for a
    # line missing a required field, makes the query use every column.
    checked = F.to_json(record).isNotNull()
    problem = problem_of(F.col(S.CORRUPT), record, checked)
    return parsed.select(
        file_key(F.col("_metadata.file_path")).alias("file"),
        F.col("_metadata.file_block_start").alias("block"),
        F.monotonically_increasing_id().alias("rid"),
        *[name for name in schema.fieldNames() if name != S.CORRUPT],
        problem.alias("problem"),
        F.when(problem.isNotNull(), F.substring(S.CORRUPT, 1, SNIPPET)).alias("text"),
    )


def logs_of(parsed: DataFrame, what: str) -> EventLogs:
    """
    L{EventLogs} of lines already parsed (by L{read_logs}, or kept by the
    streaming audit), persisted for the views.

    @param what: the input, for the error message.
    @raise AuditInputError: when there is not one line to read.
    """
    logs = persisted(parsed)
    if not logs.lines:
        logs.release()
        raise AuditInputError(f"the event logs are empty ({what}, no line to read)")
    return logs


def persisted(parsed: DataFrame, *more: Column) -> EventLogs:
    """
    L{EventLogs} of lines already parsed, persisted (L{packed}), however
    many.

    @param more: aggregates per split for its C{splits} (L{blocks}).
    """
    cache = packed(parsed).persist(StorageLevel.MEMORY_AND_DISK)
    parsed = unpacked(cache, parsed.columns)
    splits = blocks(parsed, *more).persist(StorageLevel.MEMORY_AND_DISK)
    split_rows = [row.asDict() for row in splits.collect()]
    return EventLogs(parsed=parsed, events=events_of(parsed), splits=splits,
                     split_rows=split_rows, lines=sum(row["lines"] for row in split_rows),
                     cache=cache)


#: The column of L{packed} that holds the rare fields.
RARE = "_rare"


def packed(parsed: DataFrame) -> DataFrame:
    """
    C{parsed} (L{parse_lines}) with the fields a message event
    does not write (L{meshroute.audit.schema.MESSAGE_FIELDS}) in one
    struct, null when all of them are: most lines are message events,
    and each column costs every row its share of building the cache (a
    null too), one null struct little.
    """
    rare = [name for name in parsed.columns
            if name in S.EVENT_SCHEMA.fieldNames() and name not in S.MESSAGE_FIELDS]
    if not rare:
        return parsed
    any_set = F.lit(False)
    for name in rare:
        any_set = any_set | F.col(name).isNotNull()
    return parsed.select(*[name for name in parsed.columns if name not in rare],
                         F.when(any_set, F.struct(*rare)).alias(RARE))


def unpacked(cache: DataFrame, columns: list[str]) -> DataFrame:
    """
    L{packed} C{cache} with the C{columns} it was packed from, in order.
    """
    if RARE not in cache.columns:
        return cache
    return cache.select(*[name if name in cache.columns else F.col(RARE)[name].alias(name)
                          for name in columns])
