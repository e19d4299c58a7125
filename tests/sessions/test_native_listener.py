"""
Tests for the router side of the client protocol: L{ClientProtocol} and
its session machine over a L{StringTransport}, with a fake engine whose
C{submit} Deferreds the tests fire.

Opening, sends confirmed or refused (in any order, by command id),
subscriptions with deliveries, credit and acknowledgements, ping, an
orderly close, and every way a client can misbehave: garbage, frames out
of stage or out of sequence, frames of the wrong direction.  Each ends
that one connection (and its session) with C{Error(0, code)} and nothing
else.  Sessions that outlive their connection (reattachment, TTL,
duplicate ids) are tests/client/test_client_sessions.py.
"""

import itertools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from twisted.internet.task import Clock

from meshroute.wire import client_frames as f
from meshroute.sessions import connection_core
from meshroute.sessions import sends as sends_module
from meshroute.sessions.ha_view import HAView
from meshroute.sessions.native_listener import ClientFactory
from meshroute.errors import WireError
from meshroute.messages import AddressError
from meshroute.store import ExecutorStopped
from meshroute.wire.codec import FrameDecoder, encode
from meshroute.wire.frameset import frame_to_list

from support import router_connection
from support.fake_router import ROUTER, FakeBacklogFull, FakeEngine, FakeUnknownRouter
from support.router_connection import deliveries

FUZZ = settings(max_examples=200, deadline=None)


@pytest.fixture
def factory(engine, clock):
    return ClientFactory(engine, clock)


class Connection(router_connection.Connection):
    """
    One client connection to the router side, driven frame by frame.
    """

    def __init__(self, factory) -> None:
        super().__init__(factory)
        self._commands = itertools.count(1)

    def command_id(self) -> int:
        return next(self._commands)

    def open(self, client_id: str = "test-client", ttl_ms: int = 60000) -> f.Opened:
        self.send(f.Open([1], client_id, "", ttl_ms))
        (opened,) = self.received()
        assert isinstance(opened, f.Opened)
        return opened

    def subscribe(self, queue: str, credit: int, subscription: int = 1) -> int:
        command_id = self.command_id()
        self.send(f.Subscribe(command_id, subscription, queue, credit))
        return command_id



@pytest.fixture
def connection(factory):
    return Connection(factory)


# -- frames --------------------------------------------------------------------

SAMPLES = [
    f.Open([1, 2], "producer-1", "", 60000),
    f.Open([1], "producer-1", "5f0c", -1, 7, 12),
    f.Opened(1, "5f0c", ROUTER, 60000, False, 0),
    f.Opened(1, "5f0c", ROUTER, 60000, True, 9),
    f.OpenedWithTopology(3, "5f0c", ROUTER, 60000, False, 0, 4, ["tcp:a:6001", "tcp:b:6001"]),
    f.Send(1, "orders@router-c", {"k": "v"}, b"body", True),
    f.Send(1, "orders", {}, b"", False, "producer-1:42"),
    f.Send(1, "orders", {}, b"", True, "", 30000, True),
    f.Confirm(1, "router-a:ab:1"),
    f.Error(0, f.BAD_COMMAND, "Send before Open"),
    f.Subscribe(2, 7, "orders", 100),
    f.Unsubscribe(3, 7),
    f.Unsubscribe(3, 7, True),
    f.Credit(4, 7, 50),
    f.Deliver(12, 7, "router-a:ab:1", ROUTER, {}, b"\x00\xff", True),
    f.Ack(5, [12, 13]),
    f.Ping(3),
    f.Pong(3),
    f.Close(6),
    f.Closed(),
    f.Processed(5),
    f.Received(4, 12),
    f.Begin(7),
    f.Commit(8),
    f.Rollback(9),
    f.SendBatch(10, [["q", {}, b"a", False, ""], ["orders@router-c", {"k": "v"}, b"b", True,
                                                   "producer-1:43"]]),
    f.Confirmed(10, ["router-a:ab:2", "router-a:ab:3"]),
    f.DeliverBatch(7, [[13, "router-a:ab:2", ROUTER, {}, b"x", False],
                       [15, "router-a:ab:3", ROUTER, {"k": "v"}, b"", True]]),
    f.AckThrough(12, 7, 15),
    f.Mechanisms(["EXTERNAL", "SCRAM-SHA-256"]),
    f.Authenticate("SCRAM-SHA-256", b"n,,n=user,r=abc"),
    f.Challenge(b"r=abcdef,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096"),
    f.AuthResponse(b"c=biws,r=abcdef,p=AAAA"),
    f.Authenticated("orders-app", b"v=AAAA"),
    f.Expired("router-a:ab:4", "orders@router-c", "router-c"),
    f.Prepare(16, 1, "tm-1:42", "meshroute"),
    f.CommitXid(17, 1, "tm-1:42", "meshroute", False),
    f.CommitXid(17, 0, "g", "", True),
    f.RollbackXid(18, 1, "tm-1:42", "meshroute"),
    f.Recover(19),
    f.Recovered(19, [[1, "tm-1:42", "meshroute"], [0, "g", ""]]),
    f.Recovered(19, []),
    f.SubscribeTopic(20, 8, "prices.*.gbp", 100),
    f.SubscribeTopic(21, 9, "prices.#", 100, "ticks", "shop-7", True, True),
]


