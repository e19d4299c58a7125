"""
The audit's computations: pure functions from DataFrames to DataFrames.

Each takes the good events (L{meshroute.audit.read.events_of}: the schema
columns plus the line's position C{file}, C{block}, C{rid}) or another
view, and returns a view; none runs a Spark action, so each can be tested
alone on a handful of rows, and the job decides what to persist, collect
and write.

Definitions (docs/events.md, "Audit", says the same for operators):

 - A message's route is its origin router → its destination
   C{queue@router} (the C{dest} of its C{message.accepted}); a topic
   publication's is C{topic:NAME}, and it is enqueued in its router's
   C{$topic}.  The copies a topic's fan-out makes of it are not messages
   here: L{meshroute.audit.topic_views} follows them.
 - Its fate: C{enqueued} (a C{message.enqueued} at the destination;
   more than one is a duplicate; or, failing that, a
   C{message.consumed} there: a router killed with SIGKILL can lose its
   last turn's records while the messages they describe are durable, and
   a consumed message was necessarily enqueued), unless it expired
   (C{message.expired}: its time to live ran out before it was delivered,
   wherever it was), then C{expired}; else C{dead-lettered}, else C{dropped}
   (non-persistent, C{message.dropped}), else C{orphan} (never accepted
   in these logs: the origin's log is missing or cut short), else
   C{unobserved} (the destination's log is not in the input), else
   C{in-flight} (accepted less than the grace window before the end of
   what the logs can show: the run's last event, or the destination's
   orderly stop if it was down at the end), else C{lost-non-persistent}
   (at most once allows it), else C{lost}.
 - Latency: first C{message.enqueued} time minus C{accepted_at} (the
   origin's accept time carried by the message; the accept event's time
   when absent), in milliseconds rounded to the microsecond; percentiles
   exact, by nearest rank from the count of each latency (L{percentiles}).
 - A link is seen from one router: (router, peer), one row per ordered
   pair; each connection appears in the logs of both its ends.  A
   connection is one link id within one router process (boot).
 - A failover is an C{ha.failover}, written by the instance of an HA
   pair that serves now; its duration runs from the moment it last heard
   the old active to serving, by its own clock.  An HA instance is
   (router, group, role): both instances write under the router's name.
"""

from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F

from meshroute.audit import schema as S

#: The event fields the views read: the reader parses, checks and keeps
#: only these (and the line's position).
FIELDS_USED = ("time", "router", "event", "version", "pid", "link", "peer", "direction", "stage",
               "keepalive_interval_ms", "code", "detail", "by", "reason", "last_heard", "msg_id",
               "origin", "dest", "size", "persistent", "hops", "queue", "accepted_at",
               "group", "role", "epoch", "mode", "from", "to", "kind", "duration_ms", "status",
               "step", "user", "action", "publication", "topic", "durable", "non_durable",
               "sent", "targets", "pattern", "replaced")

#: Percentiles of the latency columns.
PERCENTILES = (0.5, 0.95, 0.99)

#: percentile_approx's accuracy for the failover durations (few: exact
#: below ACCURACY failovers); latencies have exact L{percentiles}.
ACCURACY = 10000

#: Latency histogram buckets per decade (log scale), and the floor.
BUCKETS_PER_DECADE = 10
LATENCY_FLOOR_MS = 0.01

#: Message fates, in the order reports show them.
FATES = ("enqueued", "expired", "dead-lettered", "dropped", "orphan", "unobserved", "in-flight",
         "lost-non-persistent", "lost")


def is_event(name: str) -> Column:
    """
    Whether a row is event C{name}.
    """
    return F.col("event") == name


def count_if(condition: Column) -> Column:
    """
    An aggregate: how many rows C{condition} is true of.
    """
    return F.count(F.when(condition, F.lit(1)))


def value_when(condition: Column, column: str) -> Column:
    """
    C{column} where C{condition} is true, else null (for aggregates of
    one kind of event among others).
    """
    return F.when(condition, F.col(column))


# -- routers and their boots ---------------------------------------------------


