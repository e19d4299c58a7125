"""
What one simulated run does, drawn from a seed: a L{Schedule}.

A schedule is plain data (it prints as JSON and loads back), so a failing
run can be shown, minimised (L{meshroute} never sees the seed, only the
schedule) and replayed.  L{generate} draws one from C{random.Random(seed)}
and nothing else, so a seed always means the same schedule.

Times are seconds of mesh time from the start of the fault phase.
"""

import json
import random
from dataclasses import asdict, dataclass

#: Mesh time during which traffic is sent and faults happen; then every
#: fault is healed and the mesh is left to quiesce.
FAULT_PHASE_S = 30.0

#: The store calls a store-failure fault may fail (the functions the
#: store hands its executor).
STORE_CALLS = (
    "accept_backlog", "accept_local", "accept_once", "receive_backlog",
    "receive_local", "assign", "acknowledge", "read_outbox", "return_outbox",
    "fetch", "consume", "mark_redelivered",
)

#: Fault kinds, with the weight each is drawn with.
FAULT_WEIGHTS = {
    "link-cut": 4,        # a link's traffic is held (cut cable): keepalive notices
    "link-reset": 2,      # a link's connection is reset: both ends see it close
    "partition": 2,       # the routers split in two groups that cannot talk
    "crash": 3,           # a router dies (SIGKILL) and restarts with its data
    "wipe": 1,            # a router dies and restarts with an empty data dir
    "store-failure": 3,   # one store call of a router fails (disk I/O error)
    "slow-link": 2,       # a link delivers everything late
    "freeze": 2,          # a router stops (SIGSTOP): nothing in or out
    "client-cut": 3,      # a client's connection is cut and new ones refused
    "client-silent": 1,   # a client's connection holds its traffic
    "client-flap": 1,     # a slow client connection cut twice, the second
                          # time while the client reopens its session
}


@dataclass(frozen=True)
class Producer:
    """
    A native client at C{router} that sends.  C{window}: its confirmation
    window (so a short cut is reattached), or -1 (no reattachment).
    """

    name: str
    router: str
    window: int


@dataclass(frozen=True)
class Consumer:
    """
    A native client at C{router} consuming C{queue} with C{prefetch},
    acknowledging each message after a delay drawn up to C{ack_delay}
    seconds (from its own random stream, seeded by C{seed}).
    """

    name: str
    router: str
    queue: str
    prefetch: int
    ack_delay: float
    seed: int


@dataclass(frozen=True)
class TopicSubscriber:
    """
    A native client at C{router} subscribing to topic C{pattern} at
    C{at}: a durable subscription (named after the client) or not; it
    unsubscribes at C{until} (never if negative), for good (C{forget})
    or, durable, only detaching.  It acknowledges as a L{Consumer} does.
    """

    name: str
    router: str
    pattern: str
    durable: bool
    at: float
    until: float
    forget: bool
    prefetch: int
    ack_delay: float
    seed: int


#: The topics the simulation publishes to, and the patterns its
#: subscribers draw from (some match several topics, some none).
TOPICS = ("t.a", "t.b", "u.a", "u.b.c")
PATTERNS = ("t.a", "t.*", "t.#", "*.a", "u.#", "#", "v.*")


@dataclass(frozen=True)
class Send:
    """
    At C{at}, producer C{producer} sends C{count} messages to C{address}.

    @ivar duplicate_ids: each carries a duplicate id; one that fails with
        the session (outcome unknown) is sent again with the same id.
    @ivar resend: with duplicate ids, each is sent a second time with the
        same id right after its confirmation (a retry whose first answer
        was lost): it must be confirmed with the first message's id.
    @ivar retain: publications to be retained (C{x-retain: true}).
    """

    at: float
    producer: str
    address: str
    count: int
    persistent: bool
    duplicate_ids: bool
    resend: bool
    retain: bool = False


