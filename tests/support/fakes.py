"""
Recording stand-ins for the parts a test is not about.
"""

from twisted.internet.defer import Deferred, fail, succeed
from twisted.internet.interfaces import IListeningPort, IPushProducer
from zope.interface import implementer

from meshroute.interfaces import IChannelEngine, ICommitGate, ILinkChannel, ILinkEngine
from meshroute.wire.frames import Recovery


@implementer(ILinkChannel)
class RecordingChannel:
    """
    A delivery-stage channel that remembers what its link told it.
    """

    def __init__(self, peer: str, send) -> None:
        self.peer = peer
        self.send = send
        self.recovered_at: int | None = None
        self.frames: list = []
        self.is_closed = False
        self.paused = False
        # What the admin API reads of a channel.
        self.in_flight = self.sent = self.received = 0

    def recovered(self, frame) -> None:
        self.recovered_at = frame.last_received

    def transferred(self, frame) -> None:
        self.frames.append(frame)

    acknowledged = fast_transferred = routes = transferred
    transferred_batch = fast_transferred_batch = transferred

    def pause(self) -> None:
        self.paused = True

    def resume(self) -> None:
        self.paused = False

    def closed(self) -> None:
        self.is_closed = True


@implementer(ILinkEngine)
class RecordingEngine:
    """
    A message engine for link tests: fixed recovery points, recording
    channels.
    """

    def __init__(self, received: dict[str, int] | None = None) -> None:
        self.received = dict(received or {})
        self.channels: dict[str, RecordingChannel] = {}

    def last_received(self, peer: str) -> int:
        return self.received.get(peer, 0)

    def recovery(self, peer: str) -> Recovery:
        return Recovery(self.last_received(peer))

    def link_up(self, peer: str, send, fail, emit, version: int, flush) -> RecordingChannel:
        channel = self.channels[peer] = RecordingChannel(peer, send)
        return channel

    def reported_by(self, peer: str) -> int | None:
        """
        What C{peer} reported in its last recovery stage, if it got there.
        """
        channel = self.channels.get(peer)
        return channel.recovered_at if channel else None


class ChannelStore:
    """
    The store as a peer channel sees it (L{meshroute.router.peer_channel}): each
    call is recorded in C{calls} as C{(name, *args)} and answered at once
    with C{answers[name]} (a value, a function of the call's arguments, or
    an exception to fail with), or, for a call the test L{hold}s, with a
    Deferred appended to C{held[name]} for the test to fire.
    """

    store_id = "our-store"

    def __init__(self, last_received: int = 0, peer_store_id: str = "") -> None:
        self.calls: list[tuple] = []
        self.backlog: dict[str, int] = {}
        self.held: dict[str, list[Deferred]] = {}
        self.answers = {"record_peer_store": None, "acknowledge": 0, "outbox": [],
                        "assign": [], "dead_letter": None, "expire": lambda messages: messages}
        self._last_received = last_received
        self._peer_store_id = peer_store_id

    def hold(self, name: str) -> None:
        self.held[name] = []

    def _call(self, name: str, *args) -> Deferred:
        self.calls.append((name, *args))
        if name in self.held:
            self.held[name].append(Deferred())
            return self.held[name][-1]
        answer = self.answers[name]
        if isinstance(answer, Exception):
            return fail(answer)
        return succeed(answer(*args) if callable(answer) else answer)

    def last_received(self, peer: str) -> int:
        return self._last_received

    def peer_store_id(self, peer: str) -> str:
        return self._peer_store_id

    def backlog_depths(self) -> dict[str, int]:
        return dict(self.backlog)

    def backlog_depth(self, router: str) -> int:
        return self.backlog.get(router, 0)

    def record_peer_store(self, peer: str, store_id: str, forget_received: bool) -> Deferred:
        return self._call("record_peer_store", peer, store_id, forget_received)

    def acknowledge(self, peer: str, up_to_seq: int) -> Deferred:
        return self._call("acknowledge", peer, up_to_seq)

    def outbox(self, peer: str, after_seq: int) -> Deferred:
        return self._call("outbox", peer, after_seq)

    def assign(self, peer: str, dest_routers, limit: int, max_bytes=None) -> Deferred:
        return self._call("assign", peer, dest_routers, limit, max_bytes)

    def dead_letter(self, message, reason: str) -> Deferred:
        return self._call("dead_letter", message, reason)

    def expire(self, messages) -> Deferred:
        return self._call("expire", messages)