def boot_starts(events: DataFrame) -> DataFrame:
    """
    Per router, its boots as time intervals: C{boot} (1 for the first
    C{router.started}, 2 for the next...), C{since} (that start) and
    C{until} (the next start; infinity for the last), with boot 0 from
    minus infinity to the first start.
    """
    started = events.where(is_event(S.ROUTER_STARTED)).select("router", "time")
    order = Window.partitionBy("router").orderBy("time")
    infinity = F.lit(float("inf"))
    numbered = started.select(
        "router",
        F.row_number().over(order).alias("boot"),
        F.col("time").alias("since"),
        F.coalesce(F.lead("time").over(order), infinity).alias("until"),
    )
    before = started.groupBy("router").agg(F.min("time").alias("until")).select(
        "router", F.lit(0).alias("boot"), (-infinity).alias("since"), "until")
    return numbered.unionByName(before)


def with_boot(frame: DataFrame, starts: DataFrame) -> DataFrame:
    """
    C{frame} with C{boot}: how many times its router had started at the
    row's time (0 before the first C{router.started} the logs show).

    A range join against the few boot intervals (broadcast), rather than
    counting the starts per row, which ran a lambda on every event.
    """
    intervals = starts.select(F.col("router").alias("_router"), F.col("boot").alias("_boot"),
                              "since", "until")
    inside = ((F.col("router") == F.col("_router")) & (F.col("time") >= F.col("since"))
              & (F.col("time") < F.col("until")))
    joined = frame.join(F.broadcast(intervals), inside, "left")
    return joined.withColumn("boot", F.coalesce(F.col("_boot"), F.lit(0))).drop(
        "_router", "_boot", "since", "until")


def boots(events: DataFrame, starts: DataFrame, per_boot: DataFrame | None = None
          ) -> DataFrame:
    """
    One row per router process: C{router}, C{boot}, its first and last
    event, whether it ended with an orderly C{router.stopped}, the
    meshroute version and pid it reported.

    The version (a string) comes from the few C{router.started} events,
    joined to the counts over every event: a maximum over a string column
    would make Spark sort every event to aggregate them (a sort
    aggregation, where numbers alone hash).

    @param per_boot: L{boot_counts} of C{events}, when computed already;
        then C{events} need only hold the C{router.started} events.
    """
    if per_boot is None:
        per_boot = boot_counts(events, starts)
    counts = per_boot.select("router", "boot", "first_time", "last_time", "events",
                             (F.col("clean_stops") > 0).alias("clean_stop"))
    reported = with_boot(events.where(is_event(S.ROUTER_STARTED)), starts).groupBy(
        "router", "boot").agg(F.max("version").alias("version"), F.max("pid").alias("pid"))
    return counts.join(reported, ["router", "boot"], "left")


def routers(events: DataFrame, horizon: float | None = None) -> DataFrame:
    """
    One row per router: its time range, starts and orderly stops, message
    and link event counts, rejections and client-session events.

    C{available_until} is the end of what its log can show: its orderly
    stop when it was down at the end of the logs, else C{horizon} (the
    run's last event; its own last event when C{horizon} is None).
    """
    return router_ends(router_counts(events), horizon)


def router_counts(events: DataFrame) -> DataFrame:
    """
    L{routers} before C{down_at_end} and C{available_until}: per router,
    counts, which add, and times, which combine by min or max
    (L{ROUTER_COUNTS_COMBINE}), so the streaming audit can merge them.
    """
    return events.groupBy("router").agg(*_router_counts())


def boot_counts(events: DataFrame, starts: DataFrame) -> DataFrame:
    """
    L{router_counts} per router process (C{router}, C{boot}): one pass
    over every event for both L{boots} and L{routers} (L{routers_of}).
    """
    return with_boot(events, starts).groupBy("router", "boot").agg(*_router_counts())


def routers_of(per_boot: DataFrame, horizon: float | None = None) -> DataFrame:
    """
    L{routers} from the L{boot_counts}, whose rows of a router combine as
    two of L{router_counts} do.
    """
    columns = [name for name in per_boot.columns if name not in ("router", "boot")]
    counts = per_boot.groupBy("router").agg(
        *[ROUTER_COUNTS_COMBINE.get(name, F.sum)(name).alias(name) for name in columns])
    return router_ends(counts, horizon)


