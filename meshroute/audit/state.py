"""
The streaming audit's state tables and how a micro-batch folds the
partial aggregates of what it read, per id (a message's, a topic
copy's), into those it keeps: the pieces L{meshroute.audit.incremental}
(messages, routes, windows) and L{meshroute.audit.topic_state} (topic
copies) share.  That module's docstring tells the whole story.
"""

from dataclasses import dataclass

from pyspark import StorageLevel
from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F

from meshroute.audit.inputs import AuditInputError

KEEP = StorageLevel.MEMORY_AND_DISK

#: What is left open: fates that still wait on time.
WAITING = ("in-flight", "unobserved")


def combine(frame: DataFrame, keys: list[str], combiners: dict) -> DataFrame:
    """
    Rows of C{frame} with the same C{keys} combined into one: each
    column by its function in C{combiners}, the others summed.
    """
    return frame.groupBy(*keys).agg(*[
        combiners.get(name, F.sum)(name).alias(name)
        for name in frame.columns if name not in keys])


def negated(frame: DataFrame, keys: list[str]) -> DataFrame:
    """
    C{frame} with every column but C{keys} negated: what to add to take
    its rows out of a sum.
    """
    return frame.select(*keys, *[(-F.col(name)).alias(name)
                                 for name in frame.columns if name not in keys])


def newest(slices: DataFrame, keys: list[str]) -> DataFrame:
    """
    Of the rows of an appended table's slices (L{StateTables.read_all}),
    per C{keys}, the one the newest batch wrote, without C{batch}.
    """
    order = Window.partitionBy(*keys).orderBy(F.col("batch").desc())
    return (slices.withColumn("_n", F.row_number().over(order)).where(F.col("_n") == 1)
            .drop("_n", "batch"))


#: The layout of the state tables, which a streaming audit resumes only
#: from a state of its own layout.  3: the topic copies' tables
#: (L{meshroute.audit.topic_state}); 2: the C{windows} are keyed by their
#: C{dest_router} too, and closed windows move to C{closed_windows}
#: (1: the state before the layout was marked).
STATE_FORMAT = 3


class StateTables:
    """
    The state directories under C{OUT/state}, by name and batch, through
    Hadoop's FileSystem (a local directory or a URI alike).
    """

    def __init__(self, spark, out: str) -> None:
        self.spark = spark
        self.out = out
        self.base = f"{out.rstrip('/')}/state"
        # The cumulative tables written through this object (L{replace}).
        self._replaced: set[str] = set()

    def path(self, name: str, batch_id: int) -> str:
        return f"{self.base}/{name}/batch={batch_id}"

    def _entries(self, directory: str) -> list[str]:
        """
        The names of the directories in C{directory} (none if it is not).
        """
        jvm = self.spark.sparkContext._jvm
        path = jvm.org.apache.hadoop.fs.Path(directory)
        fs = path.getFileSystem(self.spark.sparkContext._jsc.hadoopConfiguration())
        if not fs.exists(path):
            return []
        return [status.getPath().getName() for status in fs.listStatus(path)
                if status.isDirectory()]

    def batches(self, name: str) -> list[int]:
        """
        The batches that wrote table C{name}.
        """
        return sorted(int(entry[len("batch="):]) for entry in self._entries(f"{self.base}/{name}")
                      if entry.startswith("batch="))

    def claim(self) -> None:
        """
        Mark a new state with L{STATE_FORMAT}, or check that an existing
        one has it: a state of another layout cannot be resumed, and
        reading it would fail in the middle of a micro-batch.

        @raise AuditInputError: for a state of another format.
        """
        marker = f"{self.base}/format"
        tables = self._entries(self.base)
        if not tables:
            self.spark.createDataFrame([(STATE_FORMAT,)], "format int").coalesce(1).write.mode(
                "overwrite").json(marker)
            return
        found = self.spark.read.json(marker).first()["format"] if "format" in tables else 1
        if found != STATE_FORMAT:
            raise AuditInputError(
                f"{self.base}: the state of a streaming audit of another version (state format "
                f"{found}, this version's {STATE_FORMAT}); delete {self.out} to audit from the "
                f"start")

    def write(self, name: str, batch_id: int, frame: DataFrame) -> None:
        """
        Write batch C{batch_id}'s slice of appended table C{name}: every
        slice is kept (L{read_all}).
        """
        frame.write.mode("overwrite").parquet(self.path(name, batch_id))

    def replace(self, name: str, batch_id: int, frame: DataFrame) -> None:
        """
        Write cumulative table C{name} as of batch C{batch_id}: each
        batch's is the whole table, so L{prune} keeps the newest two.
        """
        self.write(name, batch_id, frame)
        self._replaced.add(name)

    def prune(self, batch_id: int) -> None:
        """
        Of each cumulative table this micro-batch wrote (L{replace}),
        delete the slices older than the two newest up to C{batch_id}:
        a day-long run keeps one table's worth of each, not one per
        micro-batch.  The one before C{batch_id}'s stays because Spark
        runs a micro-batch again when the process died before its
        commit, and that run reads it (L{previous}).
        """
        jvm = self.spark.sparkContext._jvm
        for name in sorted(self._replaced):
            for old in [b for b in self.batches(name) if b <= batch_id][:-2]:
                path = jvm.org.apache.hadoop.fs.Path(self.path(name, old))
                path.getFileSystem(self.spark.sparkContext._jsc.hadoopConfiguration()).delete(
                    path, True)

    def read(self, name: str, batch_id: int) -> DataFrame:
        return self.spark.read.parquet(self.path(name, batch_id))

    def read_all(self, name: str, before: int) -> DataFrame | None:
        """
        Every slice of appended table C{name} written before batch
        C{before}, with its C{batch}; None when there is none.
        """
        if not [b for b in self.batches(name) if b < before]:
            return None
        return self.spark.read.parquet(f"{self.base}/{name}").where(F.col("batch") < before)

    def previous(self, batch_id: int, last: str = "open") -> int | None:
        """
        The newest batch before C{batch_id} that wrote the cumulative
        state (its C{open} table is written last), or a part of it whose
        table C{last} it writes last.
        """
        done = [b for b in self.batches(last) if b < batch_id]
        return done[-1] if done else None