def test_every_frame_type_has_a_sample():
    assert {type(frame) for frame in SAMPLES} == set(f.CLIENT_FRAMES.classes)


@pytest.mark.parametrize("frame", SAMPLES, ids=lambda frame: type(frame).__name__)
def test_frames_round_trip(frame):
    frames = f.FROM_CLIENT if type(frame) in f.FROM_CLIENT.classes else f.FROM_ROUTER
    assert FrameDecoder(frames=frames).feed(encode(frame)) == [frame]
    assert FrameDecoder(frames=f.CLIENT_FRAMES).feed(encode(frame)) == [frame]


def test_opened_has_one_shape_per_protocol_generation():
    """
    Opened is six fields up to version 2, eight (the pair's topology
    added) from version 3; seven is neither.
    """
    opened = f.OpenedWithTopology(3, "5f0c", ROUTER, 60000, False, 0, 4, ["tcp:a:6001"])
    assert len(frame_to_list(opened)) == 9
    assert len(frame_to_list(f.Opened(2, "5f0c", ROUTER, 60000, False, 0))) == 7
    with pytest.raises(WireError, match="Opened frame has 7 fields, expected 6 or 8"):
        FrameDecoder(frames=f.FROM_ROUTER).feed(_encoded_list(frame_to_list(opened)[:-1]))


def _encoded_list(items: list) -> bytes:
    import msgpack

    body = msgpack.packb(items, use_bin_type=True)
    return len(body).to_bytes(4, "big") + body


def test_directions_cover_every_frame_and_share_only_ping_pong():
    to_router = set(f.FROM_CLIENT.classes)
    to_client = set(f.FROM_ROUTER.classes)
    assert to_router | to_client == set(f.CLIENT_FRAMES.classes)
    assert to_router & to_client == {f.Ping, f.Pong}


def test_list_fields_must_hold_integers():
    with pytest.raises(WireError):
        f.Ack(1, [1, "2"])
    with pytest.raises(WireError):
        f.Open([True], "", "", 0)


frames_strategy = st.sampled_from(SAMPLES)


@FUZZ
@given(st.binary(max_size=3000), st.sampled_from([f.FROM_CLIENT, f.FROM_ROUTER]))
def test_arbitrary_bytes_decode_to_frames_or_wire_error(data, frames):
    decoder = FrameDecoder(frames=frames, max_frame_size=1024)
    try:
        decoded = decoder.feed(data)
    except WireError:
        return
    assert all(type(frame) in frames.classes for frame in decoded)


@FUZZ
@given(st.lists(st.one_of(st.integers(-2**63, 2**63 - 1), st.text(max_size=5), st.binary(max_size=5),
                          st.booleans(), st.none(), st.lists(st.integers(0, 2**32), max_size=3),
                          st.dictionaries(st.text(max_size=3), st.text(max_size=3), max_size=2)),
                min_size=1, max_size=9))
def test_arbitrary_msgpack_arrays_decode_to_frames_or_wire_error(items):
    _decodes_to_itself_or_wire_error(items)


def _decodes_to_itself_or_wire_error(items: list) -> None:
    """
    The frame C{items} (type code and fields) encodes is decoded to a
    frame of those very fields, or refused with a WireError.
    """
    try:
        decoded = FrameDecoder(frames=f.CLIENT_FRAMES).feed(_encoded_list(items))
    except WireError:
        return
    (frame,) = decoded
    assert frame_to_list(frame) == items


