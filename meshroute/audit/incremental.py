"""
The streaming audit's state: what it keeps between micro-batches so that
each one aggregates only its new events and the messages still open,
and still ends with the batch audit's figures.

Every table lives under C{OUT/state/NAME/batch=N} (Parquet), written by
micro-batch N, so a batch run again after a crash overwrites its own
output; a batch reads the state of the newest batch before it that wrote
one (L{StateTables.previous}).  Two kinds of table:

 - appended, one slice per batch, read whole: C{files} (the file splits
   read, L{meshroute.audit.read.blocks}), C{malformed} (the malformed
   lines, located), C{events} (every event that is not a C{message.*}:
   router, link, session, security and HA events, few, from which the
   link, rejection, denial and HA views are recomputed each batch),
   C{settled} (the per-message partial aggregates of the messages
   settled in that batch, read only through a join with the batch's
   message ids) and C{closed_windows} (the latency windows closed in
   that batch, L{closing}: their final L{meshroute.audit.views.windows_of}
   rows and their latency value counts; and the closed windows a batch
   reopened, C{closed} false; the newest slice of a window wins);
 - cumulative, rewritten by each batch: C{routers} and C{boots} (their
   counts add and their times combine by min/max), C{open} (the partial
   aggregates of the messages not settled yet), and for the settled
   messages: C{routes} (per route, L{meshroute.audit.views.message_counts}),
   C{latency} (per route, the count of each latency value), C{windows}
   (per route and window still open, the same) and C{problems} (their
   L{meshroute.audit.views.message_problems} rows); of each, a batch
   keeps its own and the one before it, the one a batch run again after
   a crash reads (L{StateTables.prune}), so they take the room of two
   tables, however long the run.

A message settles when its fate no longer waits on time, i.e. it is
neither in flight nor unobserved nor without a known destination, and
its destination's log (the event-time watermark) has gone on for the
in-flight grace past its last event.  Its fate can then change only
through a new event of its own (a late duplicate enqueue, an expiry):
the batch that brings one takes the message's partial from C{settled}
back into the open state and subtracts what it had counted, so the
figures stay exactly the batch audit's.

A latency window (per route, of enqueue time) closes when its
destination's watermark has gone on for the grace past its end and no
open message falls in it (L{closing}): its value counts leave C{windows}
for C{closed_windows} with its final row, which the output takes as it
is.  Only the messages a batch brings or keeps open can change a
window's counts, so the windows a batch reopens are those its messages
fall in, before and after their new events, that are closed: a message
counted in a closed window that reopens (a late event of its own: its
consumption or a duplicate enqueue after it settled, a late accept that
changes its latency or route) reopens the window, whose counts go back
into C{windows} before the message's are subtracted; the window closes
again once the rule holds.  The figures are thus exact whatever the
rule; the watermark makes reopening rare.

What a micro-batch aggregates is its own lines, the open messages
(bounded by the messages accepted within the grace of their
destination's watermark, plus the few whose destination the logs never
show), the routes' latency values (at most one row per distinct
microsecond per route, and per route and open window: the windows
within the grace of their destination's watermark or holding an open
message) and the non-message events; C{settled} and C{closed_windows}
grow with the run but are read only through a join with the batch's
message ids and windows, except for the final rows of the closed
windows, which the output copies (one row per window).

Topic copies are folded alike, per copy id, with tables of their own
(L{meshroute.audit.topic_state}); the tables and the fold per id both
use are in L{meshroute.audit.state}.

Boots: a batch's events are counted in the boot their router was in at
their time, from every C{router.started} read so far; this holds as
long as a router's files are read in order (docs/events.md, "Streaming
audit").
"""

from dataclasses import dataclass

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from meshroute.audit import read, topic_state, topic_views, views
from meshroute.audit.state import KEEP, StateTables, added, combine, fold, newest
from meshroute.audit.tables import input_names, small_views

#: The columns of L{meshroute.audit.views.message_counts} that are sums
#: (null over no message) rather than counts (0 over no message).
SUMMED = ("duplicate_copies", "duplicates_dropped")


def partials_combiners(partials: DataFrame) -> dict:
    """
    How L{meshroute.audit.views.message_partials} columns combine
    (L{meshroute.audit.views.PARTIALS_ADD}, L{meshroute.audit.views.PARTIALS_MIN},
    the rest the max).
    """
    return {name: (F.min if name in views.PARTIALS_MIN else F.max)
            for name in partials.columns if name not in views.PARTIALS_ADD}


#: A latency window in the state: its route, the router whose log closes
#: it (the destination's, L{meshroute.audit.views.fates_of}'s
#: C{dest_router}, a function of C{dest}) and its start.
WINDOW = [*views.ROUTE, "dest_router", "window_start"]


def windowed(fates: DataFrame, window_s: float) -> DataFrame:
    """
    C{fates} with the C{window_start} of the latency window of
    C{window_s} seconds their enqueue falls in (null when not enqueued).
    """
    return fates.withColumn("window_start", views.window_start(window_s))


