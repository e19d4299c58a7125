"""
Hostile input on the native client protocol, driven into the router's
client listener without sockets: arbitrary bytes, valid frames in invalid
orders, huge declared lengths, deep or oversized msgpack, invalid UTF-8,
floods of tiny frames.

Whatever a hostile client sends, the router must: let no exception
escape; either close that connection with a logged reason, or keep it
working; hold bounded buffers for it; and keep serving a bystander, a
well-behaved client on the same listener, whose session is checked after
every example.
"""

import struct
from contextlib import contextmanager

import msgpack
import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from twisted.internet.task import Clock
from twisted.logger import globalLogPublisher

from meshroute.wire import client_frames as f
from meshroute.sessions.native_listener import ClientFactory
from meshroute.sessions.answers import MAX_HELD_ANSWERS
from meshroute.wire.codec import encode

from support.fake_router import FakeEngine
from support.router_connection import Connection

#: A small frame bound, so that bounds are reached within an example.
MAX_FRAME = 4096

HOSTILE = settings(max_examples=150, deadline=None,
                   suppress_health_check=[HealthCheck.function_scoped_fixture])


class Listener:
    """
    One client listener with a bystander: a client with an open session
    and a subscription, which must be served whatever the others do.

    @ivar logged: the client listener's log events since the last
        L{hostile} began.
    """

    def __init__(self, path: str) -> None:
        self.clock = Clock()
        self.engine = FakeEngine(path, self.clock, auto=True)
        self.factory = ClientFactory(self.engine, self.clock, max_frame_size=MAX_FRAME)
        self.bystander = Connection(self.factory)
        self.bystander.open(ttl_ms=-1)
        self.bystander.send(f.Subscribe(1, 1, "bystander", 10))
        assert isinstance(self.bystander.received()[0], f.Confirm)
        self.next_command = 2
        self.logged: list[dict] = []

    def _observe(self, event: dict) -> None:
        if event.get("log_namespace", "").startswith("meshroute.sessions"):
            self.logged.append(event)

    @contextmanager
    def hostile(self):
        """
        A new connection for a hostile client; when the block ends, it is
        judged, closed, and the bystander checked.
        """
        self.logged = []
        connection = Connection(self.factory)
        globalLogPublisher.addObserver(self._observe)
        try:
            yield connection
            self.judge(connection)
        finally:
            globalLogPublisher.removeObserver(self._observe)
        connection.lose()
        self.clock.advance(1)
        self.check_bystander()

    def judge(self, connection: Connection) -> None:
        """
        The hostile connection was closed with a logged reason (and, when
        it was told, the Error frame came last), or it still works; its
        buffers stay within their bounds either way.
        """
        frames = connection.received()  # decodable, or this raises
        decoder = connection.protocol.decoder
        assert decoder.pending <= MAX_FRAME + 4
        assert self.factory.buffered <= self.factory.budget.limit
        if connection.closed or connection.aborted:
            assert self.logged, "closed without a logged reason"
            errors = [frame for frame in frames if isinstance(frame, f.Error)]
            if errors and errors[-1].command_id == 0:
                assert frames[-1] == errors[-1]
            return
        if decoder.pending:
            return  # mid-frame: the frame deadline and TTL are tested elsewhere
        if connection.protocol.core.session is not None:
            connection.send(f.Ping(77))
            assert f.Pong(77) in connection.received()
        else:
            opened = connection.open(ttl_ms=-1)
            assert opened.session_id

    def check_bystander(self) -> None:
        bystander, n = self.bystander, self.next_command
        self.next_command += 3
        bystander.send(f.Send(n, "bystander", {}, b"still served", True))
        self.clock.advance(0.1)
        frames = bystander.received()
        assert [frame for frame in frames if isinstance(frame, f.Confirm)
                and frame.command_id == n], frames
        (delivery,) = [frame for frame in frames if isinstance(frame, f.Deliver)]
        assert delivery.body == b"still served"
        bystander.send(f.Ack(n + 1, [delivery.delivery_id]), f.Credit(n + 2, 1, 1))
        assert not (bystander.closed or bystander.aborted)

    def close(self) -> None:
        self.engine.close()


@pytest.fixture
def listener(tmp_path):
    listener = Listener(str(tmp_path / "store.sqlite"))
    yield listener
    listener.close()


def framed(body: bytes) -> bytes:
    return struct.pack(">I", len(body)) + body


# -- strategies ------------------------------------------------------------------------

_small_ints = st.integers(-2, 5)
_texts = st.text(max_size=6)
_headers = st.dictionaries(_texts, _texts, max_size=3)