_ANY_ITEM = st.one_of(st.integers(-2**63, 2**63 - 1), st.text(max_size=5), st.binary(max_size=5),
                     st.booleans(), st.none(),
                     st.dictionaries(st.text(max_size=3),
                                     st.one_of(st.text(max_size=3), st.integers(0, 9)),
                                     max_size=2))


@FUZZ
@given(st.sampled_from([f.SendBatch, f.Confirmed, f.DeliverBatch, f.AckThrough]),
       st.one_of(st.integers(-2**63, 2**63 - 1), st.text(max_size=3)),
       st.lists(st.one_of(st.lists(_ANY_ITEM, max_size=7), _ANY_ITEM), max_size=4),
       st.booleans())
def test_arbitrary_batch_frames_decode_to_frames_or_wire_error(cls, first, items, extra):
    """
    The version-4 frames check what their lists hold (every message or
    delivery array, every header map): arbitrary content is a frame or a
    WireError, never another exception.
    """
    _decodes_to_itself_or_wire_error([cls.TYPE, first, items] + ([first] if extra else []))


@FUZZ
@given(st.lists(st.tuples(st.text(max_size=8), st.dictionaries(st.text(max_size=3),
                                                               st.text(max_size=3), max_size=2),
                          st.binary(max_size=8), st.booleans(), st.text(max_size=4)),
                min_size=1, max_size=5), st.integers(1, 2**40))
def test_well_formed_send_batches_round_trip(messages, first):
    frame = f.SendBatch(first, [list(m) for m in messages])
    assert FrameDecoder(frames=f.FROM_CLIENT).feed(encode(frame)) == [frame]
    assert frame.command_id == first + len(messages) - 1


def test_batch_frames_must_not_be_empty():
    for make in (lambda: f.SendBatch(1, []), lambda: f.Confirmed(1, []),
                 lambda: f.DeliverBatch(1, [])):
        with pytest.raises(WireError):
            make()


# -- opening -------------------------------------------------------------------


def test_open(connection, factory):
    opened = connection.open(client_id="producer-1", ttl_ms=30000)
    assert opened.version == 1
    assert opened.router == ROUTER
    assert len(opened.session_id) == 32
    assert opened.ttl_ms == 30000
    assert opened.reattached is False
    assert opened.last_command_id == 0
    (described,) = factory.sessions.describe()
    assert described["client_id"] == "producer-1"
    assert described["state"] == "open"
    assert described["ttl_ms"] == 30000
    assert described["queued"] == 0
    assert described["session_id"] == opened.session_id


def test_sessions_get_distinct_ids(factory):
    first, second = Connection(factory).open(), Connection(factory).open()
    assert first.session_id != second.session_id
    assert len(factory.sessions.describe()) == 2


def test_open_of_an_unknown_session_starts_a_new_one(connection):
    connection.send(f.Open([1], "c", "f" * 32, 60000))
    (opened,) = connection.received()
    assert opened.session_id != "f" * 32
    assert opened.reattached is False
    assert opened.last_command_id == 0


def test_ttl_override(engine, clock):
    connection = Connection(ClientFactory(engine, clock, connection_ttl_override=5000))
    assert connection.open(ttl_ms=60000).ttl_ms == 5000


def test_unsupported_version(connection, factory):
    connection.send(f.Open([10, 11], "c", "", 60000))
    assert connection.received() == [
        f.Error(0, f.UNSUPPORTED_VERSION, "this router speaks [1, 2, 3, 4, 5, 6, 7, 8, 9]")
    ]
    assert connection.closed
    connection.lose()
    assert factory.sessions.describe() == []


# -- an instance of an HA pair ---------------------------------------------------

PAIR = ("tcp:10.0.0.2:6001", "tcp:10.0.1.2:6001")


def pair_instance(engine, clock, view: HAView) -> ClientFactory:
    views = [view]
    factory = ClientFactory(engine, clock, ha_view=lambda: views[-1])
    factory.views = views
    return factory


def test_version_3_opened_tells_the_pair_s_topology(engine, clock):
    connection = Connection(pair_instance(engine, clock, HAView(True, 4, PAIR)))
    connection.send(f.Open([1, 2, 3], "c", "", 60000))
    (opened,) = connection.received()
    assert opened == f.OpenedWithTopology(3, opened.session_id, ROUTER, 60000, False, 0, 4,
                                          list(PAIR))


