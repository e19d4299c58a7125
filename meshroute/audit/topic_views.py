"""
The audit's topic views: pure functions from DataFrames to DataFrames,
as L{meshroute.audit.views} (whose helpers they share), following each
publication's tree of copies from router to router by the fan-outs'
records (docs/events.md, "Topic events"; the audit's "Topics").

Definitions (docs/events.md, "What it computes", says the same for
operators):

 - A B{copy} is a message a fan-out made: a subscription's (id
   C{PUB/QUEUE@ROUTER}) or one for other routers (id C{PUB>FROM:DIGEST},
   taken by the neighbour it is handed to).  Copies are not messages of the routes
   (they have no C{message.accepted}); they are followed here by id,
   through the same message events, and what made each is the
   C{topic.fanned-out} of its router that names it: a subscription's
   copy was B{due} there, a copy between routers was B{sent} there.
 - A subscription's copy: C{consumed} (a C{message.consumed}), else
   C{expired}, else C{dropped} (in memory, given up), else C{held} (a
   C{message.enqueued}: waiting in the queue, or deleted with the
   subscription), else C{in-flight} (made less than the grace before
   its router's log ends, as a message's), else C{lost} (stored: a
   persistent publication's copy for a durable subscription) or
   C{lost-non-persistent}.  Enqueued or consumed more than once: doubled.
 - A copy between routers goes to its B{hop}: the router that took it
   (its C{topic.fanned-out} or C{message.enqueued} there), else the
   neighbour it was last handed to (C{message.forwarded}), else the
   router it is addressed to while it waits (the first of its
   targets).  Its fate: C{fanned-out} there (a C{topic.fanned-out}
   taking it), else C{expired}, else C{arrived} (enqueued or consumed
   there without that record: a router killed before its last records
   were written), else C{dead-lettered}, C{dropped} (at its maker:
   C{max-backlog}), C{unobserved} (its hop's log is not in the input),
   C{in-flight}, C{lost-non-persistent}, C{lost}, as a message's.
   Fanned out or enqueued more than once: doubled.
 - A durable subscription (router, queue) lives in B{periods}: each
   C{topic.subscribed} or C{topic.unsubscribed} of it starts one, and
   period 0 runs from before the logs to the first.  It exists in a
   period that a subscribe started, and in period 0 unless the logs
   show it made (a subscribe that replaced none).  A copy counts in the
   period its making (or first event) falls in; one in a period where
   the subscription does not exist came before it was made or after it
   was forgotten (C{outside}).  What a period held at its end waits in
   the queue if the period has not ended, else was deleted with it.
 - A subscription B{missed} a publication when a copy toward its router
   (its C{targets}) was lost on the way, while it existed, and the
   publication's topic matches its pattern.
"""

from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F

from meshroute.audit import schema as S
from meshroute.audit.topic_report import SUBSCRIPTION_COUNTS
from meshroute.audit.views import count_if, is_event, value_when
from meshroute.messages import DURABLE_PREFIX
# The kind of a durable subscription's topic.subscribed and topic.unsubscribed.
from meshroute.router.message_events import DURABLE

#: A copy's kinds: a subscription's, or one between routers.
SUBSCRIPTION, LINK = "subscription", "link"

#: The C{role} of a L{copy_events} row that a fan-out's record makes.
DUE, SENT, FANNED = "due", "sent", "fanned"

#: How two L{copy_partials} rows of one copy combine: these take the
#: min, those of L{PARTIALS_MAX} the max, the rest (counts) add.
PARTIALS_MIN = ("due_time", "sent_time", "enqueued_time", "first_time")
PARTIALS_MAX = ("targets", "topic", "made_persistent", "enqueued_persistent", "taken_at",
                "drop_reason", "last_forwarded", "last_time")

#: The reasons a non-durable copy is dropped for that have a column of
#: their own in L{topic_routers} (the others count in C{_other}).
DROP_REASONS = ("max-depth", "max-total-depth", "unsubscribed")

#: A subscription period's key.
PERIOD = ["router", "queue", "period"]


def fan_outs(events: DataFrame) -> DataFrame:
    """
    The C{topic.fanned-out} records.
    """
    return events.where(is_event(S.TOPIC_FANNED_OUT) & F.col("publication").isNotNull())