def _router_counts() -> list[Column]:
    stage_delivery = is_event(S.LINK_STAGE) & (F.col("stage") == "delivery")
    rejected = is_event(S.LINK_REJECTED)
    return [
        F.min("time").alias("first_time"),
        F.max("time").alias("last_time"),
        F.count(F.lit(1)).alias("events"),
        count_if(is_event(S.ROUTER_STARTED)).alias("starts"),
        count_if(is_event(S.ROUTER_STOPPED)).alias("clean_stops"),
        F.max(value_when(is_event(S.ROUTER_STARTED), "time")).alias("last_start"),
        F.max(value_when(is_event(S.ROUTER_STOPPED), "time")).alias("last_stop"),
        count_if(is_event(S.MESSAGE_ACCEPTED)).alias("accepted"),
        count_if(is_event(S.MESSAGE_FORWARDED)).alias("forwarded"),
        count_if(is_event(S.MESSAGE_ENQUEUED)).alias("enqueued"),
        count_if(is_event(S.MESSAGE_CONSUMED)).alias("consumed"),
        count_if(is_event(S.MESSAGE_DUPLICATE)).alias("duplicates_dropped"),
        count_if(is_event(S.MESSAGE_DEAD_LETTERED)).alias("dead_lettered"),
        count_if(is_event(S.MESSAGE_DROPPED)).alias("dropped"),
        count_if(stage_delivery).alias("link_sessions"),
        count_if(is_event(S.LINK_CLOSED)).alias("link_closes"),
        count_if(rejected & (F.col("by") == "local")).alias("rejections_local"),
        count_if(rejected & (F.col("by") == "peer")).alias("rejections_peer"),
        count_if(is_event(S.CONNECTOR_EXHAUSTED)).alias("connectors_exhausted"),
        *[count_if(is_event(name)).alias(name.replace(".", "_")) for name in S.SESSION_EVENTS],
    ]


#: How two L{router_counts} rows of a router combine, for the columns
#: that do not add.
ROUTER_COUNTS_COMBINE = {"first_time": F.min, "last_time": F.max, "last_start": F.max,
                         "last_stop": F.max}


def router_ends(view: DataFrame, horizon: float | None) -> DataFrame:
    """
    L{router_counts} with C{down_at_end} and C{available_until} (L{routers}).
    """
    down = F.col("last_stop").isNotNull() & (
        F.col("last_start").isNull() | (F.col("last_stop") >= F.col("last_start")))
    end = F.lit(horizon) if horizon is not None else F.col("last_time")
    return view.withColumn("down_at_end", down).withColumn(
        "available_until", F.when(down, F.col("last_stop")).otherwise(end))


def other_events(events: DataFrame) -> DataFrame:
    """
    The events that are not about a message (C{message.*}, and the
    fan-outs' records of publications, C{topic.fanned-out}): the few
    that every view but the messages', the topics' copies' and the
    routers' counts reads.
    """
    return events.where(~F.col("event").startswith("message.")
                        & (F.col("event") != S.TOPIC_FANNED_OUT))


def rejections(events: DataFrame) -> DataFrame:
    """
    Refused handshakes: C{router}, C{peer}, C{code}, C{by}, C{count}.
    """
    return (events.where(is_event(S.LINK_REJECTED))
            .groupBy("router", "peer", "code", "by").agg(F.count(F.lit(1)).alias("count")))


def denials(events: DataFrame) -> DataFrame:
    """
    Client requests refused by a router's security (C{security.denied}),
    per user: C{router}, C{user}, C{action} (connect, send, consume,
    resume), C{count}.
    """
    return (events.where(is_event(S.SECURITY_DENIED))
            .groupBy("router", F.col("user"), "action").agg(F.count(F.lit(1)).alias("count")))


# -- messages ------------------------------------------------------------------


def message_fates(events: DataFrame, router_view: DataFrame, grace_s: float) -> DataFrame:
    """
    One row per message id: its route, what happened to it and its latency.

    @param router_view: L{routers}, for each destination's C{available_until}.
    @param grace_s: the in-flight grace window, seconds.
    """
    return fates_of(message_partials(events), router_view, grace_s)


#: How two L{message_partials} rows of one message combine: these counts
#: add, the times of L{PARTIALS_MIN} take the min, the rest the max.
PARTIALS_ADD = ("accepted_events", "enqueued_events", "consumed_events", "forwarded_events",
                "duplicates_dropped", "dead_lettered_events", "dropped_events", "expired_events")
PARTIALS_MIN = ("accepted_time", "enqueued_time", "accepted_at")


