"""
What a run must show, whatever the schedule: the promises of
docs/routing.md and docs/client-protocol.md, checked on an L{Outcome}.

Each check returns L{Violation}s; L{check} runs them all.  The one
allowance: a router restarted with an empty data dir lost what its store
held at that moment (L{Outcome.lost_with_disk}, read from the store just
before the wipe), and its queues start again, so a message may be
enqueued (and delivered) once per incarnation of its destination's store.
Nothing else is excused.
"""

from collections import defaultdict
from dataclasses import dataclass

from meshroute.messages import TOPIC_PREFIX, TOPIC_QUEUE
from meshroute.topics.patterns import matches, parse_pattern, parse_topic

#: The order promise checked: C{"between-failures"}, the one
#: docs/routing.md ("What order is promised") makes: one producer's
#: confirmed persistent messages to one address are enqueued in the order
#: it sent them, except two messages between the send of the first and the
#: enqueue of the second of which some link of the mesh closed.
#: C{"producer"}: the same without the exception (stricter than the
#: promise: useful to see what reroutes do).  C{None}: no order is
#: checked.
ORDER_PROMISE = "between-failures"
ORDER_PROMISES = ("producer", "between-failures")


@dataclass(frozen=True)
class Violation:
    """
    One broken promise: C{invariant} names it, C{detail} says where.
    """

    invariant: str
    detail: str

    def __str__(self) -> str:
        return f"{self.invariant}: {self.detail}"


def _kind(attempt) -> str:
    return "persistent" if attempt.persistent else "non-persistent"


def _dispositions(outcome) -> dict:
    """
    C{msg_id -> [(router, epoch, position, event)]}: where each message
    ended up (enqueued at its destination or dead-lettered).
    """
    found = defaultdict(list)
    for position, (router, epoch, record) in enumerate(outcome.events):
        if record["event"] in ("message.enqueued", "message.dead-lettered"):
            found[record["msg_id"]].append((router, epoch, position, record["event"]))
    return found


def exactly_once(outcome) -> list[Violation]:
    """
    Every confirmed persistent message is enqueued exactly once at its
    destination (or dead-lettered once); no message is enqueued twice in
    one incarnation of a store; a refused send is never enqueued; sends
    with one duplicate id make one message per incarnation of the origin's
    store, and each confirmation of that id names it.
    """
    violations = []
    found = _dispositions(outcome)
    for msg_id, places in found.items():
        if ">" in msg_id:
            # A publication's copy between routers: a reroute may hand one
            # to two routers (each takes it into its $topic), whose copies
            # for a subscription are one (docs/topics.md); topic_promises
            # checks what subscriptions get.
            continue
        incarnations = [(router, epoch) for router, epoch, _, _ in places]
        if len(set(incarnations)) != len(incarnations) or len({r for r, _ in incarnations}) > 1:
            violations.append(Violation("enqueued-twice", f"{msg_id}: {places}"))
    accepted_epoch = {record["msg_id"]: epoch for router, epoch, record in outcome.events
                      if record["event"] == "message.accepted"}
    groups = defaultdict(list)
    for attempt in outcome.attempts:
        if attempt.duplicate_id:
            groups[(attempt.producer, attempt.duplicate_id)].append(attempt)
        if not attempt.persistent:
            continue
        if attempt.outcome == "confirmed":
            if not found.get(attempt.msg_id) and attempt.msg_id not in outcome.lost_with_disk:
                violations.append(Violation(
                    "lost", f"{attempt.key} ({attempt.msg_id}) confirmed to {attempt.producer} "
                    f"for {attempt.address} at t={attempt.sent_at:.2f}, never enqueued"))
    by_body = defaultdict(set)
    for delivery in outcome.deliveries:
        # A subscription's copy of a publication is PUBLICATION/QUEUE.
        by_body[delivery.body.decode()].add(delivery.msg_id.split("/", 1)[0])
    for attempt in outcome.attempts:
        if attempt.outcome not in (None, "confirmed", "unblocked", "internal-error"):
            # Refused: no message of that key may exist, unless another
            # attempt with the same duplicate id was accepted.  (A send the
            # router failed, internal-error, is not refused: one sent early
            # may arrive, as an unconfirmed send may.)
            if not attempt.duplicate_id and by_body.get(attempt.key):
                violations.append(Violation(
                    "refused-but-enqueued",
                    f"{attempt.key} refused ({attempt.outcome}) but delivered"))
    for (producer, duplicate_id), attempts in groups.items():
        ids = {a.msg_id for a in attempts if a.outcome == "confirmed"}
        made = by_body.get(attempts[0].key, set()) | ids
        per_epoch = defaultdict(set)
        for msg_id in made:
            per_epoch[accepted_epoch.get(msg_id)].add(msg_id)
        for epoch, msg_ids in per_epoch.items():
            if len(msg_ids) > 1:
                violations.append(Violation(
                    "duplicate-id-accepted-twice",
                    f"{duplicate_id} of {producer} made {sorted(msg_ids)} in one store"))
        for later in attempts:
            earlier = [a for a in attempts if a.outcome == "confirmed"
                       and a.sent_at <= later.sent_at and a is not later and a.epoch == later.epoch]
            if earlier and later.outcome not in ("confirmed", "unblocked", None):
                violations.append(Violation(
                    "duplicate-id-refused",
                    f"{duplicate_id} of {producer} ({_kind(later)} to {later.address}) was "
                    f"confirmed as {earlier[0].msg_id}, a retry at t={later.sent_at:.2f} was "
                    f"refused with {later.outcome}"))
    return violations


