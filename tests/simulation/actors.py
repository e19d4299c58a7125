"""
The simulation's applications: producers and consumers that are real
L{meshroute.client} clients, connected through the in-memory network to
their router's client listener, and that record what they saw.

A producer behaves as the client documentation tells applications to: a
send that fails with L{UnblockedError} (the session was recreated while
it was in progress, so its outcome is unknown) is sent again with the
same duplicate id when it has one, and is left unknown when it has none.
"""

import random
from dataclasses import dataclass, field

from meshroute.client import SendError, UnblockedError, connect_endpoint

#: Client timings: fast, so that a schedule of 30 s sees many failures
#: detected and survived.
CLIENT_OPTIONS = dict(
    ttl_ms=2000,
    client_failure_check_period_ms=2000,
    retry_interval_ms=300,
    max_retry_interval_ms=300,
    reconnect_attempts=-1,
    initial_connect_attempts=-1,
    open_timeout_ms=2000,
)


@dataclass
class Attempt:
    """
    One send call and what became of it.

    @ivar key: the logical message (also its body): C{PRODUCER-N}.
    @ivar order: the producer's call count when it was made.
    @ivar epoch: the origin router's store incarnation when it was made.
    @ivar outcome: None while in progress, then C{confirmed}, C{unblocked}
        or the router's refusal code.
    """

    key: str
    producer: str
    address: str
    persistent: bool
    duplicate_id: str
    order: int
    epoch: int
    sent_at: float
    outcome: str | None = None
    msg_id: str | None = None
    resent: bool = False


@dataclass
class Delivery:
    consumer: str
    router: str
    epoch: int
    msg_id: str
    body: bytes
    redelivered: bool
    at: float
    acked: bool = field(default=False)


def _client_endpoint(mesh, name: str, router: str):
    return mesh.network.endpoints(name).client(f"clients-{router}")


def _connect(actor, spec, world) -> None:
    """
    Connect a consumer or topic subscriber C{actor} to its router; its
    C{_connected} takes the client.
    """
    connecting = connect_endpoint(
        world.clock, _client_endpoint(world.mesh, spec.name, spec.router),
        client_id=spec.name, confirmation_window_size=1 << 20, **CLIENT_OPTIONS)
    connecting.addCallbacks(actor._connected, world.client_failed, errbackArgs=(spec.name,))


def _take(world, spec, rng: random.Random, message) -> None:
    """
    A consumer or topic subscriber C{spec} received C{message}: record it
    in C{world.deliveries} and acknowledge it after a delay drawn from
    C{rng}: random while faults happen; at once while the healed mesh
    drains, so that a slow consumer is not taken for a stuck queue.
    """
    delivery = Delivery(spec.name, spec.router, world.epochs[spec.router], message.msg_id,
                        message.body, message.redelivered, world.now())
    world.deliveries.append(delivery)
    delay = 0.0 if world.draining else rng.uniform(0, spec.ack_delay)

    def ack():
        delivery.acked = True
        message.ack()

    world.clock.callLater(delay, ack)


class ProducerActor:
    """
    A producer: sends as the schedule says, retries what it must, and
    records every attempt in C{world.attempts}.
    """

    def __init__(self, spec, world) -> None:
        self.spec = spec
        self.world = world
        self.client = None
        self._waiting: list = []
        self._counter = 0
        self._calls = 0
        connecting = connect_endpoint(
            world.clock, _client_endpoint(world.mesh, spec.name, spec.router),
            client_id=spec.name, confirmation_window_size=spec.window, **CLIENT_OPTIONS)
        connecting.addCallbacks(self._connected, world.client_failed,
                                errbackArgs=(spec.name,))

    def _connected(self, client) -> None:
        self.client = client
        waiting, self._waiting = self._waiting, []
        for call in waiting:
            call()

    def send(self, burst) -> None:
        for _ in range(burst.count):
            self._counter += 1
            key = f"{self.spec.name}-{self._counter}"
            duplicate_id = key if burst.duplicate_ids else ""
            self._call(key, burst, duplicate_id, resend=burst.resend)

    def _call(self, key: str, burst, duplicate_id: str, resend: bool, resent=False) -> None:
        if self.client is None:
            self._waiting.append(lambda: self._call(key, burst, duplicate_id, resend, resent))
            return
        world = self.world
        self._calls += 1
        attempt = Attempt(key, self.spec.name, burst.address, burst.persistent, duplicate_id,
                          self._calls, world.epochs[self.spec.router], world.now(), resent=resent)
        world.attempts.append(attempt)
        d = self.client.send(burst.address, key.encode(),
                             {"x-retain": "true"} if burst.retain else None,
                             persistent=burst.persistent, duplicate_id=duplicate_id or None)

        def confirmed(msg_id):
            attempt.outcome, attempt.msg_id = "confirmed", msg_id
            if resend:
                self._call(key, burst, duplicate_id, resend=False, resent=True)

        def failed(failure):
            if failure.check(UnblockedError):
                attempt.outcome = "unblocked"
                if duplicate_id:
                    self._call(key, burst, duplicate_id, resend, resent=True)
            elif failure.check(SendError):
                attempt.outcome = failure.value.code
            else:
                attempt.outcome = f"error: {failure.value!r}"

        d.addCallbacks(confirmed, failed)