def message_partials(events: DataFrame) -> DataFrame:
    """
    Per message id, what its events say, as aggregates that combine
    (L{PARTIALS_MIN}), so the streaming audit can merge those of new
    events into those it keeps.

    Maxima over strings make this a sort aggregation (Spark hashes only
    fixed-width aggregates), and a message's events are in several
    routers' logs, so aggregating each split first merges few rows and
    costs a sort of every event and another of what is left: the events
    are sent to their message's partition first, and sorted once there.
    """
    messages = events.where(F.col("event").startswith("message.") & F.col("msg_id").isNotNull()
                            & ~S.topic_copy(F.col("msg_id")))
    accepted, enqueued = is_event(S.MESSAGE_ACCEPTED), is_event(S.MESSAGE_ENQUEUED)
    forwarded, dead = is_event(S.MESSAGE_FORWARDED), is_event(S.MESSAGE_DEAD_LETTERED)
    consumed = is_event(S.MESSAGE_CONSUMED) & ~(
        F.coalesce(F.col("queue"), F.lit("")).isin(S.DEAD_LETTER_QUEUE, S.EXPIRED_QUEUE))
    expired = is_event(S.MESSAGE_EXPIRED)
    return messages.repartition("msg_id").groupBy("msg_id").agg(
        count_if(accepted).alias("accepted_events"),
        F.min(value_when(accepted, "time")).alias("accepted_time"),
        F.max(value_when(accepted, "router")).alias("accepted_router"),
        F.max("origin").alias("origin_field"),
        F.max(value_when(accepted, "dest")).alias("accepted_dest"),
        F.max(value_when(accepted, "persistent")).alias("accepted_persistent"),
        F.max(value_when(accepted, "size")).alias("size"),
        count_if(enqueued).alias("enqueued_events"),
        F.min(value_when(enqueued, "time")).alias("enqueued_time"),
        F.max(value_when(enqueued, "router")).alias("enqueued_router"),
        F.max(value_when(enqueued, "queue")).alias("enqueued_queue"),
        F.min(value_when(enqueued, "accepted_at")).alias("accepted_at"),
        F.max(value_when(enqueued, "persistent")).alias("enqueued_persistent"),
        F.max(value_when(enqueued, "hops")).alias("hops"),
        count_if(consumed).alias("consumed_events"),
        count_if(forwarded).alias("forwarded_events"),
        F.max(F.when(forwarded, F.struct("time", "peer"))).alias("last_forwarded"),
        count_if(is_event(S.MESSAGE_DUPLICATE)).alias("duplicates_dropped"),
        count_if(dead).alias("dead_lettered_events"),
        F.max(value_when(dead, "dest")).alias("dead_dest"),
        F.max(value_when(dead, "router")).alias("dead_lettered_at"),
        count_if(is_event(S.MESSAGE_DROPPED)).alias("dropped_events"),
        count_if(expired).alias("expired_events"),
        F.max(value_when(expired, "dest")).alias("expired_dest"),
        F.max(value_when(expired, "router")).alias("expired_at"),
        F.max(value_when(is_event(S.MESSAGE_DROPPED), "reason")).alias("drop_reason"),
        F.max("time").alias("last_time"),
    )