@dataclass(frozen=True)
class Fault:
    """
    At C{at}, fault C{kind} hits C{target} (router names, a client name,
    or for C{store-failure} the router and the store call) for C{duration}
    seconds; C{value} is the delay of a slow link, or for C{client-flap}
    the time between the two cuts (its connection is 0.2 s slow
    meanwhile).
    """

    at: float
    kind: str
    target: tuple
    duration: float
    value: float = 0.0


@dataclass(frozen=True)
class Schedule:
    """
    One run: the mesh, its clients, the traffic and the faults.

    @ivar connectors: C{(a, b)}: router C{a} has a connector to C{b}.
    """

    seed: int
    routers: tuple
    connectors: tuple
    producers: tuple
    consumers: tuple
    sends: tuple
    faults: tuple
    topic_subscribers: tuple = ()
    keepalive_ms: int = 200
    reroute_delay_ms: int = 1000
    client_keep_alive_ms: int = 3000
    max_transient_backlog: int = 10
    max_backlog: int = 100_000
    #: C{(router, seconds)}: how long each of these routers' commits take
    #: (the others' commit at once).
    store_lags: tuple = ()
    #: Every router's C{[routing] early-accept-hold} (0: accepts are
    #: written at once).
    early_accept_hold_ms: int = 0

    def to_json(self) -> str:
        return json.dumps(asdict(self), separators=(",", ":"))

    @classmethod
    def from_json(cls, text: str) -> "Schedule":
        data = json.loads(text)
        data["routers"] = tuple(data["routers"])
        data["connectors"] = tuple(tuple(pair) for pair in data["connectors"])
        data["producers"] = tuple(Producer(**p) for p in data["producers"])
        data["consumers"] = tuple(Consumer(**c) for c in data["consumers"])
        data["topic_subscribers"] = tuple(TopicSubscriber(**t)
                                          for t in data.get("topic_subscribers", ()))
        data["sends"] = tuple(Send(**s) for s in data["sends"])
        data["faults"] = tuple(Fault(**{**f, "target": tuple(f["target"])})
                               for f in data["faults"])
        data["store_lags"] = tuple(tuple(pair) for pair in data.get("store_lags", ()))
        return cls(**data)

    def describe(self) -> str:
        """
        A few lines for people: the mesh, then traffic and faults in time
        order.
        """
        lines = [f"seed {self.seed}: routers {', '.join(self.routers)}; links "
                 + ", ".join(f"{a}->{b}" for a, b in self.connectors)]
        if self.store_lags:
            lines.append("  commits take " + ", ".join(f"{router} {lag * 1000:g} ms"
                                                      for router, lag in self.store_lags))
        if self.early_accept_hold_ms:
            lines.append(f"  early accepts held {self.early_accept_hold_ms} ms")
        lines += [f"  producer {p.name} at {p.router} (window {p.window})"
                  for p in self.producers]
        lines += [f"  consumer {c.name} at {c.router} on {c.queue} (prefetch {c.prefetch}, "
                  f"ack within {c.ack_delay:.2f}s)" for c in self.consumers]
        lines += [f"  topic subscriber {t.name} at {t.router} on {t.pattern}"
                  f"{' (durable)' if t.durable else ''} (prefetch {t.prefetch}, ack within "
                  f"{t.ack_delay:.2f}s)" for t in self.topic_subscribers]
        timeline = [(s.at, f"send {s.count} {'persistent' if s.persistent else 'non-persistent'}"
                     f"{' with duplicate ids' if s.duplicate_ids else ''}"
                     f"{' resent' if s.resend else ''} {s.producer} -> {s.address}")
                    for s in self.sends]
        timeline += [(f.at, f"{f.kind} {'/'.join(map(str, f.target))} for {f.duration:.2f}s"
                      + (f" (delay {f.value:.2f}s)" if f.kind == "slow-link" else "")
                      + (f" (cut again {f.value:.2f}s after)" if f.kind == "client-flap"
                         else ""))
                     for f in self.faults]
        timeline += [(t.at, f"subscribe {t.name} to {t.pattern}")
                     for t in self.topic_subscribers]
        timeline += [(t.until, f"unsubscribe {t.name}{' for good' if t.forget else ''}")
                     for t in self.topic_subscribers if t.until >= 0]
        lines += [f"  t={at:6.2f} {what}" for at, what in sorted(timeline)]
        return "\n".join(lines)