class ConsumerActor:
    """
    A consumer: subscribes (again, if subscribing fails), records every
    delivery in C{world.deliveries}, and acknowledges each after a delay
    drawn from its own random stream.
    """

    def __init__(self, spec, world) -> None:
        self.spec = spec
        self.world = world
        self.client = None
        self._random = random.Random(spec.seed)
        _connect(self, spec, world)

    def _connected(self, client) -> None:
        self.client = client
        self._subscribe()

    def _subscribe(self) -> None:
        d = self.client.subscribe(self.spec.queue, self._received, prefetch=self.spec.prefetch)

        def failed(failure):
            self.world.notes.append(f"{self.spec.name}: subscribe failed: {failure.value!r}")
            if not self.world.finishing:
                self._subscribe()

        d.addErrback(failed)

    def _received(self, message) -> None:
        _take(self.world, self.spec, self._random, message)


@dataclass
class Subscription:
    """
    What one topic subscriber did: when its subscription was confirmed
    (C{confirmed}, mesh time of the schedule, each time it was), the
    interest version of its router then (L{TopicSubscriberActor}), and
    when it unsubscribed (C{ended}) and when that was answered
    (C{ended_confirmed}).
    """

    name: str
    router: str
    pattern: str
    durable: bool
    confirmed: list = field(default_factory=list)
    versions: list = field(default_factory=list)
    ended: float | None = None
    ended_confirmed: float | None = None
    forgot: bool = False


class TopicSubscriberActor:
    """
    A topic subscriber: subscribes at its time (again, if subscribing
    fails), records every delivery in C{world.deliveries} (its name as
    the consumer) and what its subscription was in
    C{world.subscriptions}, acknowledges as a L{ConsumerActor} does, and
    unsubscribes at its time.
    """

    def __init__(self, spec, world) -> None:
        self.spec = spec
        self.world = world
        self.client = None
        self.subscription = None
        self.record = world.subscriptions[spec.name] = Subscription(
            spec.name, spec.router, spec.pattern, spec.durable)
        self._random = random.Random(spec.seed)
        self._due = False
        _connect(self, spec, world)

    def _connected(self, client) -> None:
        self.client = client
        if self._due:
            self.subscribe()

    def subscribe(self) -> None:
        self._due = True
        if self.client is None or self.record.ended is not None:
            return
        spec = self.spec
        d = self.client.subscribe_topic(
            spec.pattern, self._received, prefetch=spec.prefetch,
            durable=spec.name if spec.durable else None,
            client_id=spec.name if spec.durable else None)

        def subscribed(subscription):
            self.subscription = subscription
            record = self.record
            record.confirmed.append(self.world.now())
            router = self.world.mesh.routers.get(spec.router)
            record.versions.append(router.engine.interest.local.version
                                   if router is not None else 0)

        def failed(failure):
            self.world.notes.append(f"{spec.name}: subscribe failed: {failure.value!r}")
            if not self.world.finishing and self.record.ended is None:
                self.world.clock.callLater(0.5, self.subscribe)

        d.addCallbacks(subscribed, failed)

    def unsubscribe(self) -> None:
        record = self.record
        if record.ended is not None or self.subscription is None:
            return
        record.ended = self.world.now()
        record.forgot = self.spec.forget
        d = self.subscription.unsubscribe(forget=self.spec.forget and self.spec.durable)

        def answered(_):
            record.ended_confirmed = self.world.now()

        d.addCallbacks(answered, lambda failure: self.world.notes.append(
            f"{self.spec.name}: unsubscribe failed: {failure.value!r}"))

    def _received(self, message) -> None:
        _take(self.world, self.spec, self._random, message)
