"""
The audit's exact latency percentiles (meshroute.audit.views.percentiles):
the nearest rank from the count of each value, checked against a plain
sort of the values, on tables and on generated samples.
"""

import math

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from support.spark import spark  # noqa: F401 (a fixture)


def nearest_rank(values: list[float], p: float) -> float:
    """
    The p-th percentile by sorting: the ⌈p × n⌉-th smallest value.
    """
    ordered = sorted(values)
    return ordered[math.ceil(p * len(ordered)) - 1]


def spark_percentiles(spark, groups: dict[str, list[float]]) -> dict[str, dict]:  # noqa: F811
    """
    L{percentiles} per group of the latencies C{groups}, through
    L{value_counts} as the audit computes them.
    """
    from meshroute.audit import views

    rows = [(group, latency) for group, values in groups.items() for latency in values]
    fates = spark.createDataFrame(rows, "route string, latency_ms double")
    view = views.percentiles(views.value_counts(fates, ["route"]), ["route"])
    return {row["route"]: row.asDict() for row in view.collect()}


def expected(values: list[float]) -> dict:
    return {"enqueued": len(values), "latency_min_ms": min(values),
            "latency_max_ms": max(values),
            "latency_p50_ms": nearest_rank(values, 0.5),
            "latency_p95_ms": nearest_rank(values, 0.95),
            "latency_p99_ms": nearest_rank(values, 0.99)}


TABLE = {
    "one": [7.5],
    "two": [2.0, 1.0],
    "four": [4.0, 1.0, 3.0, 2.0],
    "ties": [5.0, 5.0, 5.0, 1.0],
    "hundred": [float(v) for v in range(100, 0, -1)],
    "skewed": [0.001] * 98 + [900.0, 1000.0],
    "negative": [-3.25, 0.0, 12.5],
}


def test_percentiles_table(spark):  # noqa: F811
    found = spark_percentiles(spark, TABLE)
    for group, values in TABLE.items():
        row = found[group]
        assert {key: row[key] for key in expected(values)} == expected(values), group
    assert (found["four"]["latency_p50_ms"], found["hundred"]["latency_p99_ms"],
            found["skewed"]["latency_p99_ms"]) == (2.0, 99.0, 900.0)


def test_percentiles_of_nothing_are_null(spark):  # noqa: F811
    from meshroute.audit import views

    fates = spark.createDataFrame([(None,)], "latency_ms double")
    row = views.percentiles(views.value_counts(fates, []), []).collect()[0].asDict()
    assert row == {"enqueued": 0, "latency_min_ms": None, "latency_max_ms": None,
                   "latency_p50_ms": None, "latency_p95_ms": None, "latency_p99_ms": None}


microseconds = st.integers(min_value=-5_000, max_value=2_000_000).map(lambda us: us / 1000.0)


@settings(max_examples=30, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.dictionaries(st.sampled_from("abcd"), st.lists(microseconds, min_size=1, max_size=300),
                       min_size=1))
def test_percentiles_equal_a_plain_sort(spark, groups):  # noqa: F811
    found = spark_percentiles(spark, groups)
    assert set(found) == set(groups)
    for group, values in groups.items():
        assert {key: found[group][key] for key in expected(values)} == expected(values)


def test_merged_counts_give_the_percentiles_of_the_union(spark):  # noqa: F811
    """
    Counts of two sets of messages, added, give the percentiles of both
    sets together: what the streaming audit relies on.
    """
    from pyspark.sql import functions as F

    from meshroute.audit import views

    first, second = [1.0, 2.0, 2.0, 9.0], [2.0, 3.0, 3.0, 4.0, 100.0]
    counts = [views.value_counts(spark.createDataFrame([(v,) for v in values],
                                                       "latency_ms double"), [])
              for values in (first, second)]
    merged = counts[0].unionByName(counts[1]).groupBy("latency_ms").agg(
        F.sum("count").alias("count"))
    row = views.percentiles(merged, []).collect()[0].asDict()
    assert row == pytest.approx(expected(first + second))