def consumed_once(outcome) -> list[Violation]:
    """
    A message is consumed (deleted from its queue) at most once per
    incarnation of its store, and only after a consumer acknowledged it;
    a message delivered again is flagged redelivered; a non-persistent
    message reaches an application at most once unflagged.
    """
    violations = []
    consumed = defaultdict(int)
    for router, epoch, record in outcome.events:
        # What the topic fan-out takes from $topic it copies: no client's.
        if record["event"] == "message.consumed" and record["queue"] != TOPIC_QUEUE:
            consumed[(record["msg_id"], router, epoch)] += 1
    acked = {d.msg_id for d in outcome.deliveries if d.acked}
    for (msg_id, router, epoch), count in consumed.items():
        if count > 1:
            violations.append(Violation("consumed-twice", f"{msg_id} at {router}: {count} times"))
        if msg_id not in acked:
            violations.append(Violation("consumed-unacknowledged", f"{msg_id} at {router}"))
    seen = defaultdict(list)
    for delivery in outcome.deliveries:
        seen[(delivery.msg_id, delivery.router, delivery.epoch)].append(delivery)
    for (msg_id, router, epoch), deliveries in seen.items():
        for delivery in deliveries[1:]:
            if not delivery.redelivered:
                violations.append(Violation(
                    "redelivered-unflagged",
                    f"{msg_id} ({delivery.body.decode()}) delivered again to "
                    f"{delivery.consumer} at t={delivery.at:.2f} with redelivered=false "
                    f"(first to {deliveries[0].consumer} at t={deliveries[0].at:.2f})"))
                break
    return violations


def producer_order(outcome, promise: str | None = ORDER_PROMISE) -> list[Violation]:
    """
    The order promise (L{ORDER_PROMISE}): among one producer's persistent
    messages to one address that were confirmed at the first attempt, the
    destination enqueued a later-sent one before an earlier-sent one.
    Messages whose send was unblocked (and retried) have no place in the
    order, and messages enqueued in different incarnations of the
    destination's store are not compared.
    """
    if promise is None:
        return []
    unblocked = {a.key for a in outcome.attempts if a.outcome == "unblocked"}
    position = {}
    closes = []
    for index, (router, epoch, record) in enumerate(outcome.events):
        if record["event"] == "message.enqueued":
            position.setdefault(record["msg_id"], (epoch, index, record["time"]))
        elif record["event"] == "link.closed":
            closes.append(record["time"])
    streams = defaultdict(list)
    for attempt in outcome.attempts:
        if (attempt.persistent and attempt.outcome == "confirmed" and not attempt.resent
                and attempt.key not in unblocked and attempt.msg_id in position):
            streams[(attempt.producer, attempt.address)].append(attempt)
    violations = []
    for (producer, address), attempts in streams.items():
        attempts.sort(key=lambda a: a.order)
        latest = None
        for attempt in attempts:
            epoch, index, enqueued_at = position[attempt.msg_id]
            if latest is not None and latest[0] == epoch and index < latest[1]:
                before = latest[2]
                sent_at = outcome.start + before.sent_at
                if promise == "between-failures" and any(
                        sent_at <= t <= enqueued_at for t in closes):
                    latest = (epoch, index, attempt)
                    continue
                violations.append(Violation(
                    "order", f"{producer} sent {before.key} before {attempt.key} to {address}; "
                    f"{attempt.key} was enqueued first"))
                break
            latest = (epoch, index, attempt)
    return violations


def _other_incarnation(one, other) -> bool:
    """
    Whether C{one} and C{other}, the C{(router, epoch)} that accepted two
    publications, are two incarnations of one router's store.
    """
    return one is not None and other is not None and one[0] == other[0] and one[1] != other[1]


