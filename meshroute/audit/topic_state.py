"""
The streaming audit's state of topic copies (L{meshroute.audit.topic_views}):
what a micro-batch folds its copies' events into, so that it aggregates
only its own lines and the copies still open, and ends with the batch
audit's topic tables.

As for messages (L{meshroute.audit.incremental}), per copy id the
partial aggregates of L{topic_views.copy_partials}: C{copies_open}
(cumulative: the copies not settled yet) and C{copies_settled}
(appended, one slice per micro-batch, read only through a join with the
batch's copy ids).  A copy settles when its fate no longer waits on time
and the log of the router it is at (a subscription's copy) or went to
(one between routers) has gone on for the grace past its last event;
a later event of its own (a durable subscription's copy consumed days
later) takes it back into the open state, and what it had counted out
of the sums.  The settled copies' counts are cumulative tables:
C{subscription_counts} (per durable subscription period: a copy's period
is fixed once its router's log is past it, since that log is read in
order), C{topic_link_counts} (per pair of routers), C{topic_router_counts}
(per router), and C{topic_problems} (their lost or doubled copies); the
fan-outs' records per router, C{fan_out_counts}, add up as they come.
The subscriptions' periods are recomputed from the non-message events
every micro-batch, as the links' views are.  Until the logs read show
topic traffic, nothing of this is computed (L{advance} is not called).
"""

from dataclasses import dataclass

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from meshroute.audit import topic_views
from meshroute.audit.state import StateTables, added, combine, fold


#: How two L{topic_views.copy_partials} rows of one copy combine (the
#: counts add).
COPY_COMBINERS = {**{name: F.min for name in topic_views.PARTIALS_MIN},
                  **{name: F.max for name in topic_views.PARTIALS_MAX}}


@dataclass
class TopicCounts:
    """
    What a set of copies adds to the topic tables' counts.
    """

    per_period: DataFrame
    links: DataFrame
    routers: DataFrame

    @classmethod
    def of(cls, fates: DataFrame, periods: DataFrame) -> "TopicCounts":
        return cls(per_period=topic_views.subscription_counts(
                       topic_views.with_period(fates, periods)),
                   links=topic_views.link_counts(fates),
                   routers=topic_views.router_copy_counts(fates))

    def plus(self, other: "TopicCounts", sign: int = 1) -> "TopicCounts":
        # A key whose every copy was taken back (or moved) counts no more.
        return TopicCounts(
            per_period=added(self.per_period, other.per_period, topic_views.PERIOD, sign,
                             F.col("copies") > 0),
            links=added(self.links, other.links, ["router", "hop"], sign, F.col("copies") > 0),
            routers=added(self.routers, other.routers, ["router"], sign,
                          F.col("subscription_copies") > 0))


#: The cumulative tables of the settled copies' counts, by L{TopicCounts} field.
COUNT_TABLES = {"per_period": "subscription_counts", "links": "topic_link_counts",
                "routers": "topic_router_counts"}


def advance(state: StateTables, batch_id: int, events: DataFrame, others: DataFrame,
            router_view: DataFrame, until: DataFrame, grace_s: float, keep) -> dict:
    """
    Fold micro-batch C{batch_id}'s topic events (among its C{events})
    into the state, and return the topic tables of everything read so
    far (L{topic_views.tables_of}).  The state starts with the first
    micro-batch that reads an event about topics (the micro-batches
    before have none to keep).

    @param others: every event read so far that is not about a message
        (the subscriptions' periods are computed from them).
    @param router_view: L{meshroute.audit.views.routers} of everything
        read so far; C{until} its watermark per C{dest_router}.
    @param keep: persists a frame for the micro-batch.
    """
    previous = state.previous(batch_id, "copies_open")
    new = topic_views.copy_partials(events)
    folded = fold(state, previous, batch_id, new, "copy_id", COPY_COMBINERS,
                  lambda merged: topic_views.copy_fates(merged, router_view, grace_s), until,
                  grace_s, keep, ("copies_open", "copies_settled"))
    periods = keep(topic_views.subscription_periods(others))

    def fates_of(partials: DataFrame) -> DataFrame:
        return topic_views.copy_fates(partials, router_view, grace_s)

    settled_now = fates_of(state.read("copies_settled", batch_id))
    totals = TopicCounts.of(settled_now, periods)
    problems = topic_views.problems(settled_now)
    fan_outs = topic_views.fan_out_counts(events)
    if previous is not None:
        totals = totals.plus(TopicCounts(*[state.read(COUNT_TABLES[name], previous)
                                           for name in ("per_period", "links", "routers")]))
        earlier = state.read("topic_problems", previous)
        if folded.reopened is not None:
            earlier = earlier.join(folded.reopened.select("copy_id"), "copy_id", "left_anti")
        problems = problems.unionByName(earlier)
        fan_outs = combine(fan_outs.unionByName(state.read("fan_out_counts", previous)),
                           ["router"], {})
    if folded.reopened is not None:
        totals = totals.plus(TopicCounts.of(fates_of(folded.reopened), periods), sign=-1)
    for name, table in COUNT_TABLES.items():
        state.replace(table, batch_id, getattr(totals, name))
    state.replace("topic_problems", batch_id, problems)
    state.replace("fan_out_counts", batch_id, fan_outs)
    state.replace("copies_open", batch_id, folded.still_open)

    settled = TopicCounts(*[keep(state.read(COUNT_TABLES[name], batch_id))
                            for name in ("per_period", "links", "routers")])
    open_fates = keep(fates_of(state.read("copies_open", batch_id)))
    everything = settled.plus(TopicCounts.of(open_fates, periods))
    found = keep(topic_views.problems(open_fates).unionByName(
        state.read("topic_problems", batch_id)))
    return topic_views.tables_of(periods, keep(everything.per_period), keep(everything.links),
                                 keep(state.read("fan_out_counts", batch_id)),
                                 keep(everything.routers), found)