def fates_of(per_id: DataFrame, router_view: DataFrame, grace_s: float) -> DataFrame:
    """
    L{message_fates} from the L{message_partials}.
    """
    dest = F.coalesce(
        F.col("accepted_dest"),
        F.when(F.col("enqueued_router").isNotNull(),
               F.concat_ws("@", F.col("enqueued_queue"), F.col("enqueued_router"))),
        F.col("dead_dest"),
        F.col("expired_dest"),
    )
    origin = F.coalesce(F.col("accepted_router"), F.col("origin_field"),
                        F.substring_index(F.col("msg_id"), ":", 1))
    fates = per_id.select(
        "*",
        F.col("last_forwarded")["peer"].alias("last_forwarded_to"),
        origin.alias("origin"),
        dest.alias("dest"),
        F.coalesce("accepted_persistent", "enqueued_persistent", F.lit(True)).alias("persistent"),
    ).withColumn(
        "dest_router", F.when(F.col("dest").contains("@"), F.substring_index("dest", "@", -1))
    ).withColumn(
        "dest_queue", F.substring_index("dest", "@", 1)
    )
    ends = router_view.select(F.col("router").alias("dest_router"),
                              F.col("available_until").alias("dest_available_until"))
    fates = fates.join(F.broadcast(ends), "dest_router", "left")
    fate = (
        F.when(F.col("expired_events") > 0, F.lit("expired"))
        .when((F.col("enqueued_events") > 0) | (F.col("consumed_events") > 0),
              F.lit("enqueued"))
        .when(F.col("dead_lettered_events") > 0, F.lit("dead-lettered"))
        .when(F.col("dropped_events") > 0, F.lit("dropped"))
        .when(F.col("accepted_events") == 0, F.lit("orphan"))
        .when(F.col("dest_available_until").isNull(), F.lit("unobserved"))
        .when(F.col("accepted_time") > F.col("dest_available_until") - F.lit(grace_s),
              F.lit("in-flight"))
        .when(~F.col("persistent"), F.lit("lost-non-persistent"))
        .otherwise(F.lit("lost"))
    )
    latency = F.round((F.col("enqueued_time")
                       - F.coalesce(F.col("accepted_at"), F.col("accepted_time"))) * 1000.0, 3)
    return fates.select(
        "msg_id", "origin", "dest", "dest_router", "dest_queue", "persistent", "size",
        fate.alias("fate"),
        "accepted_events", "accepted_time", "enqueued_events", "enqueued_time",
        (F.col("enqueued_events") > 1).alias("duplicated"),
        latency.alias("latency_ms"), "hops",
        "consumed_events", "forwarded_events", "last_forwarded_to", "duplicates_dropped",
        "dead_lettered_at", "expired_at", "drop_reason", "last_time",
    )


def _fate(name: str) -> Column:
    return count_if(F.col("fate") == name)


def value_counts(fates: DataFrame, keys: list[str]) -> DataFrame:
    """
    How many enqueued messages had each latency, per C{keys}: C{keys},
    C{latency_ms}, C{count}.  Latency is rounded to the microsecond, so
    this is small (at most one row per distinct microsecond per group)
    and mergeable: the counts of two sets of messages add up.
    """
    return (fates.where(F.col("latency_ms").isNotNull())
            .groupBy(*keys, "latency_ms").agg(F.count(F.lit(1)).alias("count")))


def percentiles(counts: DataFrame, keys: list[str]) -> DataFrame:
    """
    Per C{keys}, from L{value_counts} (or a sum of them): C{enqueued}
    (the messages counted), C{latency_min_ms}, C{latency_max_ms} and, for
    each p of L{PERCENTILES}, C{latency_pNN_ms}: the exact nearest-rank
    percentile, the smallest latency whose cumulative count reaches
    ceil(p × n) (n the group's count; p × n computed in double).  Being
    a function of the counts alone, it gives the batch and the streaming
    audit the same figure from the same messages.  With no C{keys}: one
    row, of nulls and 0 when there is nothing to count.
    """
    group = Window.partitionBy(*keys) if keys else Window.partitionBy(F.lit(0))
    running = group.orderBy("latency_ms").rowsBetween(Window.unboundedPreceding,
                                                      Window.currentRow)
    ranked = counts.select(*keys, "latency_ms",
                           F.sum("count").over(running).alias("_cumulative"),
                           F.sum("count").over(group).alias("_n"))
    reached = [F.min(F.when(F.col("_cumulative") >= F.ceil(F.lit(p) * F.col("_n")),
                            F.col("latency_ms"))).alias(f"latency_p{round(p * 100)}_ms")
               for p in PERCENTILES]
    columns = [F.coalesce(F.max("_n"), F.lit(0)).alias("enqueued"),
               F.min("latency_ms").alias("latency_min_ms"),
               F.max("latency_ms").alias("latency_max_ms"), *reached]
    return ranked.groupBy(*keys).agg(*columns) if keys else ranked.agg(*columns)


def _message_counts() -> list[Column]:
    return [
        count_if(F.col("accepted_events") > 0).alias("accepted"),
        _fate("enqueued").alias("enqueued"),
        count_if(F.col("consumed_events") > 0).alias("consumed"),
        _fate("lost").alias("lost"),
        _fate("lost-non-persistent").alias("lost_non_persistent"),
        _fate("in-flight").alias("in_flight"),
        _fate("dead-lettered").alias("dead_lettered"),
        _fate("expired").alias("expired"),
        _fate("dropped").alias("dropped"),
        count_if(F.col("duplicated")).alias("duplicated"),
        F.sum(F.greatest(F.col("enqueued_events") - 1, F.lit(0))).alias("duplicate_copies"),
        F.sum("duplicates_dropped").alias("duplicates_dropped"),
        count_if(F.col("accepted_events") == 0).alias("orphans"),
        _fate("unobserved").alias("unobserved"),
    ]