def test_a_resumed_session_s_opened_tells_the_topology_in_force(engine, clock):
    factory = pair_instance(engine, clock, HAView(True, 4, PAIR))
    first = Connection(factory)
    first.send(f.Open([3], "c", "", 60000))
    (opened,) = first.received()
    first.lose()
    factory.views.append(HAView(True, 5, PAIR))
    second = Connection(factory)
    second.send(f.Open([3], "c", opened.session_id, 60000))
    (again,) = second.received()
    assert again == f.OpenedWithTopology(3, opened.session_id, ROUTER, 60000, True, 0, 5,
                                         list(PAIR))


@pytest.mark.parametrize("versions", [[1], [1, 2]])
def test_older_clients_get_the_old_opened(engine, clock, versions):
    """
    A version-1 or version-2 client cannot decode the topology: it gets
    the six-field Opened, and is told nothing of the pair.
    """
    connection = Connection(pair_instance(engine, clock, HAView(True, 4, PAIR)))
    connection.send(f.Open(versions, "c", "", 60000))
    (opened,) = connection.received()
    assert type(opened) is f.Opened
    assert opened.version == versions[-1]


def test_a_router_without_ha_is_active_at_epoch_0_with_no_endpoints(connection):
    connection.send(f.Open([1, 2, 3], "c", "", 60000))
    (opened,) = connection.received()
    assert (opened.epoch, opened.endpoints) == (0, [])


@pytest.mark.parametrize("versions", [[1], [1, 2, 3]])
def test_an_instance_that_is_not_active_refuses_open(engine, clock, versions):
    factory = pair_instance(engine, clock, HAView(False, 4, PAIR))
    connection = Connection(factory)
    connection.send(f.Open(versions, "c", "", 60000))
    error = assert_closed_with(connection, f.NOT_ACTIVE)
    assert "not the active instance" in error.detail
    connection.lose()
    assert factory.sessions.describe() == []


def test_an_instance_that_stopped_being_active_refuses_a_resume(engine, clock):
    factory = pair_instance(engine, clock, HAView(True, 4, PAIR))
    first = Connection(factory)
    opened = first.open()
    first.lose()
    factory.views.append(HAView(False, 4, PAIR))
    second = Connection(factory)
    second.send(f.Open([1], "c", opened.session_id, 60000))
    assert_closed_with(second, f.NOT_ACTIVE)
    (described,) = factory.sessions.describe()
    assert described["state"] == "disconnected"


def test_a_lost_connection_leaves_its_session_disconnected(connection, factory, clock):
    connection.open()
    connection.lose()
    (described,) = factory.sessions.describe()
    assert described["state"] == "disconnected"
    clock.advance(factory.settings.keep_alive_ms / 1000)
    assert factory.sessions.describe() == []


# -- misbehaving clients -------------------------------------------------------


def assert_closed_with(connection, code: str) -> f.Error:
    frames = connection.received()
    assert frames, "nothing was sent"
    error = frames[-1]
    assert isinstance(error, f.Error) and error.command_id == 0 and error.code == code, frames
    assert connection.closed
    return error


def test_send_before_open(connection, engine):
    connection.send(f.Send(1, "q", {}, b"x", True))
    error = assert_closed_with(connection, f.BAD_COMMAND)
    assert "Send" in error.detail
    assert engine.submitted == []


def test_second_open(connection):
    connection.open()
    connection.send(f.Open([1], "c", "", 60000))
    assert_closed_with(connection, f.BAD_COMMAND)


def test_garbage(connection, factory):
    other = Connection(factory)
    other.open()
    connection.open()
    connection.protocol.dataReceived(b"\x00\x00\x00\x03\xc1\xc1\xc1")
    assert_closed_with(connection, f.PROTOCOL_ERROR)
    # Nothing else is disturbed.
    other.send(f.Ping(1))
    assert other.received() == [f.Pong(1)]
    assert not other.closed


def test_the_frame_table_in_the_docs_lists_every_field_of_every_frame():
    """
    docs/client-protocol.md's first frame table is what a client author
    implements from: every frame, every field, in wire order (it once
    showed a four-field Open, which the router refuses).
    """
    import dataclasses
    import re
    from pathlib import Path

    docs = (Path(__file__).resolve().parents[2] / "docs" / "client-protocol.md").read_text()
    table = docs.split("## Frames", 1)[1].strip().split("\n\n", 1)[0]
    documented = {}
    for row in table.splitlines()[2:]:
        cells = [cell.strip() for cell in row.strip("|").split("|")]
        fields = re.findall(r"`(\w+)(?::[^`]*)?`", cells[2])
        documented[int(cells[0])] = (cells[1].strip("`"), fields)
    # A frame with a longer shape in a later version (Opened) is one row,
    # under its first name, with every field of its longest shape.
    longest = {}
    for cls in f.FROM_CLIENT.classes + f.FROM_ROUTER.classes:
        fields = [field.name for field in dataclasses.fields(cls)]
        if len(fields) >= len(longest.get(cls.TYPE, [])):
            longest[cls.TYPE] = fields
    frames = {**f.FROM_CLIENT.types, **f.FROM_ROUTER.types}
    assert documented == {code: (cls.__name__, longest[code]) for code, cls in frames.items()}