@implementer(IChannelEngine)
class RecordingChannelEngine:
    """
    The message engine as a peer channel sees it (L{IChannelEngine}):
    every call is recorded in C{calls} as C{(name, *args)}.  It answers
    with C{serving} (the destinations the peer may take) and
    C{being_accepted}; an arrival fires with C{onward} at once, or when
    the test fires C{arrivals} if it set one.
    """

    def __init__(self) -> None:
        self.calls: list[tuple] = []
        self.serving: frozenset = frozenset()
        self.being_accepted: dict[str, int] = {}
        self.onward: tuple = ()
        self.arrivals: Deferred | None = None

    def __getattr__(self, name: str):
        if name.startswith("_"):
            raise AttributeError(name)
        return lambda *args: self.calls.append((name, *args))

    def assignable(self, peer: str) -> frozenset:
        return self.serving

    def accepting(self, router: str) -> int:
        return self.being_accepted.get(router, 0)

    def arrived(self, peer: str, seq: int, previous: int, message) -> Deferred:
        self.calls.append(("arrived", peer, seq, previous, message.msg_id))
        return self.arrivals or succeed(self.onward)

    def arrived_many(self, peer: str, previous: int, arrivals: list) -> Deferred:
        self.calls.append(("arrived_many", peer, previous,
                           [(seq, message.msg_id) for seq, message in arrivals]))
        return self.arrivals or succeed(self.onward)

    def arrived_transient(self, message) -> None:
        self.calls.append(("arrived_transient", message.msg_id))


@implementer(IListeningPort, IPushProducer)
class RecordingPort:
    """
    A listening port that remembers whether it was paused (accepting
    nothing), resumed or stopped, in order: C{calls}.
    """

    def __init__(self) -> None:
        self.calls: list[str] = []

    def pauseProducing(self) -> None:
        self.calls.append("pause")

    def resumeProducing(self) -> None:
        self.calls.append("resume")

    def stopProducing(self) -> None:
        self.stopListening()

    def startListening(self) -> None:
        pass

    def stopListening(self):
        self.calls.append("stop")
        return succeed(None)

    def getHost(self):
        return None


class RecordingEndpoint:
    """
    A server endpoint whose C{listen} binds C{port} at once, or fails
    with C{error}.
    """

    def __init__(self, port=None, error: Exception | None = None) -> None:
        self.port = port if port is not None else RecordingPort()
        self.error = error
        self.factory = None

    def listen(self, factory):
        if self.error is not None:
            return fail(self.error)
        self.factory = factory
        return succeed(self.port)


class RecordingEndpoints:
    """
    A router's C{endpoints}: each server endpoint string is a
    L{RecordingEndpoint}, kept in C{servers}.
    """

    def __init__(self) -> None:
        self.servers: dict[str, RecordingEndpoint] = {}

    def server(self, description: str) -> RecordingEndpoint:
        return self.servers.setdefault(description, RecordingEndpoint())

    def client(self, description: str):
        raise AssertionError(f"no client endpoint expected: {description}")


@implementer(ICommitGate)
class RecordingReplication:
    """
    A stand-in for the gate: records what the executor hands it, and fires
    at once unless told to hold.
    """

    def __init__(self, epoch: int = 1, holding: bool = False) -> None:
        self.epoch = epoch
        self.holding = holding
        self.batches: list = []  # a ChangeBatch or None per transaction
        self.abandoned_batches: list = []
        self.held: list = []
        self.calls: list = []  # ("prepared" | "committed", batch), in order

    @property
    def prepared_batches(self) -> list:
        return [batch for kind, batch in self.calls if kind == "prepared"]

    def prepared(self, batch) -> None:
        self.calls.append(("prepared", batch))

    def abandoned(self, batch) -> None:
        self.abandoned_batches.append(batch)

    def committed(self, batch, fire) -> None:
        self.batches.append(batch)
        self.calls.append(("committed", batch))
        if self.holding:
            self.held.append(fire)
        else:
            fire()

    def writes(self) -> list:
        return [b for b in self.batches if b is not None]