@dataclass
class Folded:
    """
    What a micro-batch made of the ids it read (L{fold}).
    """

    #: The fates of the ids it read and of those open before, merged.
    fates: DataFrame
    #: The partials of the settled ids a new event took back (None: none).
    reopened: DataFrame | None
    #: The partials of the ids still open after it.
    still_open: DataFrame


def fold(state: StateTables, previous: int | None, batch_id: int, new: DataFrame, key: str,
         combiners: dict, fates_of, until: DataFrame, grace_s: float, keep,
         names: tuple[str, str]) -> Folded:
    """
    Fold micro-batch C{batch_id}'s partial aggregates per C{key}
    (C{new}) into those open after batch C{previous}, and those settled
    before that its ids take back; write the ids that settle now to the
    appended table C{names[1]} (the caller writes those still open to
    C{names[0]}, the cumulative table).

    An id settles when its fate (C{fates_of} its merged partials: a
    C{fate}, its C{dest_router} and C{last_time}) no longer waits on
    time (L{WAITING}) and its C{dest_router}'s event-time watermark
    (C{_until} in C{until}) has gone on for C{grace_s} past its last
    event.  The settled table is read only through a join with the
    batch's ids.

    @param combiners: how C{new}'s columns combine (L{combine}).
    @param keep: persists a frame for the micro-batch (and releases it
        after).
    """
    open_name, settled_name = names
    touched = new.select(key)
    opened = state.read(open_name, previous) if previous is not None else None
    reopened = None
    settled_before = state.read_all(settled_name, batch_id)
    if settled_before is not None:
        candidates = settled_before.join(touched, key, "left_semi")
        if opened is not None:
            candidates = candidates.join(opened.select(key), key, "left_anti")
        reopened = keep(newest(candidates, [key]))
    merged = new
    for earlier in (opened, reopened):
        if earlier is not None:
            merged = merged.unionByName(earlier)
    merged = combine(merged, [key], combiners)
    fates = keep(fates_of(merged))
    settles = (~F.col("fate").isin(*WAITING) & F.col("_until").isNotNull()
               & (F.col("last_time") <= F.col("_until") - F.lit(grace_s)))
    verdicts = fates.select(key, "fate", "dest_router", "last_time").join(
        F.broadcast(until), "dest_router", "left").select(key, settles.alias("_settles"))
    judged = keep(merged.join(verdicts, key))
    state.write(settled_name, batch_id, judged.where(F.col("_settles")).drop("_settles"))
    return Folded(fates=fates, reopened=reopened,
                  still_open=judged.where(~F.col("_settles")).drop("_settles"))


def added(mine: DataFrame, theirs: DataFrame, keys: list[str], sign: int,
          nonzero: Column) -> DataFrame:
    """
    Sums per C{keys} of C{mine} and C{theirs} (subtracted when C{sign}
    is negative), without the rows C{nonzero} is not true of: those of
    keys that nothing counts in any more.
    """
    theirs = theirs if sign > 0 else negated(theirs, keys)
    return combine(mine.unionByName(theirs), keys, {}).where(nonzero)