def copy_events(events: DataFrame) -> DataFrame:
    """
    One row per thing that happened to a copy: C{copy_id}, C{role} (what
    happened: L{DUE}, L{SENT}, L{FANNED}, or the message event's name),
    C{time}, C{router}, C{topic}, C{persistent}, C{targets}, C{reason},
    C{peer}.
    """
    fanned = fan_outs(events)

    def due(column: str) -> DataFrame:
        return fanned.select("time", "router", "topic", "persistent", "publication",
                             F.explode(column).alias("queue")).select(
            F.concat("publication", F.lit("/"), "queue", F.lit("@"), "router").alias("copy_id"),
            F.lit(DUE).alias("role"), "time", "router", "topic", "persistent")

    sent = fanned.select("time", "router", "topic", "persistent", "targets",
                         F.posexplode("sent").alias("_at", "copy_id")).select(
        "copy_id", F.lit(SENT).alias("role"), "time", "router", "topic", "persistent",
        F.get(F.col("targets"), F.col("_at")).alias("targets"))
    taken = fanned.where(F.col("msg_id") != F.col("publication")).select(
        F.col("msg_id").alias("copy_id"), F.lit(FANNED).alias("role"), "time", "router")
    messages = events.where(F.col("event").startswith("message.") & S.topic_copy(F.col("msg_id"))
                            ).select(F.col("msg_id").alias("copy_id"),
                                     F.col("event").alias("role"), "time", "router",
                                     "persistent", "reason", "peer")
    rows = due("durable").unionByName(due("non_durable"))
    for more in (sent, taken, messages):
        rows = rows.unionByName(more, allowMissingColumns=True)
    return rows


def copy_partials(events: DataFrame) -> DataFrame:
    """
    Per copy id, what its events say, as aggregates that combine
    (L{PARTIALS_MIN}, L{PARTIALS_MAX}, the rest add), so the streaming
    audit can merge those of new events into those it keeps, as it does
    L{meshroute.audit.views.message_partials}.
    """
    role = F.col("role")

    def n(name: str) -> Column:
        return count_if(role == name)

    def first(name: str) -> Column:
        return F.min(value_when(role == name, "time"))

    made = role.isin(DUE, SENT)
    taken = role.isin(FANNED, S.MESSAGE_ENQUEUED, S.MESSAGE_CONSUMED)
    forwarded = role == S.MESSAGE_FORWARDED
    return copy_events(events).repartition("copy_id").groupBy("copy_id").agg(
        n(DUE).alias("due_events"), first(DUE).alias("due_time"),
        n(SENT).alias("sent_events"), first(SENT).alias("sent_time"),
        n(FANNED).alias("fanned_events"),
        n(S.MESSAGE_ENQUEUED).alias("enqueued_events"),
        first(S.MESSAGE_ENQUEUED).alias("enqueued_time"),
        n(S.MESSAGE_CONSUMED).alias("consumed_events"),
        n(S.MESSAGE_DROPPED).alias("dropped_events"),
        n(S.MESSAGE_EXPIRED).alias("expired_events"),
        n(S.MESSAGE_DEAD_LETTERED).alias("dead_lettered_events"),
        n(S.MESSAGE_DUPLICATE).alias("duplicates_dropped"),
        count_if(forwarded).alias("forwarded_events"),
        F.max(value_when(role == SENT, "targets")).alias("targets"),
        F.max(value_when(made, "topic")).alias("topic"),
        F.max(value_when(made, "persistent")).alias("made_persistent"),
        F.max(value_when(role == S.MESSAGE_ENQUEUED, "persistent")).alias("enqueued_persistent"),
        F.max(value_when(taken, "router")).alias("taken_at"),
        F.max(value_when(role == S.MESSAGE_DROPPED, "reason")).alias("drop_reason"),
        F.max(F.when(forwarded, F.struct("time", "peer"))).alias("last_forwarded"),
        F.min("time").alias("first_time"),
        F.max("time").alias("last_time"),
    )