def windows_entered(fates: DataFrame, window_s: float) -> DataFrame:
    """
    The latency windows (L{WINDOW}) the enqueued messages of C{fates}
    fall in.
    """
    return (windowed(fates, window_s).where(F.col("window_start").isNotNull())
            .select(*WINDOW).distinct())


def closing(windows: DataFrame, until: DataFrame, open_windows: DataFrame, window_s: float,
            grace_s: float) -> DataFrame:
    """
    The windows (L{WINDOW}) of C{windows} (value counts per window) that
    no message can still enter, so that their figures are final: their
    destination's log (its event-time watermark C{_until}, per
    C{dest_router} in C{until}) has gone on for C{grace_s} past their
    end, as for a message to settle, and no message of C{open_windows}
    (the windows of the messages left open) falls in them.  A message
    enters a window with its first enqueue, which its destination logs,
    and that log is read in order: once the watermark is past the
    window, only a message counted in it can change it, through a late
    event of its own, and that reopens the window (L{advance}).
    """
    passed = F.col("window_start") + F.lit(window_s) <= F.col("_until") - F.lit(grace_s)
    ends = windows.select(*WINDOW).distinct().join(F.broadcast(until), "dest_router")
    return ends.where(passed).select(*WINDOW).join(open_windows, WINDOW, "left_anti")


def closed_rows(counts: DataFrame, window_s: float) -> DataFrame:
    """
    What C{closed_windows} keeps of the windows closing with value counts
    C{counts}: their final L{meshroute.audit.views.windows_of} rows, and
    their C{counts} (C{latency_ms}, C{count} pairs) to reopen them with.
    """
    pairs = counts.groupBy(*WINDOW).agg(
        F.collect_list(F.struct("latency_ms", "count")).alias("counts"))
    return (views.windows_of(counts, window_s).join(pairs, [*views.ROUTE, "window_start"])
            .withColumn("closed", F.lit(True)))


@dataclass
class Contributions:
    """
    What a set of messages adds to the route figures.
    """

    counts: DataFrame
    latency: DataFrame
    windows: DataFrame

    @classmethod
    def of(cls, fates: DataFrame, window_s: float) -> "Contributions":
        # "messages": a route whose every message was taken back is no route.
        counts = views.message_counts(fates, views.ROUTE, F.count(F.lit(1)).alias("messages"))
        return cls(counts=counts,
                   latency=views.value_counts(fates, views.ROUTE),
                   windows=views.value_counts(windowed(fates, window_s), WINDOW))

    def plus(self, other: "Contributions", sign: int = 1) -> "Contributions":
        some = F.col("count") > 0
        return Contributions(
            counts=added(self.counts, other.counts, views.ROUTE, sign, F.col("messages") > 0),
            latency=added(self.latency, other.latency, [*views.ROUTE, "latency_ms"], sign, some),
            windows=added(self.windows, other.windows, [*WINDOW, "latency_ms"], sign, some))


@dataclass
class BatchViews:
    """
    What the streaming audit writes after a micro-batch: the L{TABLES}
    frames and the totals, as L{meshroute.audit.tables.write_views} takes them.
    """

    frames: dict
    totals: DataFrame
    ha_totals: DataFrame
    split_rows: list[dict]
    lines: int
    names: dict[str, str]
    cached: list