#: Every frame a client may send, with fields both sensible and not:
#: command ids and subscription numbers near the valid ones, so that
#: some sequences get far into a session.
CLIENT_FRAME = st.one_of(
    st.builds(f.Open, st.lists(st.integers(0, 9), max_size=3), _texts, st.just(""),
              st.integers(-2, 60000), _small_ints, _small_ints),
    st.builds(f.Send, _small_ints, st.sampled_from(["q", "q@other", "", "bad name"]), _headers,
              st.binary(max_size=20), st.booleans(), _texts),
    st.builds(f.Subscribe, _small_ints, _small_ints, st.sampled_from(["q", "", "*"]),
              _small_ints),
    st.builds(f.Unsubscribe, _small_ints, _small_ints, st.booleans()),
    st.builds(f.SubscribeTopic, _small_ints, _small_ints,
              st.sampled_from(["t", "t.*", "#", "", "t..#"]), _small_ints,
              st.sampled_from(["", "d", "bad name"]), st.sampled_from(["", "c"]),
              st.booleans(), st.booleans()),
    st.builds(f.Credit, _small_ints, _small_ints, _small_ints),
    st.builds(f.Ack, _small_ints, st.lists(_small_ints, max_size=3)),
    st.builds(f.Ping, _small_ints),
    st.builds(f.Pong, _small_ints),
    st.builds(f.Close, _small_ints),
    st.builds(f.Received, st.integers(0, 5), st.integers(0, 5)),
    st.builds(f.Begin, _small_ints),
    st.builds(f.Commit, _small_ints),
    st.builds(f.Rollback, _small_ints),
    st.builds(f.SendBatch, _small_ints,
              st.lists(st.tuples(st.just("q"), _headers, st.binary(max_size=5), st.booleans(),
                                 _texts).map(list), min_size=1, max_size=3)),
    st.builds(f.AckThrough, _small_ints, _small_ints, _small_ints),
    st.builds(f.Prepare, _small_ints, st.integers(0, 2), st.sampled_from(["g", "h"]),
              st.sampled_from(["", "b"])),
    st.builds(f.CommitXid, _small_ints, st.integers(0, 2), st.sampled_from(["g", "h"]),
              st.sampled_from(["", "b"]), st.booleans()),
    st.builds(f.RollbackXid, _small_ints, st.integers(0, 2), st.sampled_from(["g", "h"]),
              st.sampled_from(["", "b"])),
    st.builds(f.Recover, _small_ints),
)


def chunked(data: bytes, cuts: list[int]) -> list[bytes]:
    """
    C{data} split at C{cuts} (positions, in any order): as TCP may deliver it.
    """
    points = sorted({0, len(data), *(c % (len(data) + 1) for c in cuts)})
    return [data[a:b] for a, b in zip(points, points[1:])]


# -- the suite -------------------------------------------------------------------------


@HOSTILE
@given(st.lists(st.binary(max_size=300), max_size=8))
def test_arbitrary_bytes(listener, chunks):
    with listener.hostile() as connection:
        for chunk in chunks:
            connection.protocol.dataReceived(chunk)


@HOSTILE
@given(st.lists(CLIENT_FRAME, max_size=12), st.lists(st.integers(0, 10_000), max_size=6),
       st.booleans())
def test_valid_frames_in_any_order(listener, frames, cuts, open_first):
    """
    Valid frames in orders the protocol does not allow (or does), cut at
    arbitrary points; optionally after a proper Open, to reach the
    session's checks.
    """
    with listener.hostile() as connection:
        if open_first:
            connection.open(ttl_ms=-1)
        data = b"".join(encode(frame) for frame in frames)
        for chunk in chunked(data, cuts):
            connection.protocol.dataReceived(chunk)


@HOSTILE
@given(st.integers(MAX_FRAME + 1, 2**32 - 1), st.binary(max_size=64), st.booleans())
def test_huge_declared_lengths_close_before_buffering(listener, length, tail, open_first):
    with listener.hostile() as connection:
        if open_first:
            connection.open(ttl_ms=-1)
        connection.protocol.dataReceived(struct.pack(">I", length) + tail)
        assert connection.closed
        assert connection.protocol.decoder.pending <= 4 + len(tail)


@HOSTILE
@given(st.integers(1, 200_000), st.sampled_from([b"\x91", b"\x81\xa1k"]))
def test_deep_msgpack(listener, depth, opener):
    """
    Arrays (or maps) nested C{depth} deep inside one frame: the decoder
    refuses them, or the schema check does; never a recursion error.
    """
    body = opener * depth + b"\xc0"
    with listener.hostile() as connection:
        connection.protocol.dataReceived(framed(body[:MAX_FRAME]))