#: The route's key.
ROUTE = ["origin", "dest"]


def with_latency(counts: DataFrame, latencies: DataFrame, keys: list[str]) -> DataFrame:
    """
    Per-C{keys} message counts (L{message_counts}' columns) with their
    latency figures from L{value_counts} C{latencies}: L{routes}' columns.
    """
    figures = percentiles(latencies, keys).drop("enqueued")
    if keys:
        return counts.join(figures, keys, "left")
    return counts.crossJoin(figures)


def message_counts(fates: DataFrame, keys: list[str], *more: Column) -> DataFrame:
    """
    Per C{keys}, the messages of C{fates} counted by fate, consumed,
    duplicated...: L{routes}' columns but the latency ones (and C{more}
    aggregates first, when given).
    """
    return (fates.groupBy(*keys) if keys else fates).agg(*more, *_message_counts())


def routes(fates: DataFrame) -> DataFrame:
    """
    One row per route (C{origin}, C{dest}): message counts by fate and the
    latency percentiles (ms) of the messages enqueued.
    """
    return with_latency(message_counts(fates, ROUTE), value_counts(fates, ROUTE), ROUTE)


def totals(fates: DataFrame) -> DataFrame:
    """
    L{routes}' columns over every message: one row.
    """
    return with_latency(message_counts(fates, []), value_counts(fates, []), [])


def latency_histogram(fates: DataFrame) -> DataFrame:
    """
    Per route, enqueued messages by latency bucket: C{bucket} (log scale,
    L{BUCKETS_PER_DECADE} a decade), C{lower_ms}, C{upper_ms}, C{count}.
    Latencies under L{LATENCY_FLOOR_MS} (zero, or negative from clock
    skew between routers) count in the lowest bucket.
    """
    return histogram_of(value_counts(fates, ROUTE))


def histogram_of(counts: DataFrame) -> DataFrame:
    """
    L{latency_histogram} from the L{value_counts} per route.
    """
    floor = F.greatest(F.col("latency_ms"), F.lit(LATENCY_FLOOR_MS))
    bucket = F.floor(F.log10(floor) * BUCKETS_PER_DECADE).cast("int")
    view = counts.groupBy(*ROUTE, bucket.alias("bucket")).agg(F.sum("count").alias("count"))
    return view.select(
        "origin", "dest", "bucket",
        F.pow(F.lit(10.0), F.col("bucket") / BUCKETS_PER_DECADE).alias("lower_ms"),
        F.pow(F.lit(10.0), (F.col("bucket") + 1) / BUCKETS_PER_DECADE).alias("upper_ms"),
        "count",
    )


def window_start(window_s: float) -> Column:
    """
    The start of the tumbling window of C{window_s} seconds of enqueue
    time a message falls in.
    """
    return F.floor(F.col("enqueued_time") / F.lit(window_s)) * F.lit(window_s)


def latency_windows(fates: DataFrame, window_s: float) -> DataFrame:
    """
    Per route and tumbling window of C{window_s} seconds of enqueue time,
    the messages enqueued in it and their latency percentiles: what an
    operator following the mesh watches move (L{routes} has the whole
    run's).
    """
    keys = [*ROUTE, "window_start"]
    counts = value_counts(fates.withColumn("window_start", window_start(window_s)), keys)
    return windows_of(counts, window_s)


def windows_of(counts: DataFrame, window_s: float) -> DataFrame:
    """
    L{latency_windows} from the L{value_counts} per route and window.
    """
    view = percentiles(counts, [*ROUTE, "window_start"])
    return view.withColumn("window_end", F.col("window_start") + window_s)


def message_problems(fates: DataFrame) -> DataFrame:
    """
    The messages an operator must look at: lost (either kind), duplicated
    or orphaned, with where they were last seen.
    """
    return fates.where(
        F.col("fate").isin("lost", "lost-non-persistent", "orphan") | F.col("duplicated")
    ).select(
        "msg_id", "origin", "dest", "fate", "duplicated", "persistent", "accepted_time",
        "enqueued_events", "forwarded_events",
        F.coalesce(F.col("last_forwarded_to"), F.col("origin")).alias("last_held_by"),
        "last_time",
    )