def copy_fates(partials: DataFrame, router_view: DataFrame, grace_s: float) -> DataFrame:
    """
    One row per copy: its kind, publication, the router that made it (or
    holds it), its queue (a subscription's) or next hop (one between
    routers), whether it is stored, its fate (the module docstring), and
    whether it was doubled.

    @param router_view: L{meshroute.audit.views.routers}, for each
        router's C{available_until}.
    """
    copy_id = F.col("copy_id")
    link = copy_id.contains(">")
    # PUB>FROM:DIGEST; PUB/QUEUE@ROUTER (PUB is ORIGIN:BOOT:N, and no
    # router or subscription queue name has a >, / or @).
    maker = F.substring_index(F.substring_index(copy_id, ">", -1), ":", 1)
    queue = F.regexp_extract(copy_id, "/(.*)@[^@]*$", 1)
    at = F.substring_index(copy_id, "@", -1)
    hop = F.coalesce(F.col("taken_at"), F.col("last_forwarded")["peer"],
                     F.array_min("targets"))
    durable = ~link & queue.startswith(DURABLE_PREFIX)
    made_events = F.col("due_events") + F.col("sent_events")
    base = partials.select(
        "*",
        F.when(link, F.lit(LINK)).otherwise(F.lit(SUBSCRIPTION)).alias("kind"),
        F.substring_index(F.substring_index(copy_id, ">", 1), "/", 1).alias("publication"),
        F.when(link, maker).otherwise(at).alias("router"),
        F.when(~link, queue).alias("queue"),
        F.when(link, hop).alias("hop"),
        F.when(link, hop).otherwise(at).alias("dest_router"),
        F.when(~link, durable).alias("durable"),
        F.coalesce(F.col("made_persistent") & (link | durable), F.col("enqueued_persistent"),
                   F.lit(True)).alias("stored"),
        made_events.alias("made_events"),
        F.coalesce("due_time", "sent_time", "first_time").alias("made_time"),
    )
    ends = router_view.select(F.col("router").alias("dest_router"),
                              F.col("available_until").alias("dest_available_until"))
    base = base.join(F.broadcast(ends), "dest_router", "left")
    arrived = (F.col("enqueued_events") > 0) | (F.col("consumed_events") > 0)
    waiting = F.col("made_time") > F.col("dest_available_until") - F.lit(grace_s)
    lost = F.when(F.col("stored"), F.lit("lost")).otherwise(F.lit("lost-non-persistent"))
    subscription_fate = (
        F.when(F.col("consumed_events") > 0, F.lit("consumed"))
        .when(F.col("expired_events") > 0, F.lit("expired"))
        .when(F.col("dropped_events") > 0, F.lit("dropped"))
        .when(F.col("enqueued_events") > 0, F.lit("held"))
        .when(waiting, F.lit("in-flight"))
        .otherwise(lost))
    link_fate = (
        F.when(F.col("fanned_events") > 0, F.lit("fanned-out"))
        .when(F.col("expired_events") > 0, F.lit("expired"))
        .when(arrived, F.lit("arrived"))
        .when(F.col("dead_lettered_events") > 0, F.lit("dead-lettered"))
        .when(F.col("dropped_events") > 0, F.lit("dropped"))
        .when(F.col("dest_available_until").isNull(), F.lit("unobserved"))
        .when(waiting, F.lit("in-flight"))
        .otherwise(lost))
    times = F.when(F.col("kind") == LINK,
                   F.greatest("fanned_events", "enqueued_events")
                   ).otherwise(F.greatest("enqueued_events", "consumed_events"))
    return base.select(
        "copy_id", "kind", "publication", "topic", "router", "queue", "hop", "targets",
        "dest_router", "durable", "stored",
        F.when(F.col("kind") == LINK, link_fate).otherwise(subscription_fate).alias("fate"),
        (times > 1).alias("duplicated"),
        F.greatest(times - 1, F.lit(0)).alias("extra_copies"),
        "made_events", "made_time", "enqueued_events", "consumed_events", "fanned_events",
        "forwarded_events", "duplicates_dropped", "drop_reason",
        F.coalesce(F.col("last_forwarded")["peer"], F.col("router")).alias("last_held_by"),
        "last_time",
    )


# -- durable subscriptions --------------------------------------------------------