def test_a_protocol_error_log_names_the_remote_address(connection, request):
    from twisted.logger import formatEvent, globalLogPublisher

    logged = []
    globalLogPublisher.addObserver(logged.append)
    request.addfinalizer(lambda: globalLogPublisher.removeObserver(logged.append))
    connection.open()
    connection.protocol.dataReceived(b"\x00\x00\x00\x03\xc1\xc1\xc1")
    assert_closed_with(connection, f.PROTOCOL_ERROR)
    [line] = [formatEvent(e) for e in logged if f.PROTOCOL_ERROR in formatEvent(e)]
    address = connection.transport.getPeer()
    assert f"from {address.host}:{address.port}" in line


def test_oversized_frame(engine, clock):
    connection = Connection(ClientFactory(engine, clock, max_frame_size=100))
    connection.open()
    connection.send(f.Send(1, "q", {}, b"x" * 200, True))
    error = assert_closed_with(connection, f.PROTOCOL_ERROR)
    assert "outside" in error.detail
    assert engine.submitted == []


def test_ill_typed_frame(connection):
    connection.open()
    connection.send(f.Send(1, "q", {}, "not bytes", True))
    assert_closed_with(connection, f.PROTOCOL_ERROR)


def test_frame_of_the_other_direction(connection):
    connection.open()
    connection.send(f.Confirm(1, "x"))
    error = assert_closed_with(connection, f.PROTOCOL_ERROR)
    assert "client-to-router" in error.detail


def test_command_id_out_of_sequence(connection, engine):
    connection.open()
    connection.send(f.Send(1, "q", {}, b"a", True), f.Send(3, "q", {}, b"b", True))
    error = assert_closed_with(connection, f.BAD_COMMAND)
    assert "expected 2" in error.detail
    assert len(engine.submitted) == 1


def test_command_ids_start_at_one(connection):
    connection.open()
    connection.send(f.Ping(1), f.Send(0, "q", {}, b"a", True))
    assert_closed_with(connection, f.BAD_COMMAND)


def test_frames_after_an_error_are_ignored(connection, engine):
    connection.open()
    connection.send(f.Send(5, "q", {}, b"a", True), f.Send(1, "q", {}, b"b", True))
    assert_closed_with(connection, f.BAD_COMMAND)
    connection.send(f.Send(1, "q", {}, b"c", True))
    assert connection.received() == []
    assert engine.submitted == []


def test_a_closing_connection_is_aborted_if_it_does_not_drain(connection, clock):
    connection.send(f.Ping(1))
    assert_closed_with(connection, f.BAD_COMMAND)
    clock.advance(connection_core.CLOSE_GRACE_S - 0.1)
    assert not connection.transport.disconnected
    clock.advance(0.1)
    assert connection.transport.disconnected


def test_abort_timer_is_cancelled_when_the_connection_goes(connection, clock):
    connection.send(f.Ping(1))
    assert_closed_with(connection, f.BAD_COMMAND)
    connection.lose()
    assert clock.getDelayedCalls() == []


# -- sending -------------------------------------------------------------------


def test_send_is_confirmed_once_accepted(connection, engine):
    connection.open()
    connection.send(f.Send(1, "orders@router-c", {"h": "1"}, b"hello", True))
    (submitted,) = engine.submitted
    assert (submitted.address, submitted.body, submitted.headers, submitted.persistent) == (
        "orders@router-c", b"hello", {"h": "1"}, True
    )
    assert connection.received() == []
    submitted.deferred.callback("router-a:x:1")
    assert connection.received() == [f.Confirm(1, "router-a:x:1")]


def test_non_persistent_send(connection, engine):
    connection.open()
    connection.send(f.Send(1, "q", {}, b"fast", False))
    assert engine.submitted[0].persistent is False


