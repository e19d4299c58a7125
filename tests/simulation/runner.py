"""
Running one L{Schedule} on a L{FaultyMesh}: start the mesh and its
clients, play the traffic and the faults in mesh time, heal everything,
let the mesh quiesce, and gather what happened into an L{Outcome} for
L{simulation.invariants} to judge.

Everything is driven by the mesh's one clock and by the schedule, so one
schedule always gives the same run (see L{Outcome.trace}).
"""

import json
import os
import pathlib
import re
import shutil
import sqlite3
import tempfile
from dataclasses import dataclass, field, replace

from twisted.logger import LogLevel, globalLogPublisher

from meshroute.events import events_dir, read_events
from meshroute.messages import TARGETS_HEADER
from meshroute.router.settings import RoutingConfig
from meshroute.router.topic_subscriptions import durable_queue
from meshroute.sessions.settings import ClientListenerConfig, ClientReconnectConfig
from meshroute.wire.codec import FrameDecoder
from meshroute.wire.frames import FastTransfer, Transfer

from simulation.actors import ConsumerActor, ProducerActor, TopicSubscriberActor
from meshroute.testing.memory_mesh import InjectedStoreError
from simulation.network import HIGH_WATER, FaultyMesh
from simulation.schedule import FAULT_PHASE_S, Schedule

#: How often (mesh seconds) memory bounds are sampled.
SAMPLE_EVERY_S = 0.5
#: How long the healed mesh may take to deliver everything.
QUIESCE_LIMIT_S = 120.0


@dataclass
class Outcome:
    """
    What one run did.

    @ivar events: C{(router, epoch, record)} of every router's event log,
        each log in its order; C{epoch} counts the router's data-dir wipes.
    @ivar lost_with_disk: C{msg_id -> router} for messages a wiped store
        held when it was wiped.
    @ivar stuck: what was still not done when the quiesce limit passed.
    @ivar memory: memory bounds found exceeded while the run went on.
    @ivar errors: logged errors that were not an injected fault's.
    @ivar start: the mesh time (as in event records) the fault phase
        began at, from which the schedule's times count.
    @ivar subscriptions: name -> L{simulation.actors.Subscription}: what
        each topic subscriber's subscription was.
    @ivar fanned: publication id -> C{(router, at, {router: version})}:
        when its router last fanned it out, with the interest version it
        held of every other router then.
    @ivar interest: where, once the mesh healed, a router's picture of
        another's topic interest was not that router's own.
    @ivar retained: where, once the mesh healed, routers' tables of
        retained messages differed.
    """

    schedule: Schedule
    attempts: list
    deliveries: list
    events: list
    lost_with_disk: dict
    stuck: list
    memory: list
    errors: list
    notes: list = field(default_factory=list)
    start: float = 0.0
    subscriptions: dict = field(default_factory=dict)
    fanned: dict = field(default_factory=dict)
    interest: list = field(default_factory=list)
    retained: list = field(default_factory=list)
    #: Arrivals handed to a consumer from their receive, with no read
    #: (docs/routing.md), in all routers' lives.
    claimed: int = 0

    def trace(self) -> list[str]:
        """
        The run as lines that do not depend on random ids (message ids'
        boot part, session ids, the pid): equal for two runs of one
        schedule when the run is deterministic.
        """
        names: dict[str, str] = {}

        def stable(match):
            return names.setdefault(match.group(0), f"#{len(names)}")

        lines = []
        for router, epoch, record in self.events:
            record = {k: v for k, v in record.items() if k != "pid"}
            lines.append(f"{router}/{epoch} {json.dumps(record, sort_keys=True)}")
        lines += [f"send {a.key} {a.address} {a.outcome} {a.msg_id} {a.sent_at}"
                  for a in self.attempts]
        lines += [f"deliver {d.consumer} {d.msg_id} {d.body!r} {d.redelivered} {d.at}"
                  for d in self.deliveries]
        lines += self.notes + self.stuck + self.memory + self.errors
        text = "\n".join(lines)
        # Random per process: a message id's boot part, session ids, and
        # link ids (numbered per process, not per router).
        text = re.sub(r"(?<=:)[0-9a-f]{12}(?=:)|\b[0-9a-f]{32}\b|\b[\w.-]+/[LC]\d+\b",
                      stable, text)
        return text.split("\n")