# -- links ---------------------------------------------------------------------


def link_sessions(events: DataFrame, starts: DataFrame, boot_view: DataFrame,
                  keepalive_limit: float = 6.0) -> DataFrame:
    """
    One row per connection as one router saw it (C{router}, C{boot},
    C{link}): peer, direction, when it opened, reached delivery and ended,
    how it ended, and for keepalive closes the peer's silence before the
    close.

    A connection without C{link.closed} ended, at the latest, with its
    router process: at that boot's last event (C{ended_by}
    C{router-restart} when a later start follows, else C{end-of-log}).
    C{keepalive_late}: the silence exceeded C{keepalive_limit} intervals
    (the counter rule of docs/protocol.md closes after 4 to 6).
    """
    link_events = events.where(
        F.col("event").isin(S.LINK_STAGE, S.LINK_REJECTED, S.LINK_CLOSED)
        & F.col("link").isNotNull())
    closed = is_event(S.LINK_CLOSED)
    per_link = with_boot(link_events, starts).groupBy("router", "boot", "link").agg(
        F.max("peer").alias("peer"),
        F.max("direction").alias("direction"),
        F.min("time").alias("opened"),
        F.min(F.when(is_event(S.LINK_STAGE) & (F.col("stage") == "delivery"), F.col("time"))
              ).alias("delivery_at"),
        F.max("keepalive_interval_ms").alias("keepalive_interval_ms"),
        F.max(value_when(closed, "time")).alias("closed_at"),
        F.max(value_when(closed, "reason")).alias("close_reason"),
        F.max(value_when(closed, "stage")).alias("close_stage"),
        F.max(value_when(closed, "detail")).alias("close_detail"),
        F.max(value_when(closed, "last_heard")).alias("last_heard"),
        F.max(value_when(is_event(S.LINK_REJECTED), "code")).alias("rejected_code"),
        F.max(value_when(is_event(S.LINK_REJECTED), "by")).alias("rejected_by"),
    )
    last_boot = boot_view.groupBy("router").agg(F.max("boot").alias("last_boot"))
    ends = boot_view.select("router", "boot", F.col("last_time").alias("boot_last_time"))
    view = per_link.join(ends, ["router", "boot"], "left").join(last_boot, "router", "left")
    ended_by = (F.when(F.col("closed_at").isNotNull(), F.lit("closed"))
                .when(F.col("boot") < F.col("last_boot"), F.lit("router-restart"))
                .otherwise(F.lit("end-of-log")))
    ended = F.coalesce(F.col("closed_at"), F.col("boot_last_time"))
    keepalive = (F.col("close_reason") == "keepalive")
    silence = F.when(keepalive, F.col("closed_at") - F.col("last_heard"))
    intervals = silence * 1000.0 / F.col("keepalive_interval_ms")
    return view.select(
        "router", "boot", "link", "peer", "direction", "opened", "delivery_at",
        "keepalive_interval_ms",
        ended.alias("ended"), ended_by.alias("ended_by"),
        F.when(F.col("delivery_at").isNotNull(), ended - F.col("delivery_at")
               ).alias("time_in_delivery_s"),
        "close_reason", "close_stage", "close_detail", "last_heard",
        silence.alias("silence_s"),
        intervals.alias("silence_intervals"),
        (intervals > F.lit(keepalive_limit)).alias("keepalive_late"),
        (intervals < F.lit(4.0)).alias("keepalive_early"),
        "rejected_code", "rejected_by",
    )