def test_pipelined_sends_are_confirmed_by_command_id(connection, engine):
    connection.open()
    connection.send(*(f.Send(n, "q", {}, b"%d" % n, True) for n in range(1, 4)))
    assert [s.body for s in engine.submitted] == [b"1", b"2", b"3"]
    engine.submitted[2].deferred.callback("id-3")
    engine.submitted[0].deferred.callback("id-1")
    engine.submitted[1].deferred.callback("id-2")
    assert connection.received() == [f.Confirm(3, "id-3"), f.Confirm(1, "id-1"),
                                      f.Confirm(2, "id-2")]


@pytest.mark.parametrize("error, code", [
    (AddressError("invalid queue name in address '!'"), f.BAD_ADDRESS),
    (FakeUnknownRouter("no router router-x"), f.UNKNOWN_ROUTER),
    (FakeBacklogFull("100000 messages already wait"), f.BACKLOG_FULL),
])
def test_send_errors(connection, engine, error, code):
    connection.open()
    connection.send(f.Send(1, "!", {}, b"x", True))
    engine.submitted[0].deferred.errback(error)
    assert connection.received() == [f.Error(1, code, str(error))]
    # The session goes on.
    connection.send(f.Send(2, "q", {}, b"x", True))
    engine.submitted[1].deferred.callback("id")
    assert connection.received() == [f.Confirm(2, "id")]
    assert not connection.closed


def test_an_engine_bug_is_an_internal_error_and_is_logged(connection, engine, observe_errors):
    connection.open()
    connection.send(f.Send(1, "q", {}, b"x", True))
    engine.submitted[0].deferred.errback(ZeroDivisionError())
    assert connection.received() == [f.Error(1, f.INTERNAL_ERROR, "send failed in the router")]
    assert len(observe_errors.take(lambda e: e.get("log_failure") is not None)) == 1


def test_a_send_in_flight_when_the_store_closes_is_left_to_the_closing_connection(
        connection, engine):
    """
    The router stops (an HA instance fenced, or handing over) with a send
    in flight: its store closes under it.  That is no router bug to log
    with a traceback, nor an internal-error for the client: the router
    closes its client connections before its store, so the client fails
    the call as unblocked and retries it (with its duplicate id).
    """
    connection.open()
    connection.send(f.Send(1, "q", {}, b"x", True))
    engine.submitted[0].deferred.errback(ExecutorStopped("the store is closed"))
    assert connection.received() == []


def test_engine_raising_synchronously(connection, engine):
    def submit(*args):
        raise AddressError("bad")

    engine.submit = submit
    connection.open()
    connection.send(f.Send(1, "q", {}, b"x", True))
    assert connection.received() == [f.Error(1, f.BAD_ADDRESS, "bad")]


def test_confirm_after_the_connection_is_gone_is_dropped(connection, engine):
    connection.open()
    connection.send(f.Send(1, "q", {}, b"x", True))
    connection.lose()
    engine.submitted[0].deferred.callback("id")
    assert connection.received() == []


def test_too_many_sends_in_progress_pause_reading(connection, engine, monkeypatch):
    monkeypatch.setattr(sends_module, "MAX_SENDS_IN_PROGRESS", 4)
    monkeypatch.setattr(sends_module, "RESUME_SENDS_AT", 2)
    connection.open()
    connection.send(*(f.Send(n, "q", {}, b"", True) for n in range(1, 5)))
    assert connection.transport.producerState == "paused"
    engine.submitted[0].deferred.callback("1")
    assert connection.transport.producerState == "paused"
    engine.submitted[1].deferred.callback("2")
    assert connection.transport.producerState == "producing"


# -- consuming -----------------------------------------------------------------


def test_subscribe_deliver_ack_credit(connection, engine):
    sent = engine.enqueue("orders", b"m1", b"m2", b"m3", b"m4", b"m5")
    connection.open()
    command_id = connection.subscribe("orders", credit=2, subscription=7)
    frames = connection.received()
    assert frames[0] == f.Confirm(command_id, "")
    got = deliveries(frames)
    assert [(d.subscription, d.body, d.msg_id, d.origin, d.redelivered) for d in got] == [
        (7, b"m1", sent[0].msg_id, ROUTER, False),
        (7, b"m2", sent[1].msg_id, ROUTER, False),
    ]
    connection.send(f.Ack(connection.command_id(), [d.delivery_id for d in got]))
    assert connection.received() == []  # Acks are not answered.
    assert engine.queues.depths() == {"orders": 3}
    connection.send(f.Credit(connection.command_id(), 7, 10))
    assert [d.body for d in deliveries(connection.received())] == [b"m3", b"m4", b"m5"]
    assert engine.events.named("message.consumed")[0]["msg_id"] == sent[0].msg_id