class _ErrorLog:
    """
    Logged errors during a run, except those whose failure is an
    injected store error (those are the fault doing what it should).
    """

    def __init__(self) -> None:
        self.unexpected: list[str] = []
        self.injected = 0

    def __call__(self, event: dict) -> None:
        failure = event.get("log_failure")
        if failure is None and event.get("log_level") not in (LogLevel.error, LogLevel.critical):
            return
        if failure is not None and failure.check(InjectedStoreError):
            self.injected += 1
            return
        from twisted.logger import formatEvent

        text = formatEvent(event)
        if failure is not None:
            text += ": " + failure.getErrorMessage() + "\n" + failure.getTraceback()
        self.unexpected.append(text)


class World:
    """
    The mesh, the clients and what they recorded during one run.
    """

    def __init__(self, schedule: Schedule, root: str) -> None:
        self.schedule = schedule
        self.root = root
        self.mesh = FaultyMesh(
            pathlib.Path(root), keepalive_interval_ms=schedule.keepalive_ms,
            stage_valid_timeout_ms=1000, reject_disconnect_delay_ms=1000,
            retry_interval_ms=200, store_lags=dict(schedule.store_lags))
        self.clock = self.mesh.clock
        self.configs = {name: self._config(name) for name in schedule.routers}
        self.epochs = {name: 0 for name in schedule.routers}
        self.down: set[str] = set()
        self.frozen: dict[str, int] = {}
        self.attempts: list = []
        self.deliveries: list = []
        self.notes: list[str] = []
        self.memory: list[str] = []
        self.lost_with_disk: dict[str, str] = {}
        self.finishing = False
        self.draining = False
        self.start = 0.0
        self.producers: dict[str, ProducerActor] = {}
        self.consumers: dict[str, ConsumerActor] = {}
        self.topic_subscribers: dict[str, TopicSubscriberActor] = {}
        self.subscriptions: dict = {}
        self.fanned: dict = {}
        self.claimed = 0

    def _config(self, name: str):
        schedule = self.schedule
        peers = [b for a, b in schedule.connectors if a == name]
        config = self.mesh.config(name, connect_to=peers)
        return replace(
            config,
            routing=RoutingConfig(max_backlog=schedule.max_backlog,
                                  max_transient_backlog=schedule.max_transient_backlog,
                                  reroute_delay_ms=schedule.reroute_delay_ms,
                                  early_accept_hold_ms=schedule.early_accept_hold_ms),
            clients=ClientListenerConfig((f"clients-{name}",), connection_ttl_check_interval_ms=500),
            client_reconnect=ClientReconnectConfig(keep_alive_ms=schedule.client_keep_alive_ms),
        )

    def now(self) -> float:
        """
        Seconds since the fault phase began (the schedule's times).
        """
        return self.clock.seconds() - self.start

    def client_failed(self, failure, name: str) -> None:
        self.notes.append(f"{name}: could not connect: {failure.value!r}")

    # -- faults ---------------------------------------------------------------

    def crash(self, name: str) -> bool:
        if name in self.down:
            return False
        self.claimed += self.mesh.routers[name].engine.queues.claimed
        self.mesh.crash(name)
        self.down.add(name)
        self.mesh.network.partitioned |= {n for n, count in self.frozen.items() if count}
        return True

    def start_router(self, name: str) -> None:
        """
        Start router C{name}, watching its topic fan-out: for each
        publication accepted there, when it was fanned out and the
        interest version it held of every other router then
        (C{fanned}), which says which subscriptions it was promised to.
        """
        self.mesh.start(self.configs[name])
        engine = self.mesh.routers[name].engine
        copies, table = engine.fan_out.copies, engine.interest.table

        def watched(message):
            if message.origin == name and TARGETS_HEADER not in message.headers:
                self.fanned[message.msg_id] = (
                    name, self.now(), {origin: table.version(origin) for origin in table.origins()})
            return copies(message)

        engine.fan_out.copies = watched

    def restart(self, name: str) -> None:
        self.down.discard(name)
        self.start_router(name)

    def wipe(self, name: str) -> None:
        """
        The crashed router's disk is replaced: remember what its store
        held (lost with it, legitimately) and keep its event log aside.
        """
        data_dir = self.configs[name].data_dir
        database = os.path.join(data_dir, "store.db")
        connection = sqlite3.connect(database)
        try:
            held = [row[0] for row in connection.execute("SELECT msg_id FROM messages")]
        finally:
            connection.close()
        for msg_id in held:
            self.lost_with_disk.setdefault(msg_id, name)
        aside = os.path.join(self.root, f"{name}.{self.epochs[name]}")
        os.makedirs(aside)
        os.rename(events_dir(data_dir), events_dir(aside))
        shutil.rmtree(data_dir)
        self.epochs[name] += 1

    def freeze(self, name: str) -> None:
        self.frozen[name] = self.frozen.get(name, 0) + 1
        self.mesh.network.partitioned.add(name)

    def thaw(self, name: str) -> None:
        self.frozen[name] -= 1
        if not self.frozen[name]:
            self.mesh.heal(name)

    # -- observation ----------------------------------------------------------

    def sample_memory(self) -> None:
        """
        Check the bounds the configuration promises: non-persistent
        messages waiting per destination, and what a link holds written
        but not yet delivered (a stalled peer): at most C{WINDOW}
        transfers, and no more non-persistent bytes than a transport
        buffers before it pushes back (L{HIGH_WATER}) plus as many
        messages as may wait.
        """
        from meshroute.router.peer_channel import WINDOW

        bound = self.schedule.max_transient_backlog
        now = self.now()
        for name, router in self.mesh.routers.items():
            for dest, waiting in router.engine.transient_depths().items():
                if waiting > bound:
                    self.memory.append(f"t={now:.2f} {name}: {waiting} non-persistent "
                                       f"messages wait for {dest} (max {bound})")
        routers = set(self.schedule.routers)
        for writer, reader, chunks in self.mesh.network.buffered():
            if (writer not in routers or reader not in routers
                    or sum(map(len, chunks)) <= HIGH_WATER):
                continue
            fast, transfers = [], 0
            for chunk in chunks:
                # One chunk per write (several, joined, on a slow link).
                frames = FrameDecoder().feed(chunk)
                fast += [len(chunk) // len(frames) for frame in frames
                         if isinstance(frame, FastTransfer)]
                transfers += sum(isinstance(frame, Transfer) for frame in frames)
            fast_bound = HIGH_WATER + bound * len(routers) * max(fast, default=0)
            if sum(fast) > fast_bound or transfers > WINDOW:
                self.memory.append(
                    f"t={now:.2f} link {writer}->{reader}: {len(fast)} non-persistent "
                    f"({sum(fast)} bytes) and {transfers} persistent transfers written and "
                    f"not delivered (bounds {fast_bound} bytes and {WINDOW})")

    def run(self, seconds: float) -> None:
        """
        Let C{seconds} pass, sampling memory on the way.
        """
        end = self.clock.seconds() + seconds
        while self.clock.seconds() < end:
            self.mesh.run(min(SAMPLE_EVERY_S, end - self.clock.seconds()))
            self.sample_memory()

    def links_down(self) -> list[str]:
        """
        The configured links of running routers that are not in delivery.
        """
        down = []
        for name in sorted(self.mesh.routers):
            stages = self.mesh.stages(name)
            for a, b in self.schedule.connectors:
                if name in (a, b):
                    peer = b if a == name else a
                    if stages.get(peer) != "delivery":
                        down.append(f"{name}: link to {peer} is {stages.get(peer)}")
        return down

    def unfinished(self) -> list[str]:
        """
        What is not yet done: anything here after the quiesce limit is
        stuck.
        """
        left = []
        for name, router in sorted(self.mesh.routers.items()):
            store = router.store
            if store.backlog_depths():
                left.append(f"{name}: backlog {store.backlog_depths()}")
            if store.outbox_peers():
                left.append(f"{name}: outbox for {store.outbox_peers()}")
            waiting = router.engine.transient_depths()
            if waiting:
                left.append(f"{name}: non-persistent waiting {waiting}")
            depths = {queue: depth for queue, depth in router.engine.queues.depths().items()
                      if queue not in self.detached_durable(name)}
            if depths:
                left.append(f"{name}: queues not drained {depths}")
        left += self.links_down()
        pending = [a.key for a in self.attempts if a.outcome is None]
        if pending:
            left.append(f"sends without an answer: {pending[:10]} ({len(pending)})")
        for name, actor in sorted({**self.producers, **self.consumers,
                                   **self.topic_subscribers}.items()):
            if actor.client is None:
                left.append(f"{name}: never connected")
        return left

    def detached_durable(self, router: str) -> set[str]:
        """
        The queues of router C{router}'s durable subscriptions that no
        subscriber consumes any more (it detached without forgetting
        them): they keep what they collect.
        """
        return {durable_queue(spec.name, spec.name)
                for spec in self.schedule.topic_subscribers
                if spec.durable and spec.router == router
                and self.subscriptions[spec.name].ended is not None}

    def interest_mismatches(self) -> list[str]:
        """
        Once the mesh healed: where a router's picture of another
        reachable router's topic interest is not what that router
        advertises.
        """
        found = []
        routers = self.mesh.routers
        for name, router in sorted(routers.items()):
            interest = router.engine.interest
            for other in sorted(router.engine.routes.routes()):
                if other not in routers:
                    continue
                own = routers[other].engine.interest.local
                held = interest.table.patterns(other)
                if held != own.advertised or interest.table.version(other) != own.version:
                    found.append(f"{name} holds {sorted(held)} v{interest.table.version(other)} "
                                 f"of {other}, which advertises {sorted(own.advertised)} "
                                 f"v{own.version}")
        return found

    def retained_mismatches(self) -> list[str]:
        """
        Once the mesh healed: where a router's retained messages are not
        the first router's (every router holds the same table once the
        flood has passed: docs/topics.md, "Retained messages").
        """
        tables = {name: {topic: entry.order
                         for topic, entry in router.engine.retained.table.entries.items()}
                  for name, router in sorted(self.mesh.routers.items())}
        if not tables:
            return []
        first, table = next(iter(tables.items()))
        return [f"{name} holds {sorted(held.items())}, {first} {sorted(table.items())}"
                for name, held in tables.items() if held != table]