def _topology(rng: random.Random, count: int) -> tuple:
    """
    A random connected graph: a random spanning tree plus a few extra
    edges, each with one connector in a random direction.
    """
    names = [f"r{i}" for i in range(count)]
    edges = set()
    for i in range(1, count):
        edges.add((names[rng.randrange(i)], names[i]))
    for _ in range(rng.randrange(count)):
        a, b = rng.sample(names, 2)
        if (a, b) not in edges and (b, a) not in edges:
            edges.add((a, b))
    return tuple(names), tuple(sorted((a, b) if rng.random() < 0.5 else (b, a)
                                      for a, b in sorted(edges)))


def _fault(rng: random.Random, at: float, routers: tuple, connectors: tuple,
           clients: tuple, client_keep_alive_s: float) -> Fault:
    kind = rng.choices(list(FAULT_WEIGHTS), weights=list(FAULT_WEIGHTS.values()))[0]
    duration = round(rng.uniform(0.3, 8.0), 2)
    if kind in ("link-cut", "link-reset", "slow-link"):
        target = rng.choice(connectors)
        delay = round(rng.uniform(0.02, 0.6), 2) if kind == "slow-link" else 0.0
        return Fault(at, kind, target, 0.0 if kind == "link-reset" else duration, delay)
    if kind == "partition":
        group = tuple(sorted(rng.sample(routers, rng.randrange(1, len(routers)))))
        return Fault(at, kind, group, duration)
    if kind == "store-failure":
        return Fault(at, kind, (rng.choice(routers), rng.choice(STORE_CALLS)), 0.0)
    if kind == "client-flap":
        # Each cut outlives the disconnected session; the second comes
        # while the reconnection's Open and re-subscriptions are in flight.
        return Fault(at, kind, (rng.choice(clients),),
                     round(rng.uniform(1.3, 2.0) * client_keep_alive_s, 2),
                     round(rng.uniform(0.3, 1.0), 2))
    if kind in ("client-cut", "client-silent"):
        return _client_fault(rng, at, kind, rng.choice(clients), client_keep_alive_s)
    return Fault(at, kind, (rng.choice(routers),), duration)


def _client_fault(rng: random.Random, at: float, kind: str, client: str,
                  client_keep_alive_s: float) -> Fault:
    # Shorter or longer than the router keeps a disconnected session.
    factor = rng.choice([rng.uniform(0.1, 0.7), rng.uniform(1.3, 2.5)])
    return Fault(at, kind, (client,), round(factor * client_keep_alive_s, 2))


def _fault_on_client(rng: random.Random, client: str, client_keep_alive_s: float) -> Fault:
    return _client_fault(rng, round(rng.uniform(0, FAULT_PHASE_S - 3), 2),
                         rng.choice(["client-cut", "client-silent"]), client,
                         client_keep_alive_s)