def test_deliveries_follow_new_messages(connection, engine):
    connection.open()
    connection.subscribe("q", credit=10)
    connection.received()
    engine.enqueue("q", b"later")
    assert [d.body for d in deliveries(connection.received())] == [b"later"]


def test_headers_are_delivered(connection, engine):
    message = engine.message("q", b"x", {"content-type": "text/plain"})
    engine.store.accept(message)
    connection.open()
    connection.subscribe("q", credit=1)
    (delivery,) = deliveries(connection.received())
    assert delivery.headers == {"content-type": "text/plain"}


def test_subscribe_to_an_invalid_queue(connection):
    connection.open()
    command_id = connection.subscribe("no such/queue", credit=1)
    (error,) = connection.received()
    assert (error.command_id, error.code) == (command_id, f.BAD_ADDRESS)
    assert not connection.closed


def test_subscribe_to_the_dead_letter_queue(connection, engine):
    connection.open()
    command_id = connection.subscribe("$dead-letter", credit=1)
    assert connection.received() == [f.Confirm(command_id, "")]


def test_subscription_ids_are_unique_per_session(connection):
    connection.open()
    connection.subscribe("a", credit=1, subscription=1)
    command_id = connection.subscribe("b", credit=1, subscription=1)
    frames = connection.received()
    assert frames[-1].command_id == command_id and frames[-1].code == f.INVALID_ARGUMENT


def test_negative_credit(connection):
    connection.open()
    command_id = connection.subscribe("a", credit=-1)
    assert connection.received()[-1] == f.Error(
        command_id, f.INVALID_ARGUMENT, "credit must not be negative"
    )
    connection.subscribe("a", credit=0)
    connection.received()
    command_id = connection.command_id()
    connection.send(f.Credit(command_id, 1, 0))
    assert connection.received() == [f.Error(command_id, f.INVALID_ARGUMENT,
                                              "credit must be at least 1")]


def test_credit_and_ack_for_unknown_subscriptions_and_deliveries_are_ignored(connection):
    connection.open()
    connection.send(f.Credit(connection.command_id(), 99, 5),
                    f.Ack(connection.command_id(), [1, 2, 3]))
    assert connection.received() == []
    assert not connection.closed


def test_two_subscriptions_share_a_queue_round_robin(connection, engine):
    connection.open()
    connection.subscribe("q", credit=10, subscription=1)
    connection.subscribe("q", credit=10, subscription=2)
    connection.received()
    engine.enqueue("q", b"a", b"b", b"c", b"d")
    assert [(d.subscription, d.body) for d in deliveries(connection.received())] == [
        (1, b"a"), (2, b"b"), (1, b"c"), (2, b"d"),
    ]


def test_ack_spanning_subscriptions(connection, engine):
    engine.enqueue("a", b"a1")
    engine.enqueue("b", b"b1")
    connection.open()
    connection.subscribe("a", credit=5, subscription=1)
    connection.subscribe("b", credit=5, subscription=2)
    got = deliveries(connection.received())
    connection.send(f.Ack(connection.command_id(), [d.delivery_id for d in got]))
    assert engine.queues.depths() == {}


def test_unsubscribe_returns_unacknowledged(connection, factory, engine):
    engine.enqueue("q", b"1", b"2", b"3")
    connection.open()
    connection.subscribe("q", credit=2, subscription=4)
    first = deliveries(connection.received())
    connection.send(f.Ack(connection.command_id(), [first[0].delivery_id]))
    command_id = connection.command_id()
    connection.send(f.Unsubscribe(command_id, 4))
    assert connection.received() == [f.Confirm(command_id, "")]
    engine.enqueue("q", b"4")
    assert connection.received() == []  # No longer subscribed.
    other = Connection(factory)
    other.open()
    other.subscribe("q", credit=10)
    got = deliveries(other.received())
    assert [(d.body, d.redelivered) for d in got] == [
        (b"2", True), (b"3", False), (b"4", False),
    ]
    # The subscription id is free again.
    connection.subscribe("q", credit=0, subscription=4)
    assert isinstance(connection.received()[0], f.Confirm)


def test_unsubscribe_unknown(connection):
    connection.open()
    command_id = connection.command_id()
    connection.send(f.Unsubscribe(command_id, 3))
    assert connection.received()[0].code == f.INVALID_ARGUMENT


