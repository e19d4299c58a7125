"""
The streaming audit's state tables (meshroute.audit.state.StateTables):
an appended table keeps a slice per micro-batch; of a cumulative table,
rewritten whole by each, the newest two are kept.
"""

from support.spark import spark  # noqa: F401 (a fixture)

from meshroute.audit.state import StateTables


def replaced(spark, tmp_path, name: str, batches) -> None:  # noqa: F811
    """
    Cumulative table C{name} written by each of C{batches}, unpruned.
    """
    for batch_id in batches:
        StateTables(spark, str(tmp_path)).replace(
            name, batch_id, spark.createDataFrame([(1,)], "n int"))


def test_a_cumulative_table_keeps_its_newest_two_an_appended_one_every_slice(
        spark, tmp_path):  # noqa: F811
    rows = spark.createDataFrame([(1,)], "n int")
    for batch_id in range(4):
        state = StateTables(spark, str(tmp_path))
        state.replace("routes", batch_id, rows)
        state.write("settled", batch_id, rows)
        state.prune(batch_id)
    assert state.batches("routes") == [2, 3]
    assert state.batches("settled") == [0, 1, 2, 3]
    assert state.read("routes", 3).count() == 1


def test_a_micro_batch_run_again_keeps_the_slice_it_read_and_the_newer_ones(
        spark, tmp_path):  # noqa: F811
    """
    Batch 2 run again after a crash (Spark runs it again when its commit
    was not recorded) prunes only what is older than its previous (1),
    and leaves any newer slice alone.
    """
    replaced(spark, tmp_path, "open", range(4))
    again = StateTables(spark, str(tmp_path))
    again.replace("open", 2, spark.createDataFrame([(1,)], "n int"))
    again.prune(2)
    assert again.batches("open") == [1, 2, 3]
    assert again.previous(2) == 1


def test_only_the_tables_written_in_this_micro_batch_are_pruned(spark, tmp_path):  # noqa: F811
    replaced(spark, tmp_path, "copies_open", range(3))
    state = StateTables(spark, str(tmp_path))
    state.replace("open", 3, spark.createDataFrame([(1,)], "n int"))
    state.prune(3)
    assert state.batches("copies_open") == [0, 1, 2]