def generate(seed: int) -> Schedule:
    """
    The schedule of C{seed}: 3 to 8 routers, 1 to 3 producers, a consumer
    or two per destination queue, 3 to 10 bursts of sends (and sometimes
    a flood of non-persistent ones when a link stalls) and 1 to 8 faults.
    """
    rng = random.Random(seed)
    routers, connectors = _topology(rng, rng.randint(3, 8))
    destinations = sorted({(rng.choice(routers), rng.choice(["q", "orders"]))
                           for _ in range(rng.randint(1, 3))})
    consumers = []
    for router, queue in destinations:
        for _ in range(rng.choice([1, 1, 2])):
            consumers.append(Consumer(f"c{len(consumers)}", router, queue,
                                      rng.choice([1, 3, 10, 50]),
                                      round(rng.choice([0.0, 0.05, 0.5, 2.0]), 2),
                                      rng.randrange(1 << 30)))
    producers = tuple(Producer(f"p{i}", rng.choice(routers), rng.choice([-1, 1 << 20]))
                      for i in range(rng.randint(1, 3)))
    sends = []
    for _ in range(rng.randint(3, 10)):
        router, queue = rng.choice(destinations)
        persistent = rng.random() < 0.75
        duplicate_ids = rng.random() < 0.5
        count = rng.randint(1, 40) if rng.random() < 0.9 else rng.randint(100, 400)
        sends.append(Send(round(rng.uniform(0, FAULT_PHASE_S - 5), 2),
                          rng.choice(producers).name, f"{queue}@{router}", count,
                          persistent, duplicate_ids, duplicate_ids and rng.random() < 0.3))
    clients = tuple(p.name for p in producers) + tuple(c.name for c in consumers)
    schedule = Schedule(seed, routers, connectors, producers, tuple(consumers),
                        tuple(sorted(sends, key=lambda s: s.at)), ())
    faults = [_fault(rng, round(rng.uniform(0, FAULT_PHASE_S - 3), 2), routers, connectors,
                     clients, schedule.client_keep_alive_ms / 1000)
              for _ in range(rng.randint(1, 8))]
    max_backlog = rng.choice([100_000, 100_000, 100_000, 60])
    # Floods of non-persistent messages just after a link or a router
    # stalls: what a stalled next hop may cost in memory.
    for fault in faults:
        if fault.kind in ("freeze", "link-cut") and rng.random() < 0.3:
            router, queue = rng.choice(destinations)
            sends.append(Send(round(fault.at + 0.1, 2), rng.choice(producers).name,
                              f"{queue}@{router}", rng.randint(150, 400), False, False, False))
    topic_subscribers = _topic_traffic(rng, routers, producers, sends, faults,
                                       schedule.client_keep_alive_ms / 1000)
    store_lags = _commit_window(rng, routers, producers, sends, faults)
    _retained_traffic(rng, producers, sends)
    hold_ms = _accept_hold(rng, producers, sends, faults)
    return Schedule(seed, routers, connectors, producers, tuple(consumers),
                    tuple(sorted(sends, key=lambda s: s.at)),
                    tuple(sorted(faults, key=lambda f: f.at)),
                    topic_subscribers=topic_subscribers, max_backlog=max_backlog,
                    store_lags=store_lags, early_accept_hold_ms=hold_ms)


#: How long a commit takes, in the seeds whose commits take time.
COMMIT_LAGS = (0.0005, 0.002, 0.01, 0.03)
#: The store calls of an early send (docs/routing.md, "Forwarding while the
#: origin's commit is in flight"), which faults aimed at its window fail.
EARLY_CALLS = ("accept_to_outbox", "reserve_seqs")


def _retained_traffic(rng: random.Random, producers: tuple, sends: list) -> None:
    """
    In half the seeds, 1 to 3 bursts of 1 to 5 retained publications
    (drawn after everything else, so the rest of a seed's schedule is
    what it was before retained messages): several routers retaining one
    topic at once, through the seed's faults.
    """
    if rng.random() < 0.5:
        return
    for _ in range(rng.randint(1, 3)):
        sends.append(Send(round(rng.uniform(0, FAULT_PHASE_S - 5), 2),
                          rng.choice(producers).name, f"topic:{rng.choice(TOPICS)}",
                          rng.randint(1, 5), rng.random() < 0.75, False, False, retain=True))