def advance(spark, parsed: DataFrame, batch_id: int, settings, progress) -> BatchViews:
    """
    Fold micro-batch C{batch_id}'s lines (L{meshroute.audit.read.parse_lines},
    kept) into the state under C{settings.out}, and return the views of
    everything read so far.

    @raise meshroute.audit.inputs.AuditInputError: when no line read so
        far is an event (the state is kept all the same).
    """
    state = StateTables(spark, settings.out)
    previous = state.previous(batch_id)
    parsed = parsed.persist(KEEP)
    cached = [parsed]

    def keep(frame):
        frame = frame.persist(KEEP)
        cached.append(frame)
        return frame

    splits = keep(read.blocks(parsed))
    state.write("files", batch_id, splits)
    state.write("malformed", batch_id, read.malformed_lines(parsed, splits))
    events = read.events_of(parsed)
    message_events = events.where(F.col("event").startswith("message."))
    state.write("events", batch_id, views.other_events(events))

    all_splits = keep(state.read_all("files", batch_id + 1).drop("batch"))
    split_rows = [row.asDict() for row in all_splits.collect()]
    lines = sum(row["lines"] for row in split_rows)
    small = keep(state.read_all("events", batch_id + 1).drop("batch"))
    starts = keep(views.boot_starts(small))

    def cumulative(name, new, keys, combiners):
        if previous is not None:
            new = new.unionByName(state.read(name, previous))
        merged = combine(new, keys, combiners)
        state.replace(name, batch_id, merged)
        return keep(state.read(name, batch_id))

    router_counts = cumulative("routers", views.router_counts(events), ["router"],
                               views.ROUTER_COUNTS_COMBINE)
    router_view = keep(views.router_ends(router_counts, None))
    boots = cumulative("boots", views.boots(events, starts), ["router", "boot"],
                       {"first_time": F.min, "last_time": F.max, "clean_stop": F.max,
                        "version": F.max, "pid": F.max})

    grace = settings.in_flight_grace_s
    new_partials = views.message_partials(message_events)
    until = router_view.select(F.col("router").alias("dest_router"),
                               F.col("available_until").alias("_until"))
    folded = fold(state, previous, batch_id, new_partials, "msg_id",
                  partials_combiners(new_partials),
                  lambda merged: views.fates_of(merged, router_view, grace), until, grace, keep,
                  ("open", "settled"))
    fates, reopened = folded.fates, folded.reopened
    settled_fates = views.fates_of(state.read("settled", batch_id), router_view, grace)

    window_s = settings.latency_window_s
    totals = Contributions.of(settled_fates, window_s)
    problems = views.message_problems(settled_fates)
    # The windows whose counts this batch can change: those of its
    # messages, and those its reopened messages were counted in.
    changing = windows_entered(fates, window_s)
    if reopened is not None:
        reopened_fates = views.fates_of(reopened, router_view, grace)
        changing = changing.unionByName(windows_entered(reopened_fates, window_s))
    closed_before = state.read_all("closed_windows", batch_id)
    back = None
    if closed_before is not None:
        back = keep(newest(closed_before.join(changing, WINDOW, "left_semi"), WINDOW)
                    .where(F.col("closed")))
    if previous is not None:
        earlier_windows = state.read("windows", previous)
        if back is not None:
            earlier_windows = earlier_windows.unionByName(
                back.select(*WINDOW, F.inline("counts")))
        totals = totals.plus(Contributions(state.read("routes", previous),
                                           state.read("latency", previous),
                                           earlier_windows))
        earlier_problems = state.read("problems", previous)
        if reopened is not None:
            earlier_problems = earlier_problems.join(reopened.select("msg_id"), "msg_id",
                                                     "left_anti")
        problems = problems.unionByName(earlier_problems)
    if reopened is not None:
        totals = totals.plus(Contributions.of(reopened_fates, window_s), sign=-1)
    still_open = folded.still_open
    open_windows = windows_entered(fates.join(still_open.select("msg_id"), "msg_id",
                                              "left_semi"), window_s)
    windows = keep(totals.windows)
    closes = keep(closing(windows, until, open_windows, window_s, grace))
    closed_slice = closed_rows(windows.join(closes, WINDOW, "left_semi"), window_s)
    if back is not None:
        # Reopened and not closing again: open, its closed rows hidden.
        back_open = back.select(*WINDOW).join(closes, WINDOW, "left_anti")
        closed_slice = closed_slice.unionByName(back_open.withColumn("closed", F.lit(False)),
                                                allowMissingColumns=True)
    state.replace("routes", batch_id, totals.counts)
    state.replace("latency", batch_id, totals.latency)
    state.replace("windows", batch_id, windows.join(closes, WINDOW, "left_anti"))
    state.write("closed_windows", batch_id, closed_slice)
    state.replace("problems", batch_id, problems)
    if any(row["topic_events"] for row in split_rows):
        topics = topic_state.advance(state, batch_id, events, small, router_view, until, grace,
                                     keep)
    else:
        topics = topic_views.empty_like(spark, topic_views.topic_tables(
            events, small, topic_views.copy_fates(topic_views.copy_partials(events),
                                                  router_view, grace)))
    state.replace("open", batch_id, still_open)

    settled = Contributions(state.read("routes", batch_id), state.read("latency", batch_id),
                            state.read("windows", batch_id))
    open_fates = keep(views.fates_of(state.read("open", batch_id), router_view, grace))
    everything = settled.plus(Contributions.of(open_fates, window_s))
    counts = keep(everything.counts.drop("messages"))
    latency = keep(everything.latency)
    frames = {"routers": router_view, "boots": boots}
    frames["routes"] = views.with_latency(counts, latency, views.ROUTE)
    frames["latency_histogram"] = views.histogram_of(latency)
    open_view = views.windows_of(everything.windows, window_s)
    closed = newest(state.read_all("closed_windows", batch_id + 1), WINDOW).where(
        F.col("closed"))
    frames["latency_windows"] = open_view.unionByName(closed.select(*open_view.columns))
    frames["message_problems"] = views.message_problems(open_fates).unionByName(
        state.read("problems", batch_id))
    total_counts = counts.agg(*[
        (F.sum(name) if name in SUMMED else F.coalesce(F.sum(name), F.lit(0))).alias(name)
        for name in counts.columns if name not in views.ROUTE])
    total_latency = latency.groupBy("latency_ms").agg(F.sum("count").alias("count"))
    try:
        names = input_names(split_rows, lines, progress)
    except Exception:
        for frame in cached:
            frame.unpersist()
        raise
    malformed = state.read_all("malformed", batch_id + 1).drop("batch")
    frames.update(small_views(small, starts, boots, all_splits, malformed, names, settings))
    state.prune(batch_id)
    frames.update(topics)
    return BatchViews(frames=frames, totals=views.with_latency(total_counts, total_latency, []),
                      ha_totals=views.ha_totals(small), split_rows=split_rows, lines=lines,
                      names=names, cached=cached)