def _timeline(schedule: Schedule, world: World) -> list:
    """
    C{(at, rank, action)} for every send and every fault's start and end.
    """
    network = world.mesh.network
    actions = []
    for burst in schedule.sends:
        actions.append((burst.at, 1, lambda b=burst: world.producers[b.producer].send(b)))
    for spec in schedule.topic_subscribers:
        actor = lambda name=spec.name: world.topic_subscribers[name]
        actions.append((spec.at, 1, lambda a=actor: a().subscribe()))
        if spec.until >= 0:
            actions.append((spec.until, 1, lambda a=actor: a().unsubscribe()))
    for fault in schedule.faults:
        start = end = None
        target, kind = fault.target, fault.kind
        if kind == "link-cut":
            start = lambda t=target: network.cut_pair(*t)
            end = lambda t=target: network.heal_pair(*t)
        elif kind == "link-reset":
            start = lambda t=target: network.reset(*t)
        elif kind == "partition":
            pairs = [(a, b) for a in target for b in schedule.routers if b not in target]
            start = lambda p=pairs: [network.cut_pair(a, b) for a, b in p]
            end = lambda p=pairs: [network.heal_pair(a, b) for a, b in p]
        elif kind == "slow-link":
            key = frozenset(target)
            start = lambda k=key, v=fault.value: network.delays.__setitem__(k, v)
            end = lambda k=key: network.delays.pop(k, None)
        elif kind == "freeze":
            start = lambda t=target[0]: world.freeze(t)
            end = lambda t=target[0]: world.thaw(t)
        elif kind in ("crash", "wipe"):
            crashed = []

            def start(name=target[0], wipe=kind == "wipe", crashed=crashed):
                if world.crash(name):
                    crashed.append(name)
                    if wipe:
                        world.wipe(name)

            def end(crashed=crashed):
                for name in crashed:
                    world.restart(name)
        elif kind == "store-failure":
            start = lambda t=target: (t[0] in world.mesh.executors
                                      and world.mesh.executors[t[0]].fail_next(t[1]))
        elif kind in ("client-cut", "client-silent"):
            client = target[0]
            spec = next(s for s in (*schedule.producers, *schedule.consumers,
                                      *schedule.topic_subscribers)
                        if s.name == client)

            def start(client=client, router=spec.router, reset=kind == "client-cut"):
                network.cut_pair(client, router)
                if reset:
                    network.reset(client)

            end = lambda client=client, router=spec.router: network.heal_pair(client, router)
        elif kind == "client-flap":
            client = target[0]
            spec = next(s for s in (*schedule.producers, *schedule.consumers,
                                      *schedule.topic_subscribers)
                        if s.name == client)
            key = frozenset((client, spec.router))

            def cut(client=client, router=spec.router):
                network.cut_pair(client, router)
                network.reset(client)

            heal = lambda client=client, router=spec.router: network.heal_pair(client, router)
            again = fault.at + fault.duration + fault.value
            actions += [(again, 0, cut), (again + fault.duration, 2, heal),
                        (again + fault.duration, 2, lambda k=key: network.delays.pop(k, None))]
            start = lambda k=key, c=cut: (network.delays.__setitem__(k, 0.2), c())
            end = heal
        actions.append((fault.at, 0, start))
        if end is not None:
            actions.append((fault.at + fault.duration, 2, end))
    return sorted(actions, key=lambda a: (a[0], a[1]))