def _commit_window(rng: random.Random, routers: tuple, producers: tuple, sends: list,
                   faults: list) -> tuple:
    """
    In half the seeds, commits that take time (C{store_lags}: a crash then
    loses what was not committed, and a transfer sent early arrives, and
    is acknowledged, before its origin's commit; in half of those the
    producers' routers commit slowest and the others fastest, so that
    acknowledgements race the commits), and up to two faults
    aimed at the window between an early send and its commit (added to
    C{faults}): a moment after a persistent burst starts, within its
    router's commit time, that router crashes, or the store call of an
    early send fails.  Drawn after everything else, so that the rest of
    a seed's schedule is what it was before.
    """
    if rng.random() < 0.5:
        return ()
    where = {p.name: p.router for p in producers}
    if rng.random() < 0.5:
        # Acknowledgements race the commit: the producers' routers commit
        # slowly, the others quickly.
        lags = {router: COMMIT_LAGS[-1] if router in where.values() else COMMIT_LAGS[0]
                for router in routers}
    else:
        lags = {router: rng.choice(COMMIT_LAGS) for router in routers}
    bursts = [s for s in sends if s.persistent and not s.address.startswith("topic:")]
    for _ in range(rng.randint(0, 2) if bursts else 0):
        burst = rng.choice(bursts)
        router = where[burst.producer]
        at = round(burst.at + rng.uniform(0, lags[router]), 4)
        if rng.random() < 0.7:
            faults.append(Fault(at, "crash", (router,), round(rng.uniform(0.3, 3.0), 2)))
        else:
            faults.append(Fault(at, "store-failure", (router, rng.choice(EARLY_CALLS)), 0.0))
    return tuple(sorted(lags.items()))


#: How long early accepts are held, in the seeds that hold them.
ACCEPT_HOLDS_MS = (2, 10, 50)


def _accept_hold(rng: random.Random, producers: tuple, sends: list, faults: list) -> int:
    """
    In half the seeds, every router holds its early sends' accepts for a
    while (C{[routing] early-accept-hold}, docs/routing.md: an
    acknowledgement within it spares the write, a closing link writes
    them at once), and in half of those one crash is aimed at the hold (a
    moment after a persistent burst starts, within the hold, at its
    producer's router: its accepts were never written).  Drawn last, so
    that the rest of a seed's schedule is what it was before.

    @return: the hold in milliseconds, or 0.
    """
    if rng.random() < 0.5:
        return 0
    hold_ms = rng.choice(ACCEPT_HOLDS_MS)
    bursts = [s for s in sends if s.persistent and not s.address.startswith("topic:")]
    if bursts and rng.random() < 0.5:
        burst = rng.choice(bursts)
        router = {p.name: p.router for p in producers}[burst.producer]
        at = round(burst.at + rng.uniform(0, hold_ms / 1000), 4)
        faults.append(Fault(at, "crash", (router,), round(rng.uniform(0.3, 3.0), 2)))
    return hold_ms


def _topic_traffic(rng: random.Random, routers: tuple, producers: tuple, sends: list,
                   faults: list, client_keep_alive_s: float) -> tuple:
    """
    Topic subscribers, durable or not, subscribing and unsubscribing
    during the fault phase, some of them cut off for a while (added to
    C{faults}), and bursts of publications (added to C{sends}).  Drawn
    after everything else, so that the rest of a seed's schedule is what
    it was before topics.
    """
    subscribers = []
    for index in range(rng.randint(1, 4)):
        at = round(rng.uniform(0, FAULT_PHASE_S / 2), 2)
        until = round(rng.uniform(at + 2, FAULT_PHASE_S), 2) if rng.random() < 0.4 else -1.0
        subscribers.append(TopicSubscriber(
            f"s{index}", rng.choice(routers), rng.choice(PATTERNS), rng.random() < 0.6, at,
            until, rng.random() < 0.5, rng.choice([1, 10, 50]),
            round(rng.choice([0.0, 0.05, 0.5]), 2), rng.randrange(1 << 30)))
    for subscriber in subscribers:
        if rng.random() < 0.3:
            faults.append(_fault_on_client(rng, subscriber.name, client_keep_alive_s))
    for _ in range(rng.randint(2, 6)):
        persistent = rng.random() < 0.75
        duplicate_ids = rng.random() < 0.3
        sends.append(Send(round(rng.uniform(0, FAULT_PHASE_S - 5), 2),
                          rng.choice(producers).name, "topic:" + rng.choice(TOPICS),
                          rng.randint(1, 40), persistent, duplicate_ids, False))
    return tuple(subscribers)