def subscription_periods(events: DataFrame) -> DataFrame:
    """
    The periods of every durable subscription the logs name (the module
    docstring): C{router}, C{queue}, C{period} (0, 1, ...), C{since} and
    C{until} (null: before the logs, and not ended), C{exists},
    C{pattern}, C{ended_by} (C{replaced}, C{forgotten} or null), and
    C{inclusive}, C{next_inclusive}: whether a copy made at C{since}
    (C{until}) counts in it (a subscribe's period takes what its router
    made at its instant, the period before a forget does).

    @param events: the events that are not about a message
        (L{meshroute.audit.views.other_events}).
    """
    subscribed = is_event(S.TOPIC_SUBSCRIBED)
    changes = events.where((subscribed | is_event(S.TOPIC_UNSUBSCRIBED))
                           & (F.col("kind") == DURABLE) & F.col("queue").isNotNull())
    order = Window.partitionBy("router", "queue").orderBy("time", "rid")
    made = subscribed & ~F.coalesce(F.col("replaced"), F.lit(False))
    numbered = changes.select(
        "router", "queue", "pattern", F.col("time").alias("since"),
        subscribed.alias("inclusive"),
        F.row_number().over(order).alias("period"),
        F.lead("time").over(order).alias("until"),
        F.lead(F.col("event")).over(order).alias("_next"),
        F.lead(F.coalesce(F.col("replaced"), F.lit(False))).over(order).alias("_replaces"),
        F.when(F.row_number().over(order) == 1, made).alias("_made_first"),
    )
    ended_by = (F.when(F.col("_next") == S.TOPIC_UNSUBSCRIBED, F.lit("forgotten"))
                .when(F.col("_replaces"), F.lit("replaced")))
    later = numbered.select(
        "router", "queue", "period", "since", "until", F.col("inclusive").alias("exists"),
        F.when(F.col("inclusive"), F.col("pattern")).alias("pattern"),
        F.when(F.col("inclusive"), ended_by).alias("ended_by"), "inclusive",
        (F.col("_next") == S.TOPIC_SUBSCRIBED).alias("next_inclusive"))
    first = numbered.where(F.col("period") == 1).select(
        "router", "queue", F.lit(0).alias("period"), F.lit(None).cast("double").alias("since"),
        F.col("since").alias("until"), (~F.col("_made_first")).alias("exists"),
        F.lit(None).cast("string").alias("pattern"),
        F.when(~F.col("_made_first"),
               F.when(F.col("inclusive"), F.lit("replaced")).otherwise(F.lit("forgotten"))
               ).alias("ended_by"),
        F.lit(False).alias("inclusive"), F.col("inclusive").alias("next_inclusive"))
    return later.unionByName(first)


def with_period(fates: DataFrame, periods: DataFrame) -> DataFrame:
    """
    The copies of durable subscriptions of C{fates}, each with the
    C{period} of its subscription it counts in (L{subscription_periods};
    0 for a subscription the logs show no change of).
    """
    copies = fates.where(F.col("durable"))
    bounds = periods.select(F.col("router").alias("_router"), F.col("queue").alias("_queue"),
                            F.col("period").alias("_period"), "since", "until", "inclusive",
                            "next_inclusive")
    t = F.col("made_time")
    inside = ((F.col("router") == F.col("_router")) & (F.col("queue") == F.col("_queue"))
              & (F.col("since").isNull() | (t > F.col("since"))
                 | ((t == F.col("since")) & F.col("inclusive")))
              & (F.col("until").isNull() | (t < F.col("until"))
                 | ((t == F.col("until")) & ~F.col("next_inclusive"))))
    joined = copies.join(F.broadcast(bounds), inside, "left")
    return joined.withColumn("period", F.coalesce(F.col("_period"), F.lit(0))).drop(
        "_router", "_queue", "_period", "since", "until", "inclusive", "next_inclusive")


def _fates(*names: str) -> list[Column]:
    """
    The copies of each fate of C{names}, each a column named for it.
    """
    return [count_if(F.col("fate") == name).alias(name.replace("-", "_")) for name in names]


def _doubled_and_unexplained() -> list[Column]:
    return [count_if(F.col("duplicated")).alias("duplicated"),
            F.sum("extra_copies").alias("duplicate_copies"),
            count_if(F.col("made_events") == 0).alias("without_fan_out")]


def subscription_counts(copies: DataFrame) -> DataFrame:
    """
    Per durable subscription period (L{PERIOD}), its copies (L{with_period})
    counted by fate: counts that add, so the streaming audit can sum them.
    """
    return copies.groupBy(*PERIOD).agg(
        F.count(F.lit(1)).alias("copies"),
        count_if(F.col("made_events") > 0).alias("due"),
        count_if((F.col("enqueued_events") > 0) | (F.col("consumed_events") > 0)
                  ).alias("enqueued"),
        *_fates("consumed", "held", "expired", "dropped", "in-flight", "lost",
                "lost-non-persistent"),
        *_doubled_and_unexplained(),
    )


def pattern_regex(pattern: Column) -> Column:
    """
    A regular expression that C{"." + topic} matches when C{topic}
    matches the topic pattern C{pattern} (C{*} one word, C{#} zero or
    more: meshroute.topics.patterns), built in Spark SQL (no UDF).
    """
    words = F.split(pattern, "[.]")
    parts = F.transform(words, lambda w: F.when(w == "*", F.lit("[.][^.]+"))
                        .when(w == "#", F.lit("([.][^.]+)*"))
                        .otherwise(F.concat(F.lit("[.]"), w)))
    return F.concat(F.lit("^"), F.array_join(parts, ""), F.lit("$"))