def _converge(world: World, limit_s: float = 20.0) -> None:
    """
    Run until every configured link is in delivery (or the limit).
    """
    for _ in range(int(limit_s / SAMPLE_EVERY_S)):
        if not world.links_down():
            return
        world.run(SAMPLE_EVERY_S)


def run(schedule: Schedule, root: str | None = None) -> Outcome:
    """
    Play C{schedule} and return what happened.  The routers' data-dirs go
    under C{root} (a fresh temporary directory, removed after, if None).
    """
    if root is None:
        with tempfile.TemporaryDirectory(prefix="meshroute-sim-") as temporary:
            return run(schedule, temporary)
    errors = _ErrorLog()
    globalLogPublisher.addObserver(errors)
    try:
        world = World(schedule, root)
        return _play(world, errors)
    finally:
        globalLogPublisher.removeObserver(errors)


def _play(world: World, errors: _ErrorLog) -> Outcome:
    schedule = world.schedule
    for name in schedule.routers:
        world.start_router(name)
    _converge(world)
    for spec in schedule.producers:
        world.producers[spec.name] = ProducerActor(spec, world)
    for spec in schedule.consumers:
        world.consumers[spec.name] = ConsumerActor(spec, world)
    for spec in schedule.topic_subscribers:
        world.topic_subscribers[spec.name] = TopicSubscriberActor(spec, world)
    world.run(1.0)
    start = world.start = world.clock.seconds()
    for at, _rank, action in _timeline(schedule, world):
        world.run(max(0.0, start + at - world.clock.seconds()))
        action()
        world.mesh.network.flush()
    world.run(max(0.0, start + FAULT_PHASE_S - world.clock.seconds()))
    # Every fault has ended (the timeline holds each end): quiesce.
    world.draining = True
    stuck = []
    waited = 0.0
    while True:
        left = world.unfinished()
        if not left:
            break
        if waited >= QUIESCE_LIMIT_S:
            stuck = left
            break
        world.run(2.0)
        waited += 2.0
    # What a link brings when it comes up (the whole interest and retained
    # tables, docs/topics.md) travels as non-persistent system messages,
    # which unfinished() does not see: a link back in the very last instant
    # (a fault that ended after the fault phase) has them still to send.
    # Let that flood pass before the tables are compared.
    world.run(SAMPLE_EVERY_S)
    interest = world.interest_mismatches()
    retained = world.retained_mismatches()
    world.finishing = True
    for actor in [*world.producers.values(), *world.consumers.values(),
                  *world.topic_subscribers.values()]:
        if actor.client is not None:
            actor.client.close()
    world.run(2.0)
    world.claimed += sum(world.mesh.routers[name].engine.queues.claimed
                         for name in schedule.routers if name not in world.down)
    world.mesh.stop_all()
    events = []
    for name in schedule.routers:
        for epoch in range(world.epochs[name] + 1):
            data_dir = (os.path.join(world.root, f"{name}.{epoch}")
                        if epoch < world.epochs[name] else world.configs[name].data_dir)
            events += [(name, epoch, record) for record in read_events(data_dir)]
    return Outcome(schedule, world.attempts, world.deliveries, events, world.lost_with_disk,
                   stuck, world.memory, errors.unexpected, world.notes, world.start,
                   world.subscriptions, world.fanned, interest, retained, world.claimed)