def test_session_expiry_requeues_unacknowledged(connection, factory, engine, clock):
    engine.enqueue("q", b"1", b"2")
    connection.open()
    connection.subscribe("q", credit=5)
    assert len(deliveries(connection.received())) == 2
    connection.lose()
    assert engine.queues.consumer_counts() == {"q": 1}  # until keep-alive passes
    clock.advance(factory.settings.keep_alive_ms / 1000)
    assert engine.queues.consumer_counts() == {}
    other = Connection(factory)
    other.open()
    other.subscribe("q", credit=5)
    assert [(d.body, d.redelivered) for d in deliveries(other.received())] == [
        (b"1", True), (b"2", True),
    ]


def test_protocol_error_requeues_unacknowledged(connection, engine):
    engine.enqueue("q", b"1")
    connection.open()
    connection.subscribe("q", credit=5)
    connection.received()
    connection.protocol.dataReceived(b"\x00\x00\x00\x01\xc1")
    assert_closed_with(connection, f.PROTOCOL_ERROR)
    assert engine.queues.consumer_counts() == {}


# -- ping and close ------------------------------------------------------------


def test_ping(connection):
    connection.open()
    connection.send(f.Ping(41), f.Pong(3))
    assert connection.received() == [f.Pong(41)]


def test_close_waits_for_sends_in_progress(connection, engine, factory):
    connection.open()
    connection.send(f.Send(1, "q", {}, b"x", True), f.Close(2))
    assert connection.received() == []
    assert not connection.closed
    engine.submitted[0].deferred.callback("id-1")
    assert connection.received() == [f.Confirm(1, "id-1"), f.Closed()]
    assert connection.closed
    assert factory.sessions.describe() == []


def test_close_cancels_subscriptions(connection, engine):
    engine.enqueue("q", b"1")
    connection.open()
    connection.subscribe("q", credit=5)
    connection.received()
    connection.send(f.Close(connection.command_id()))
    assert connection.received() == [f.Closed()]
    assert engine.queues.consumer_counts() == {}
    engine.enqueue("q", b"2")
    assert connection.received() == []


def test_close_after_acks_waits_for_them(connection, engine):
    """
    Closed promises that acknowledged deliveries are gone for good.
    """
    from twisted.internet.defer import Deferred

    engine.enqueue("q", b"1")
    connection.open()
    connection.subscribe("q", credit=5)
    (delivery,) = deliveries(connection.received())
    consumed = Deferred()
    real_consume = engine.store.consume
    engine.queues.store = type("SlowStore", (), {
        "consume": lambda self, ids: consumed.addCallback(lambda _: real_consume(ids)),
        "__getattr__": lambda self, name: getattr(engine.store, name),
    })()
    connection.send(f.Ack(connection.command_id(), [delivery.delivery_id]),
                    f.Close(connection.command_id()))
    assert connection.received() == []
    consumed.callback(None)
    assert connection.received() == [f.Closed()]
    assert engine.queues.depths() == {}


def test_commands_after_close_are_refused(connection, engine):
    connection.open()
    connection.send(f.Send(1, "q", {}, b"x", True), f.Close(2), f.Send(3, "q", {}, b"y", True))
    assert_closed_with(connection, f.BAD_COMMAND)
    assert len(engine.submitted) == 1


def test_close_before_open(connection):
    connection.send(f.Close(1))
    assert_closed_with(connection, f.BAD_COMMAND)


# -- fuzzing the whole protocol ------------------------------------------------


@FUZZ
@given(st.lists(st.one_of(st.binary(max_size=40), frames_strategy.map(encode)), max_size=8))
def test_arbitrary_input_never_breaks_the_router(tmp_path_factory, chunks):
    """
    Whatever a client sends, the router either carries on or answers
    Error(0) and closes; it never raises.
    """
    clock = Clock()
    engine = FakeEngine(str(tmp_path_factory.mktemp("fuzz") / "store.sqlite"), clock)
    try:
        connection = Connection(ClientFactory(engine, clock))
        for chunk in chunks:
            connection.protocol.dataReceived(chunk)
        try:
            frames = connection.received()
        except WireError:
            pytest.fail("the router wrote an undecodable frame")
        errors = [frame for frame in frames if isinstance(frame, f.Error)]
        if connection.closed:
            assert errors and errors[-1].command_id == 0
        connection.lose()
        for submitted in engine.submitted:
            submitted.deferred.callback("id")
    finally:
        engine.close()