def missed(problems: DataFrame, periods: DataFrame) -> DataFrame:
    """
    Per durable subscription period (L{PERIOD}), C{missed}: the
    persistent copies lost on the way toward its router (L{problems}'
    link copies C{lost}, by their C{targets}) of publications whose topic
    matches its pattern, made while it existed (the module docstring).
    """
    lost = problems.where((F.col("kind") == LINK) & (F.col("fate") == "lost")).select(
        F.explode("targets").alias("_router"), "topic", "made_time")
    known = periods.where(F.col("exists") & F.col("pattern").isNotNull()).select(
        *PERIOD, "since", "until", pattern_regex(F.col("pattern")).alias("_regex"))
    t = F.col("made_time")
    inside = ((F.col("router") == F.col("_router"))
              & (F.col("since").isNull() | (t >= F.col("since")))
              & (F.col("until").isNull() | (t < F.col("until")))
              & F.expr("concat('.', topic) rlike _regex"))
    return lost.join(F.broadcast(known), inside).groupBy(*PERIOD).agg(
        F.count(F.lit(1)).alias("missed"))


def subscriptions(periods: DataFrame, counts: DataFrame, problems: DataFrame) -> DataFrame:
    """
    One row per durable subscription period that it existed in or that
    has copies: its router, queue, client id, name and pattern, when the
    period began and ended and how, and its copies by fate: what it held
    at the end C{waiting} (the period has not ended) or C{deleted} (with
    it), C{outside} (copies in a period it did not exist in), C{missed}
    (L{missed}).

    @param counts: L{subscription_counts} (or a sum of them).
    @param problems: L{problems}.
    """
    view = periods.join(counts, PERIOD, "full").join(missed(problems, periods), PERIOD, "left")
    view = view.where(F.coalesce(F.col("exists"), F.lit(True)) | (F.col("copies") > 0))
    names = F.split(F.col("queue"), ":")
    held = F.coalesce(F.col("held"), F.lit(0))
    ended = F.col("until").isNotNull()
    exists = F.coalesce(F.col("exists"), F.lit(True))
    counted = {name: F.coalesce(F.col(name), F.lit(0)) for name in SUBSCRIPTION_COUNTS
               if name not in ("waiting", "deleted", "outside")}
    counted["waiting"] = F.when(ended, F.lit(0)).otherwise(held)
    counted["deleted"] = F.when(ended, held).otherwise(F.lit(0))
    counted["outside"] = F.when(exists, F.lit(0)).otherwise(F.coalesce(F.col("copies"),
                                                                      F.lit(0)))
    return view.select(
        "router", "queue", F.get(names, 1).alias("client_id"), F.get(names, 2).alias("name"),
        "pattern", "period", "since", "until", "ended_by", exists.alias("exists"),
        *[counted[name].alias(name) for name in SUBSCRIPTION_COUNTS])


# -- copies between routers, routers ------------------------------------------------


def link_counts(fates: DataFrame) -> DataFrame:
    """
    Per pair of routers (C{router} → C{hop}), the copies from one to the
    other (C{copies}: seen; C{sent}: of them, those its record names)
    counted by fate: counts that add.
    """
    return fates.where(F.col("kind") == LINK).groupBy("router", "hop").agg(
        F.count(F.lit(1)).alias("copies"),
        count_if(F.col("made_events") > 0).alias("sent"),
        *_fates("fanned-out", "arrived", "in-flight", "lost", "lost-non-persistent", "dropped",
                "expired", "dead-lettered", "unobserved"),
        *_doubled_and_unexplained(),
        F.sum("duplicates_dropped").alias("duplicates_dropped"),
    )


def fan_out_counts(events: DataFrame) -> DataFrame:
    """
    Per router, its fan-outs' records: C{publications} (of its own
    publishers' publications) and C{copies_taken} (of copies its
    neighbours sent): counts that add.
    """
    own = F.col("msg_id") == F.col("publication")
    return fan_outs(events).groupBy("router").agg(
        count_if(own).alias("publications"), count_if(~own).alias("copies_taken"))