def topic_promises(outcome) -> list[Violation]:
    """
    What docs/topics.md promises a subscription: a durable one gets every
    confirmed persistent publication it was promised (it existed when
    the publisher's router fanned the publication out, and that router
    held its router's interest at a version that included it, or was its
    own router) exactly once (checked for those
    consumed to the end of the run); no subscription gets
    a publication twice unflagged, nor anything after its unsubscribe
    was answered; and, once the mesh healed, every router holds every
    reachable router's interest as that router advertises it, and the
    same retained messages as every other.
    Excused: a durable subscription whose router was restarted with an
    empty data dir (it went with the disk), a publication any copy
    of which went with a disk or was dropped for C{max-backlog}, and,
    as in L{exactly_once}, one body twice as two publications that
    different incarnations of their origin's store accepted (a send
    retried with its duplicate id after the first was accepted and the
    store, the id with it, was wiped).
    """
    violations = [Violation("interest", line) for line in outcome.interest[:3]]
    violations += [Violation("retained", line) for line in outcome.retained[:3]]
    wiped = {router for router, epoch, _ in outcome.events if epoch > 0}
    lost = set(outcome.lost_with_disk)
    # Copies a router dropped, max-backlog messages waiting already for
    # the router they were for (docs/topics.md bounds the promise so).
    lost |= {record["msg_id"] for _, _, record in outcome.events
             if record["event"] == "message.dropped" and record["reason"] == "max-backlog"}
    published = {a.msg_id: a for a in outcome.attempts
                 if a.address.startswith(TOPIC_PREFIX) and a.outcome == "confirmed"}
    # Which incarnation of which store accepted each publication.
    accepted = {}
    for router, epoch, record in outcome.events:
        if record["event"] == "message.accepted":
            accepted.setdefault(record["msg_id"], (router, epoch))
    by_subscriber = defaultdict(list)
    for delivery in outcome.deliveries:
        by_subscriber[delivery.consumer].append(delivery)
    for name, subscription in sorted(outcome.subscriptions.items()):
        deliveries = by_subscriber.get(name, [])
        first = {}
        earlier = defaultdict(list)
        for delivery in deliveries:
            key = delivery.body.decode()
            # A subscription's copy is PUBLICATION/QUEUE@ROUTER, a retained
            # one given again PUBLICATION~MS/QUEUE@ROUTER.
            publication = delivery.msg_id.split("/", 1)[0].split("~", 1)[0]
            incarnation = accepted.get(publication)
            for other, other_publication in earlier[key]:
                if other_publication == publication:
                    if delivery.redelivered:
                        continue
                    how = "unflagged"
                elif _other_incarnation(incarnation, accepted.get(other_publication)):
                    # Accepted again by a new store of its origin: its
                    # duplicate id went with the old one's disk.
                    continue
                else:
                    how = f"as another publication ({other_publication}, {publication})"
                violations.append(Violation(
                    "topic-twice", f"{name} got {key} at t={other.at:.2f} and again, "
                    f"{how}, at t={delivery.at:.2f}"))
                break
            earlier[key].append((delivery, publication))
            first.setdefault(key, delivery.at)
        if subscription.ended_confirmed is not None:
            late = [d for d in deliveries if d.at > subscription.ended_confirmed]
            if late:
                violations.append(Violation(
                    "topic-after-end", f"{name} got {late[0].body.decode()} at "
                    f"t={late[0].at:.2f}, after its unsubscribe was answered at "
                    f"t={subscription.ended_confirmed:.2f}"))
        # A durable subscription detached keeps what it collects where no
        # delivery shows it: only one consumed to the end is checked.
        if (not subscription.durable or not subscription.confirmed
                or subscription.ended is not None or subscription.router in wiped):
            continue
        pattern = parse_pattern(subscription.pattern)
        version, since = subscription.versions[0], subscription.confirmed[0]
        for msg_id, (origin, at, versions) in outcome.fanned.items():
            attempt = published.get(msg_id)
            if attempt is None or not attempt.persistent or msg_id in lost:
                continue
            if not matches(pattern, parse_topic(attempt.address[len(TOPIC_PREFIX):])):
                continue
            # A subscription whose pattern its router advertised already
            # (another subscription's) is made under that version: it is
            # promised what was fanned out after it was made, too.
            promised = at >= since and (origin == subscription.router
                                        or versions.get(subscription.router, 0) >= version)
            if not promised or any(held.startswith(msg_id) for held in lost):
                continue
            if attempt.key not in first:
                violations.append(Violation(
                    "topic-lost", f"durable {name} at {subscription.router} ({subscription.pattern}, "
                    f"interest v{version}) never got {attempt.key} ({attempt.address}), fanned "
                    f"out at {origin} at t={at:.2f} holding v{versions.get(subscription.router)}"))
    return violations


def not_stuck(outcome) -> list[Violation]:
    """
    Once every fault healed, everything drained: no backlog, outbox or
    waiting non-persistent message, every queue consumed, every link in
    delivery, every send answered.
    """
    return [Violation("stuck", line) for line in outcome.stuck]


def memory_bounded(outcome) -> list[Violation]:
    return [Violation("memory", line) for line in outcome.memory[:5]]


def no_errors_logged(outcome) -> list[Violation]:
    return [Violation("error-logged", text.split("\n")[0] + "\n" + text)
            for text in outcome.errors[:3]]


def check(outcome, order: str | None = ORDER_PROMISE) -> list[Violation]:
    """
    Every invariant, on one outcome.
    """
    return [*exactly_once(outcome), *consumed_once(outcome), *producer_order(outcome, order),
            *topic_promises(outcome), *not_stuck(outcome), *memory_bounded(outcome),
            *no_errors_logged(outcome)]