def links(sessions: DataFrame) -> DataFrame:
    """
    One row per link as one router saw it (C{router} → C{peer}): its
    connections, delivery sessions, total time in delivery, closes by
    reason, rejections and the keepalive-close check.
    """
    reason = F.col("close_reason")
    keepalive = reason == "keepalive"
    checked = keepalive & F.col("silence_intervals").isNotNull()
    view = sessions.withColumn("peer", F.coalesce("peer", F.lit("?"))).groupBy(
        "router", "peer").agg(
        F.count(F.lit(1)).alias("connections"),
        count_if(F.col("delivery_at").isNotNull()).alias("sessions"),
        F.coalesce(F.sum("time_in_delivery_s"), F.lit(0.0)).alias("time_in_delivery_s"),
        F.min("delivery_at").alias("first_delivery"),
        F.max("ended").alias("last_end"),
        *[count_if(reason == name).alias(f"closed_{name.replace('-', '_')}")
          for name in S.CLOSE_REASONS],
        count_if(reason.isNotNull() & ~reason.isin(*S.CLOSE_REASONS)).alias("closed_other"),
        count_if(F.col("ended_by") != "closed").alias("not_closed"),
        count_if(F.col("rejected_code").isNotNull()).alias("rejections"),
        count_if(keepalive).alias("keepalive_closes"),
        count_if(checked).alias("keepalive_checked"),
        count_if(checked & F.col("keepalive_late")).alias("keepalive_late"),
        count_if(checked & F.col("keepalive_early")).alias("keepalive_early"),
        F.min("silence_intervals").alias("keepalive_min_intervals"),
        F.max("silence_intervals").alias("keepalive_max_intervals"),
        F.max("silence_s").alias("keepalive_max_silence_s"),
    )
    return view


def keepalive_closes(sessions: DataFrame) -> DataFrame:
    """
    Every keepalive close: how long the peer had been silent, in seconds
    and in keepalive intervals, and whether that broke the limit.
    """
    return sessions.where(F.col("close_reason") == "keepalive").select(
        "router", "peer", "link", F.col("ended").alias("closed_at"), "last_heard",
        "keepalive_interval_ms", "silence_s", "silence_intervals", "keepalive_late",
        "keepalive_early",
    )


# -- HA pairs --------------------------------------------------------------------


def failovers(events: DataFrame) -> DataFrame:
    """
    Every failover: C{router}, C{group}, C{role} (of the instance that
    serves now), C{time}, C{from}, C{to}, C{epoch}, C{kind} (C{takeover}
    or C{handover}), C{duration_ms}.
    """
    return events.where(is_event(S.HA_FAILOVER)).select(
        "router", "group", "role", "time", "from", "to", "epoch", "kind", "duration_ms")


def _ha_counts() -> list[Column]:
    failover = is_event(S.HA_FAILOVER)
    return [
        count_if(failover).alias("failovers"),
        count_if(failover & (F.col("kind") == "takeover")).alias("takeovers"),
        count_if(failover & (F.col("kind") == "handover")).alias("handovers"),
        F.max(value_when(failover, "duration_ms")).alias("failover_max_ms"),
        count_if(is_event(S.HA_FENCED)).alias("fenced"),
        count_if(is_event(S.HA_EPOCH)).alias("epochs"),
        count_if(is_event(S.HA_EPOCH) & (F.col("mode") == "alone")).alias("alone_epochs"),
        count_if(is_event(S.HA_REPLICATION) & (F.col("status") == "lost")).alias("backup_lost"),
        count_if(is_event(S.HA_FORCE_ACTIVATE) & (F.col("step") == "recorded")
                  ).alias("forced_activations"),
    ]


def _ha_events(events: DataFrame) -> DataFrame:
    return events.where(F.col("event").isin(*S.HA_INSTANCE_EVENTS))


def ha_groups(events: DataFrame) -> DataFrame:
    """
    One row per HA instance (C{router}, C{group}, C{role}): failovers to
    it by kind and the longest, times it fenced itself, epochs it was
    granted (and of those, to run alone), backups it lost, forced
    activations, and the newest epoch it logged.
    """
    return _ha_events(events).groupBy("router", "group", "role").agg(
        *_ha_counts(), F.max("epoch").alias("newest_epoch"))


def ha_totals(events: DataFrame) -> DataFrame:
    """
    L{ha_groups}' counts over every instance, with the failover duration
    percentiles C{failover_p50_ms} and C{failover_p99_ms}: one row.
    """
    duration = value_when(is_event(S.HA_FAILOVER), "duration_ms")
    quantiles = F.percentile_approx(duration, [0.5, 0.99], ACCURACY)
    return _ha_events(events).agg(*_ha_counts(), quantiles.alias("q")).select(
        "*", F.col("q")[0].alias("failover_p50_ms"), F.col("q")[1].alias("failover_p99_ms")
    ).drop("q")