def router_copy_counts(fates: DataFrame) -> DataFrame:
    """
    Per router, its subscriptions' copies (C{subscription_copies}): the
    durable ones due and consumed, and the non-durable ones by fate,
    drops by reason: counts that add.
    """
    subscription = F.col("kind") == SUBSCRIPTION
    non_durable = subscription & ~F.col("durable")
    dropped = non_durable & (F.col("fate") == "dropped")
    reason = F.col("drop_reason")

    def nd(condition: Column) -> Column:
        return count_if(non_durable & condition)

    return fates.where(subscription).groupBy("router").agg(
        F.count(F.lit(1)).alias("subscription_copies"),
        count_if(F.col("durable") & (F.col("made_events") > 0)).alias("durable_due"),
        count_if(F.col("durable") & (F.col("fate") == "consumed")).alias("durable_consumed"),
        nd(F.col("made_events") > 0).alias("non_durable_due"),
        nd(F.col("fate") == "consumed").alias("non_durable_delivered"),
        count_if(dropped).alias("non_durable_dropped"),
        *[count_if(dropped & (reason == name)).alias(f"non_durable_dropped_{_column(name)}")
          for name in DROP_REASONS],
        count_if(dropped & (reason.isNull() | ~reason.isin(*DROP_REASONS))
                  ).alias("non_durable_dropped_other"),
        nd(F.col("fate") == "expired").alias("non_durable_expired"),
        nd(F.col("fate") == "held").alias("non_durable_waiting"),
        nd(F.col("fate") == "in-flight").alias("non_durable_in_flight"),
        nd(F.col("fate").startswith("lost")).alias("non_durable_lost"),
        nd(F.col("duplicated")).alias("non_durable_duplicated"),
        nd(F.col("made_events") == 0).alias("non_durable_without_fan_out"),
    )


def _column(reason: str) -> str:
    return reason.replace("-", "_")


def topic_routers(fan_outs_per_router: DataFrame, copies: DataFrame, links: DataFrame
                  ) -> DataFrame:
    """
    One row per router with topic traffic: L{fan_out_counts},
    L{router_copy_counts} and C{copies_sent} (L{link_counts}' C{sent}
    from it), 0 where it has none.
    """
    sent = links.groupBy("router").agg(F.sum("sent").alias("copies_sent"))
    view = fan_outs_per_router.join(copies, "router", "full").join(sent, "router", "full")
    return view.select("router", *[F.coalesce(F.col(name), F.lit(0)).alias(name)
                                   for name in view.columns if name != "router"])


def problems(fates: DataFrame) -> DataFrame:
    """
    The copies an operator must look at: lost (either kind) or doubled.
    """
    return fates.where(F.col("fate").isin("lost", "lost-non-persistent") | F.col("duplicated")
                       ).select(
        "copy_id", "kind", "publication", "topic", "router", "queue", "hop", "targets",
        "durable", "fate", "duplicated", "made_time", "made_events", "enqueued_events",
        "consumed_events", "fanned_events", "last_held_by", "last_time")


# -- the tables ------------------------------------------------------------------


def tables_of(periods: DataFrame, per_period: DataFrame, links: DataFrame,
              fan_outs_per_router: DataFrame, copies_per_router: DataFrame,
              found: DataFrame) -> dict:
    """
    The topic tables from their counts, which the batch audit computes
    from every copy and the streaming audit sums: C{subscriptions},
    C{topic_links}, C{topic_routers}, C{topic_problems}.

    @param periods: L{subscription_periods}.
    @param per_period: L{subscription_counts}.
    @param links: L{link_counts}.
    @param fan_outs_per_router: L{fan_out_counts}.
    @param copies_per_router: L{router_copy_counts}.
    @param found: L{problems}.
    """
    return {
        "subscriptions": subscriptions(periods, per_period, found),
        "topic_links": links,
        "topic_routers": topic_routers(fan_outs_per_router, copies_per_router, links),
        "topic_problems": found,
    }


def topic_tables(events: DataFrame, others: DataFrame, fates: DataFrame) -> dict:
    """
    L{tables_of} every copy of C{fates} (L{copy_fates}) and the fan-out
    records of C{events}.

    @param others: the events that are not about a message
        (L{meshroute.audit.views.other_events}).
    """
    periods = subscription_periods(others)
    return tables_of(periods, subscription_counts(with_period(fates, periods)),
                     link_counts(fates), fan_out_counts(events), router_copy_counts(fates),
                     problems(fates))


def empty_like(spark, tables: dict) -> dict:
    """
    C{tables} (L{tables_of}), empty: those of logs without an event
    about topics, written without computing a view.
    """
    return {name: spark.createDataFrame([], frame.schema) for name, frame in tables.items()}