@HOSTILE
@given(st.sampled_from([b"\xdd", b"\xdf", b"\xdb", b"\xc6", b"\xc9"]),
       st.integers(2**16, 2**32 - 1), st.binary(max_size=32))
def test_oversized_msgpack_containers(listener, marker, count, rest):
    """
    A small frame whose msgpack declares a container, string, binary or
    extension of up to 4 Gi items: refused, nothing allocated for them.
    """
    with listener.hostile() as connection:
        connection.protocol.dataReceived(framed(marker + struct.pack(">I", count) + rest))
        assert connection.closed


@HOSTILE
@given(st.binary(min_size=1, max_size=40).filter(lambda b: not _is_utf8(b)),
       st.sampled_from(["client_id", "header key", "header value", "address"]))
def test_invalid_utf8_in_strings(listener, raw, where):
    """
    A msgpack string that is not UTF-8, in an Open's client id or in a
    Send's address or headers.
    """
    bad = msgpack.ExtType(0, b"")  # placeholder, replaced below
    marker = b"\xda" + struct.pack(">H", len(raw)) + raw

    def body(items: list) -> bytes:
        packed = msgpack.packb(items, use_bin_type=True)
        return packed.replace(msgpack.packb(bad), marker)

    with listener.hostile() as connection:
        if where == "client_id":
            connection.protocol.dataReceived(framed(body([1, [1], bad, "", 60000])))
        else:
            connection.open(ttl_ms=-1)
            address = bad if where == "address" else "q"
            headers = {bad: "v"} if where == "header key" else (
                {"k": bad} if where == "header value" else {})
            connection.protocol.dataReceived(
                framed(body([3, 1, address, headers, b"x", True, ""])))
        assert connection.closed
        assert connection.received()[-1].code == f.PROTOCOL_ERROR


def _is_utf8(data: bytes) -> bool:
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


@settings(max_examples=8, deadline=None, phases=[Phase.generate],
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.integers(1_000, 30_000), st.sampled_from(["ping", "pong", "credit", "received"]),
       st.integers(1, 4096))
def test_floods_of_tiny_frames(listener, n, kind, chunk_size):
    """
    Tens of thousands of minimal frames, delivered in chunks of any size:
    answered or ignored one by one, with nothing held per frame.
    """
    with listener.hostile() as connection:
        connection.open(ttl_ms=-1)
        connection.send(f.Subscribe(1, 1, "flood", 1))
        connection.received()
        make = {
            "ping": lambda i: f.Ping(i),
            "pong": lambda i: f.Pong(i),
            "credit": lambda i: f.Credit(i + 2, 1, 1),
            "received": lambda i: f.Received(0, 0),
        }[kind]
        data = b"".join(encode(make(i)) for i in range(n))
        for start in range(0, len(data), chunk_size):
            connection.protocol.dataReceived(data[start:start + chunk_size])
            connection.transport.clear()
        session = connection.protocol.core.session
        if kind == "credit":
            # max-unacknowledged refuses the credit beyond it: the grant
            # and the answers held stay bounded.
            assert session.deliveries.outstanding_credit() <= 10_000
            assert len(session.answers.held) <= MAX_HELD_ANSWERS
        else:
            assert not connection.closed
            assert len(session.answers.held) <= 1  # the Subscribe's, not reported received


def test_partial_frames_of_many_connections_stay_within_the_listener_budget(listener):
    """
    Connections that each send all but the last byte of a frame of the
    largest size: beyond the listener's budget of partial frames each
    new one is closed, the others keep their place.
    """
    body = msgpack.packb([3, 1, "q", {}, b"x" * (MAX_FRAME - 40), True, ""], use_bin_type=True)
    frame = framed(body)
    assert len(body) <= MAX_FRAME
    held, closed = [], 0
    for _ in range(20):
        connection = Connection(listener.factory)
        connection.protocol.dataReceived(frame[:-1])
        if connection.aborted:
            closed += 1
            connection.lose()  # as the transport reports the abort
        else:
            held.append(connection)
        assert listener.factory.buffered <= listener.factory.budget.limit
    assert len(held) == listener.factory.budget.limit // (len(frame) - 1)
    assert closed == 20 - len(held)
    for connection in held:
        connection.lose()
    assert listener.factory.buffered == 0
    listener.check_bystander()
