"""
Tests for the Twisted client API (L{meshroute.client}) and the
C{meshroute send} / C{meshroute receive} commands built on it, against the
router's L{ClientProtocol} through an in-memory connection (iosim) with a
fake engine.

Connecting opens a session; pipelined sends are confirmed each with its
message id or refused with the router's code; subscriptions deliver,
acknowledgements are batched and keep the prefetch window full; close
waits for what is in flight; a lost connection fails what is pending.
"""

import io
import json

import pytest
import pytest_twisted
from hypothesis import given, settings
from hypothesis import strategies as st
from twisted.internet.defer import ensureDeferred, succeed
from twisted.internet.task import Clock
from twisted.python import usage
from twisted.test import iosim

from meshroute import cli
from meshroute.cli import receive_command, send_command
from meshroute.client import (
    CONNECTION_LOST,
    DISCONNECT,
    ClientOptions,
    UNBLOCKED,
    UnblockedError,
    ReceivedMessage,
    SendError,
    SessionError,
    SubscribeError,
    connect_endpoint,
    describe_body,
)
from meshroute.wire import client_frames as f
from meshroute.sessions.native_listener import ClientFactory

from support.client_testing import (  # noqa: F401 (a fixture)
    failure_of,
    kept_clients,
    meshroute_command,
    result_of,
)
from support.client_testing import parse_command as parse
from support.client_testing import run_command as run
from support.fake_router import ROUTER, FakeEngine, Harness


@pytest.fixture
def auto_engine(tmp_path, clock):
    engine = FakeEngine(str(tmp_path / "auto.sqlite"), clock, auto=True)
    yield engine
    engine.close()


@pytest.fixture
def harness(engine, clock):
    return Harness(engine, clock)


@pytest.fixture
def auto(auto_engine, clock):
    return Harness(auto_engine, clock)


# -- connecting ----------------------------------------------------------------


def test_connect_opens_a_session(harness):
    client = harness.connect("producer-7")
    assert client.router == ROUTER
    assert client.client_id == "producer-7"
    assert len(client.session_id) == 32
    (session,) = harness.factory.sessions.describe()
    assert session["client_id"] == "producer-7"


def test_connect_times_out_without_an_answer(clock, harness):
    class Silent:
        def connect(self, factory):
            from twisted.internet.testing import StringTransport

            protocol = factory.buildProtocol(None)
            self.transport = StringTransport()
            self.protocol = protocol
            protocol.makeConnection(self.transport)
            return succeed(protocol)

    silent = Silent()
    d = connect_endpoint(clock, silent, client_id="c", open_timeout_ms=5000)
    clock.advance(5)
    assert silent.transport.disconnected
    silent.protocol.connectionLost(None)
    error = failure_of(d)
    assert isinstance(error, SessionError) and error.code == "timeout"


def test_connect_refused_by_the_router(clock, tmp_path):
    engine = FakeEngine(str(tmp_path / "s.sqlite"), clock)
    try:
        h = Harness(engine, clock)
        from meshroute.sessions.native_connection import NativeConnectionCore

        original = NativeConnectionCore.vet_open
        NativeConnectionCore.vet_open = lambda self, frame: (
            f.UNSUPPORTED_VERSION, "this router speaks [2]")
        try:
            d = connect_endpoint(clock, h.endpoint, client_id="c")
            h.flush()
        finally:
            NativeConnectionCore.vet_open = original
        error = failure_of(d)
        assert isinstance(error, SessionError)
        assert (error.code, error.detail) == (f.UNSUPPORTED_VERSION, "this router speaks [2]")
    finally:
        engine.close()


def test_connection_failure(clock):
    from twisted.internet.defer import fail

    class Refusing:
        def connect(self, factory):
            return fail(ConnectionRefusedError("nobody there"))

    error = failure_of(connect_endpoint(clock, Refusing(), client_id="c"))
    assert isinstance(error, SessionError) and error.code == CONNECTION_LOST


# -- sending -------------------------------------------------------------------


def test_send_fires_with_the_message_id(harness, engine):
    client = harness.connect()
    d = client.send("orders@router-c", b"hello", {"k": "v"})
    harness.flush()
    (submitted,) = engine.submitted
    assert (submitted.address, submitted.body, submitted.headers, submitted.persistent) == (
        "orders@router-c", b"hello", {"k": "v"}, True)
    assert not d.called
    submitted.deferred.callback("router-a:x:1")
    harness.flush()
    assert result_of(d) == "router-a:x:1"


def test_non_persistent_send(harness, engine):
    client = harness.connect()
    client.send("q", b"x", persistent=False)
    harness.flush()
    assert engine.submitted[0].persistent is False


def test_pipelined_sends(harness, engine):
    client = harness.connect()
    sends = [client.send("q", b"%d" % n) for n in range(500)]
    harness.flush()
    assert len(engine.submitted) == 500
    for n, submitted in reversed(list(enumerate(engine.submitted))):
        submitted.deferred.callback(f"id-{n}")
    harness.flush()
    assert [result_of(d) for d in sends] == [f"id-{n}" for n in range(500)]


def test_send_refused(harness, engine):
    from support.fake_router import FakeBacklogFull

    client = harness.connect()
    refused, accepted = client.send("q@router-x", b"1"), client.send("q", b"2")
    harness.flush()
    engine.submitted[0].deferred.errback(FakeBacklogFull("too many wait for router-x"))
    engine.submitted[1].deferred.callback("id-2")
    harness.flush()
    error = failure_of(refused)
    assert isinstance(error, SendError)
    assert (error.code, error.detail) == ("backlog-full", "too many wait for router-x")
    assert result_of(accepted) == "id-2"


def test_bad_address_with_the_real_parser(auto):
    client = auto.connect()
    d = client.send("no good@", b"x")
    auto.flush()
    error = failure_of(d)
    assert isinstance(error, SendError) and error.code == "bad-address"


def test_a_message_too_large_for_a_frame_fails_without_being_sent(harness, engine):
    """
    A message that cannot fit in one client frame fails at once with a
    C{too-large} error naming the limit; the router never sees it (it would
    close the connection on it) and the session goes on.
    """
    client = harness.connect()
    refused = client.send("q", b"x" * f.MAX_FRAME_SIZE)
    fits = client.send("q", b"x" * (f.MAX_FRAME_SIZE - 1024), {"k": "v"})
    harness.flush()
    error = failure_of(refused)
    assert isinstance(error, SendError) and error.code == "too-large"
    assert f"at most {f.MAX_FRAME_SIZE} bytes" in error.detail
    (submitted,) = engine.submitted
    submitted.deferred.callback("id-1")
    harness.flush()
    assert result_of(fits) == "id-1"


@given(body=st.integers(0, 64), headers=st.dictionaries(st.text(max_size=8), st.text(max_size=8),
                                                     max_size=4),
       address=st.text(max_size=40), duplicate_id=st.text(max_size=20),
       room=st.integers(-300, 300))
@settings(max_examples=200, deadline=None)
def test_oversized_send_agrees_with_the_encoded_size(body, headers, address, duplicate_id, room):
    """
    The shortcut below the limit never hides a frame above it: near the
    limit, the answer is exactly whether the encoded Send exceeds it.
    """
    from meshroute.wire.codec import body_size

    overhead = body_size(f.Send(2**63 - 1, address, headers, b"", True, duplicate_id))
    size = max(0, f.MAX_FRAME_SIZE - overhead + room) + body
    payload = b"x" * size
    encoded = body_size(f.Send(2**63 - 1, address, headers, payload, True, duplicate_id))
    reason = f.oversized_send(address, headers, payload, True, duplicate_id)
    assert (reason is not None) == (encoded > f.MAX_FRAME_SIZE)


def test_send_checks_its_arguments(harness):
    client = harness.connect()
    with pytest.raises(TypeError):
        client.send("q", "text")
    with pytest.raises(TypeError):
        client.send("q", b"x", {"n": 1})
    with pytest.raises(TypeError):
        client.send(b"q", b"x")
    with pytest.raises(TypeError):
        client.send("q", b"x", duplicate_id=7)
    with pytest.raises(TypeError):
        client.subscribe(b"q", lambda m: None)
    assert client.send("q", bytearray(b"ok")) is not None


def test_pending_sends_fail_when_the_connection_is_lost(harness, engine):
    """
    Without reconnect-attempts (the default) a lost connection is given up
    at once: calls in progress fail with the unblocked error.
    """
    client = harness.connect()
    events = []
    client.add_failure_listener(events.append)
    d = client.send("q", b"x")
    harness.flush()
    closed = client.when_closed()
    harness.endpoint.pump.serverIO.loseConnection()
    harness.flush()
    error = failure_of(d)
    assert isinstance(error, UnblockedError) and error.code == UNBLOCKED
    assert events == [DISCONNECT]
    assert failure_of(closed).code == CONNECTION_LOST
    later = failure_of(client.send("q", b"y"))
    assert isinstance(later, SessionError) and later.code == CONNECTION_LOST


# -- consuming -----------------------------------------------------------------


def test_subscribe_receive_ack(harness, engine):
    sent = engine.enqueue("orders", b"one", b"two")
    client = harness.connect()
    got: list[ReceivedMessage] = []
    d = client.subscribe("orders", got.append, prefetch=10)
    harness.flush()
    subscription = result_of(d)
    assert subscription.queue == "orders"
    assert [(m.body, m.msg_id, m.queue, m.origin, m.redelivered) for m in got] == [
        (b"one", sent[0].msg_id, "orders", ROUTER, False),
        (b"two", sent[1].msg_id, "orders", ROUTER, False),
    ]
    for message in got:
        message.ack()
        message.ack()  # Twice is harmless.
    after_the_ack_delay(harness)
    assert engine.queues.depths() == {}


def after_the_ack_delay(harness) -> None:
    """
    Acknowledgements that went with nothing else waited C{ack_delay_ms}.
    """
    harness.flush()
    harness.clock.advance(ClientOptions.ack_delay_ms / 1000)
    harness.flush()


def test_prefetch_bounds_unacknowledged_messages(harness, engine):
    engine.enqueue("q", *[b"%d" % n for n in range(10)])
    client = harness.connect()
    got: list[ReceivedMessage] = []
    client.subscribe("q", got.append, prefetch=3)
    harness.flush()
    assert len(got) == 3
    got[0].ack()
    after_the_ack_delay(harness)
    assert len(got) == 4
    for message in got[1:]:
        message.ack()
    harness.flush()  # 3 owed, half the prefetch or more: they go at once
    assert len(got) == 7


def test_acks_are_batched_per_turn(harness, engine):
    engine.enqueue("q", *[b"%d" % n for n in range(5)])
    client = harness.connect()
    got: list[ReceivedMessage] = []
    client.subscribe("q", got.append, prefetch=5)
    harness.flush()
    server_frames = client_frames_of(harness.endpoint.server)
    for message in got:
        message.ack()
    harness.flush()
    (ack,) = [frame for frame in server_frames if type(frame) is f.Ack]
    assert ack.delivery_ids == [m.delivery_id for m in got]


def test_acking_inside_on_message_streams_a_long_queue(harness, engine):
    engine.enqueue("q", *[b"%d" % n for n in range(300)])
    client = harness.connect()
    got = []

    def on_message(message):
        got.append(message.body)
        message.ack()

    client.subscribe("q", on_message, prefetch=10)
    harness.flush()
    assert got == [b"%d" % n for n in range(300)]
    assert engine.queues.depths() == {}


def test_max_messages_stops_credit(harness, engine):
    engine.enqueue("q", *[b"%d" % n for n in range(10)])
    client = harness.connect()
    got = []

    def on_message(message):
        got.append(message)
        message.ack()

    client.subscribe("q", on_message, prefetch=3, max_messages=5)
    after_the_ack_delay(harness)
    assert len(got) == 5
    assert engine.queues.depths() == {"q": 5}


def test_subscribe_refused(harness):
    client = harness.connect()
    d = client.subscribe("bad/name", lambda m: None)
    harness.flush()
    error = failure_of(d)
    assert isinstance(error, SubscribeError) and error.code == "bad-address"


def test_cancel_returns_unacknowledged_messages(harness, engine):
    engine.enqueue("q", b"1", b"2")
    client = harness.connect()
    got = []
    d = client.subscribe("q", got.append, prefetch=5)
    harness.flush()
    got[0].ack()
    cancelled = result_of(d).cancel()
    harness.flush()
    assert result_of(cancelled) is None
    assert engine.queues.depths() == {"q": 1}
    again = []
    client.subscribe("q", again.append)
    harness.flush()
    assert [(m.body, m.redelivered) for m in again] == [(b"2", True)]


def test_on_message_raising_is_logged(harness, engine, observe_errors):
    engine.enqueue("q", b"1")
    client = harness.connect()

    def on_message(message):
        raise RuntimeError("application bug")

    client.subscribe("q", on_message)
    harness.flush()
    assert len(observe_errors.take(lambda e: e.get("log_failure") is not None)) == 1


def test_end_to_end_send_and_receive(auto):
    producer, consumer = auto.connect("producer"), auto.connect("consumer")
    sends = [producer.send("q", b"%d" % n, {"n": str(n)}) for n in range(20)]
    sends.append(producer.send("q", b"fast", persistent=False))
    auto.flush()
    ids = [result_of(d) for d in sends]
    got = []

    def on_message(message):
        got.append(message)
        message.ack()

    consumer.subscribe("q", on_message, prefetch=7)
    auto.flush()
    assert sorted(m.msg_id for m in got) == sorted(ids)
    persistent = [m for m in got if m.body != b"fast"]
    assert [m.body for m in persistent] == [b"%d" % n for n in range(20)]
    assert persistent[3].headers == {"n": "3"}


# -- ping and close ------------------------------------------------------------


def test_ping(harness, clock):
    client = harness.connect()
    d = client.ping()
    harness.flush()
    assert result_of(d) == 0


def test_close_waits_for_sends_in_flight(harness, engine):
    client = harness.connect()
    send = client.send("q", b"x")
    closed = client.close()
    harness.flush()
    assert not send.called and not closed.called
    engine.submitted[0].deferred.callback("id")
    harness.flush()
    assert result_of(send) == "id"
    assert result_of(closed) is None
    assert harness.factory.sessions.describe() == []
    assert isinstance(failure_of(client.send("q", b"y")), SessionError)
    assert result_of(client.close()) is None


def test_close_flushes_acks_first(harness, engine):
    engine.enqueue("q", b"1", b"2")
    client = harness.connect()
    got = []
    client.subscribe("q", got.append)
    harness.flush()
    for message in got:
        message.ack()
    d = client.close()
    harness.flush()
    assert result_of(d) is None
    assert engine.queues.depths() == {}


def test_unacknowledged_messages_go_back_on_close(harness, engine):
    engine.enqueue("q", b"1")
    client = harness.connect()
    client.subscribe("q", lambda m: None)
    harness.flush()
    client.close()
    harness.flush()
    assert engine.queues.depths() == {"q": 1}
    assert engine.queues.consumer_counts() == {}


def test_router_protocol_violation_ends_the_session(harness):
    client = harness.connect()
    d = client.send("q", b"x")
    harness.flush()
    harness.endpoint.pump.clientIO.protocol.dataReceived(b"\x00\x00\x00\x01\xc1")
    harness.flush()
    assert isinstance(failure_of(d), UnblockedError)
    assert failure_of(client.when_closed()).code == f.PROTOCOL_ERROR


def client_frames_of(server) -> list:
    """
    From now on, every frame the router's protocol C{server} receives, in a
    list.
    """
    from meshroute.wire.codec import FrameDecoder

    frames: list = []
    decoder = FrameDecoder(frames=f.FROM_CLIENT)
    original = server.dataReceived

    def data_received(data):
        frames.extend(decoder.feed(data))
        original(data)

    server.dataReceived = data_received
    return frames


def test_describe_body():
    assert describe_body("héllo".encode()) == {"body": "héllo"}
    assert describe_body(b"\xff\x00") == {"body": "/wA=", "encoding": "base64"}


# -- the commands --------------------------------------------------------------


def test_send_command(auto):
    d, out, err = run(send_command.run_send, auto,
                      ["send", "--connect", "tcp:x:1", "--to", "q", "--count", "2500"])
    auto.flush()
    assert result_of(d) == 0, err.getvalue()
    assert out.getvalue() == "2500 messages to q accepted\n"
    assert auto.engine.store.queue_depths() == {"q": 2500}


def test_send_command_bodies(auto):
    # A --body that is not UTF-8 reaches argv with surrogate escapes
    # (os.fsdecode): its raw bytes are sent.
    for argv, body in ([["--body", "hé"], "hé".encode()], [["--size", "5"], b"xxxxx"],
                       [[], b"message 1"], [["--body", "caf\udce9 \udcff"], b"caf\xe9 \xff"]):
        d, out, err = run(send_command.run_send, auto,
                          ["send", "--connect", "tcp:x:1", "--to", "b", *argv])
        auto.flush()
        assert result_of(d) == 0
        got = []
        c = auto.connect()
        c.subscribe("b", lambda m: (got.append(m.body), m.ack()))
        auto.flush()
        assert got == [body]
        c.close()
        auto.flush()


def test_send_command_keeps_a_bounded_window(harness, engine):
    d, out, err = run(send_command.run_send, harness,
                      ["send", "--connect", "tcp:x:1", "--to", "q", "--count", "2500"])
    harness.flush()
    assert len(engine.submitted) == send_command.SEND_WINDOW
    # The window's sends travelled together (a SendBatch): answered together.
    for submitted in engine.submitted[:10]:
        submitted.deferred.callback("id")
    harness.flush()
    assert len(engine.submitted) == send_command.SEND_WINDOW
    for submitted in engine.submitted[10:]:
        submitted.deferred.callback("id")
    harness.flush()
    assert len(engine.submitted) == 2 * send_command.SEND_WINDOW
    n = send_command.SEND_WINDOW
    while not d.called:
        for submitted in engine.submitted[n:]:
            submitted.deferred.callback("id")
        n = len(engine.submitted)
        harness.flush()
    assert result_of(d) == 0
    assert len(engine.submitted) == 2500


def test_send_command_error(auto):
    d, out, err = run(send_command.run_send, auto,
                      ["send", "--connect", "tcp:x:1", "--to", "q@router-x", "--count", "3"])
    auto.flush()
    assert result_of(d) == 1
    assert err.getvalue() == (
        "meshroute: send to q@router-x failed: message 1: unknown-router: "
        "no router router-x in the mesh\n"
    )


def test_send_command_cannot_connect(harness):
    def refused(reactor, endpoint, client_id=None):
        from twisted.internet.defer import fail

        return fail(SessionError(CONNECTION_LOST, "Connection was refused"))

    out, err = io.StringIO(), io.StringIO()
    d = ensureDeferred(send_command.run_send(harness.clock, parse(
        ["send", "--connect", "tcp:127.0.0.1:1", "--to", "q"]), out, err, connect=refused))
    assert result_of(d) == 1
    assert "cannot open a session at tcp:127.0.0.1:1" in err.getvalue()


@pytest.mark.parametrize("argv, message", [
    (["send", "--to", "q"], "--connect is required"),
    (["send", "--connect", "tcp:x:1"], "one of --to and --topic is required"),
    (["send", "--connect", "c", "--to", "q", "--size", "3", "--body", "b"], "exclude"),
    (["send", "--connect", "c", "--to", "q", "--count", "0"], "at least 1"),
    (["receive", "--connect", "c"], "one of --queue and --topic is required"),
    (["receive", "--connect", "c", "--queue", "q", "--timeout", "-1"], "positive"),
])
def test_command_usage_errors(argv, message):
    with pytest.raises(usage.UsageError, match=message):
        parse(argv)


@pytest.mark.parametrize("command", [
    ["send", "--to", "q"], ["receive", "--queue", "q"],
])
@pytest.mark.parametrize("endpoint, fragments", [
    ("127.0.0.1:6001", ["not an endpoint string", "write tcp:127.0.0.1:6001"]),
    ("localhost:6001", ["write tcp:localhost:6001"]),
    ("6001", ["tcp:HOST:PORT"]),
    ("tcp:127.0.0.1:99999", ["port must be 1..65535"]),
])
def test_connect_must_be_an_endpoint_string(harness, command, endpoint, fragments):
    """
    C{--connect HOST:PORT} is a usage error (exit status 2) that says how
    to write it, not a traceback; the command connects nowhere.
    """
    connect = {"send": send_command.run_send, "receive": receive_command.run_receive}[command[0]]
    out, err = io.StringIO(), io.StringIO()
    options = parse(command + ["--connect", endpoint])
    d = ensureDeferred(connect(harness.clock, options, out, err,
                               connect=harness.connect_for_cli))
    assert result_of(d) == 2
    assert err.getvalue().startswith(f"meshroute: --connect {endpoint}: ")
    for fragment in fragments:
        assert fragment in err.getvalue()
    assert harness.endpoint.pumps == []


@pytest.mark.parametrize("command", [["send", "--to", "q"], ["receive", "--queue", "q"]])
def test_connect_is_repeatable(command):
    """
    C{--connect} (or C{-c}) given several times: every endpoint, in order,
    handed to L{meshroute.client.connect} as a list.
    """
    options = parse(command + ["--connect", "tcp:127.0.0.1:6001", "-c", "tcp:127.0.0.1:6101"])
    assert options["connect"] == ["tcp:127.0.0.1:6001", "tcp:127.0.0.1:6101"]
    assert parse(command + ["-c", "tcp:127.0.0.1:6001"])["connect"] == ["tcp:127.0.0.1:6001"]


def test_connect_given_twice_is_a_usage_error():
    with pytest.raises(usage.UsageError, match="--connect tcp:x:1 is given more than once"):
        parse(["send", "--to", "q", "-c", "tcp:x:1", "-c", "tcp:x:2", "-c", "tcp:x:1"])


def test_every_connect_is_checked(harness):
    """
    Every C{--connect} is checked, not just the last: a usage error
    naming the bad one, and no connection.
    """
    out, err = io.StringIO(), io.StringIO()
    options = parse(["send", "--to", "q", "-c", "127.0.0.1:6101", "-c", "tcp:127.0.0.1:6001"])
    d = ensureDeferred(send_command.run_send(harness.clock, options, out, err,
                                    connect=harness.connect_for_cli))
    assert result_of(d) == 2
    assert err.getvalue().startswith("meshroute: --connect 127.0.0.1:6101: not an endpoint")
    assert harness.endpoint.pumps == []


def test_cannot_connect_names_every_endpoint(harness):
    seen = []

    def refused(reactor, endpoints, options):
        from twisted.internet.defer import fail

        seen.append(endpoints)
        return fail(SessionError(CONNECTION_LOST, "Connection was refused"))

    out, err = io.StringIO(), io.StringIO()
    d = ensureDeferred(receive_command.run_receive(harness.clock, parse(
        ["receive", "-c", "tcp:127.0.0.1:1", "-c", "tcp:127.0.0.1:2", "--queue", "q"]),
        out, err, connect=refused))
    assert result_of(d) == 1
    assert seen == [["tcp:127.0.0.1:1", "tcp:127.0.0.1:2"]]
    assert "cannot open a session at tcp:127.0.0.1:1, tcp:127.0.0.1:2: " in err.getvalue()


def test_a_message_larger_than_a_frame_is_a_usage_error_naming_the_limit():
    limit = str(f.MAX_FRAME_SIZE)
    with pytest.raises(usage.UsageError, match=f"at most {limit} bytes"):
        parse(["send", "--connect", "tcp:x:1", "--to", "q", "--size", limit])
    with pytest.raises(usage.UsageError, match=f"at most {limit} bytes"):
        parse(["send", "--connect", "tcp:x:1", "--to", "q", "--body", "x" * f.MAX_FRAME_SIZE])
    # Well below it is fine, and --help says what the limit is.
    parse(["send", "--connect", "tcp:x:1", "--to", "q", "--size", str(f.MAX_FRAME_SIZE // 2)])
    assert limit in " ".join(str(send_command.SendOptions()).split())


def test_status_of_something_that_is_not_an_admin_api(capsys):
    """
    C{status --admin} pointed at a port that does not speak HTTP (a
    routing listener, say) is a clear error, not a traceback.
    """
    import socket
    import threading

    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen()

    def answer_garbage():
        connection, _ = server.accept()
        with connection:
            connection.recv(1024)
            connection.sendall(b"\x00\x00\x00\x05\x95hello\r\n\r\n")

    thread = threading.Thread(target=answer_garbage)
    thread.start()
    try:
        url = f"http://127.0.0.1:{server.getsockname()[1]}"
        assert cli.main(["status", "--admin", url], out=io.StringIO()) == 1
    finally:
        thread.join(10)
        server.close()
    err = capsys.readouterr().err
    assert err.startswith(f"meshroute: cannot read {url}: ")
    assert "not an HTTP" in err and "Traceback" not in err


@pytest.mark.parametrize("argv", [["--version"], ["send", "--version"], ["status", "--version"]])
def test_version_is_meshroute_s(argv, capsys):
    from meshroute import __version__

    with pytest.raises(SystemExit) as exit:
        cli.main(argv)
    assert exit.value.code == 0
    assert capsys.readouterr().out == f"meshroute {__version__}\n"


def test_receive_command_json(harness, engine):
    message = engine.message("q", b"\xff\xfe", {"k": "v"})
    engine.store.accept(message)
    engine.enqueue("q", "héllo".encode())
    d, out, err = run(receive_command.run_receive, harness,
                      ["receive", "--connect", "tcp:x:1", "--queue", "q", "--count", "2",
                       "--json"])
    harness.flush()
    assert result_of(d) == 0, err.getvalue()
    lines = [json.loads(line) for line in out.getvalue().splitlines()]
    assert lines[0] == {"id": message.msg_id, "body": "//4=", "encoding": "base64",
                        "headers": {"k": "v"}, "redelivered": False}
    assert lines[1]["body"] == "héllo" and "encoding" not in lines[1]
    assert engine.queues.depths() == {}


def test_receive_command_takes_no_more_than_count(harness, engine):
    engine.enqueue("q", *[b"%d" % n for n in range(5)])
    d, out, err = run(receive_command.run_receive, harness,
                      ["receive", "--connect", "tcp:x:1", "--queue", "q", "--count", "2"])
    harness.flush()
    assert result_of(d) == 0
    assert out.getvalue() == "0\n1\n"
    # Nothing else was delivered, so nothing comes back redelivered.
    rest = []
    c = harness.connect()
    c.subscribe("q", rest.append)
    harness.flush()
    assert [(m.body, m.redelivered) for m in rest] == [(b"2", False), (b"3", False),
                                                        (b"4", False)]


def test_receive_command_timeout(harness, engine, clock):
    engine.enqueue("q", b"only")
    d, out, err = run(receive_command.run_receive, harness,
                      ["receive", "--connect", "tcp:x:1", "--queue", "q", "--count", "3",
                       "--timeout", "2"])
    harness.flush()
    assert not d.called
    clock.advance(2)
    harness.flush()
    assert result_of(d) == 1
    assert out.getvalue() == "only\n"
    assert err.getvalue() == "meshroute: received 1 of 3 messages before the timeout\n"
    assert engine.queues.depths() == {}


def test_receive_command_timeout_without_count_is_success(harness, engine, clock):
    d, out, err = run(receive_command.run_receive, harness,
                      ["receive", "--connect", "tcp:x:1", "--queue", "q", "--timeout", "1"])
    harness.flush()
    clock.advance(1)
    harness.flush()
    assert result_of(d) == 0
    assert out.getvalue() == ""


def test_receive_command_connection_lost(harness, engine):
    d, out, err = run(receive_command.run_receive, harness,
                      ["receive", "--connect", "tcp:x:1", "--queue", "q"])
    harness.flush()
    harness.endpoint.pump.serverIO.loseConnection()
    harness.flush()
    assert result_of(d) == 1
    assert "connection-lost" in err.getvalue()


def test_receive_command_bad_queue(harness):
    d, out, err = run(receive_command.run_receive, harness,
                      ["receive", "--connect", "tcp:x:1", "--queue", "no/such"])
    harness.flush()
    assert result_of(d) == 1
    assert "bad-address" in err.getvalue()


def test_a_busy_session_stays_in_step_with_the_router(harness, engine):
    """
    Subscribe, send, ack and credit from one client: the router accepts
    every command id in sequence and the session stays open.
    """
    engine.enqueue("q", b"1", b"2")
    client = harness.connect()
    got = []
    client.subscribe("q", got.append, prefetch=1)
    client.send("q", b"x")
    harness.flush()
    got[0].ack()
    harness.flush()
    assert [m.body for m in got] == [b"1", b"2"]
    (session,) = harness.factory.sessions.describe()
    # Subscribe, Send, then one Ack and one Credit.
    assert session["last_command_id"] == 4
    assert session["state"] == "open"
    assert session["unacknowledged"] == 1


# -- the commands as processes, against a real listener ------------------------


@pytest_twisted.ensureDeferred
async def test_send_and_receive_processes(tmp_path):
    from twisted.internet import reactor
    from twisted.internet.endpoints import serverFromString

    engine = FakeEngine(str(tmp_path / "store.sqlite"), reactor, auto=True)
    port = await serverFromString(reactor, "tcp:0:interface=127.0.0.1").listen(
        ClientFactory(engine, reactor))
    endpoint = f"tcp:127.0.0.1:{port.getHost().port}"
    try:
        out, err, status = await meshroute_command(
            "send", "--connect", endpoint, "--to", "orders", "--count", "3000")
        assert (status, err) == (0, b"")
        assert out == b"3000 messages to orders accepted\n"
        out, err, status = await meshroute_command(
            "receive", "--connect", endpoint, "--queue", "orders", "--count", "3000", "--json",
            "--timeout", "60")
        assert (status, err) == (0, b"")
        lines = [json.loads(line) for line in out.decode().splitlines()]
        assert [line["body"] for line in lines] == [f"message {n}" for n in range(1, 3001)]
        assert all(line["redelivered"] is False and line["headers"] == {} for line in lines)
        assert engine.store.queue_depths() == {}
        out, err, status = await meshroute_command(
            "send", "--connect", endpoint, "--to", "orders@router-x")
        assert status == 1
        assert err == (b"meshroute: send to orders@router-x failed: message 1: "
                       b"unknown-router: no router router-x in the mesh\n")
        out, err, status = await meshroute_command(
            "receive", "--connect", endpoint, "--queue", "orders", "--count", "1",
            "--timeout", "0.5")
        assert status == 1
        assert err == b"meshroute: received 0 of 1 messages before the timeout\n"
    finally:
        await port.stopListening()
        engine.close()


@pytest_twisted.ensureDeferred
async def test_commands_report_a_router_that_is_not_there():
    out, err, status = await meshroute_command(
        "send", "--connect", "tcp:127.0.0.1:1:timeout=5", "--to", "q")
    assert status == 1
    assert err.startswith(b"meshroute: cannot open a session at tcp:127.0.0.1:1:timeout=5: "
                          b"connection-lost: ")
    out, err, status = await meshroute_command("receive", "--connect", "tcp:127.0.0.1:1",
                                               "--queue", "q")
    assert status == 1 and b"cannot open a session" in err


@settings(max_examples=150, deadline=None)
@given(st.lists(st.binary(max_size=60), max_size=6), st.booleans())
def test_arbitrary_bytes_from_a_router_never_break_the_client(chunks, reconnect):
    """
    Whatever a router sends, the client either carries on or fails the
    connection (and then reconnects or gives up); it never raises, and
    the call in progress is settled or still pending on a live session.
    """
    from support.fake_router import ScriptedEndpoint

    clock = Clock()
    endpoint = ScriptedEndpoint()
    d = connect_endpoint(clock, endpoint, client_id="fuzz", max_frame_size=1024,
                         reconnect_attempts=1 if reconnect else 0)
    router = endpoint.accept()
    router.open()
    client = result_of(d)
    pending = client.send("q", b"x")
    for chunk in chunks:
        router.protocol.dataReceived(chunk)
    router.lose()
    clock.advance(2)
    if reconnect and len(endpoint.attempts) == 2:
        endpoint.refuse()
    assert pending.called
    pending.addErrback(lambda failure: failure.trap(SessionError, SendError))
    client._finalizer.detach()


def test_duplicate_ids_reach_the_router(auto):
    client = auto.connect()
    first = client.send("q", b"once", duplicate_id="order-17")
    again = client.send("q", b"once", duplicate_id="order-17")
    other = client.send("q", b"other", duplicate_id="order-18")
    auto.flush()
    assert result_of(first) == result_of(again) != result_of(other)
    assert auto.engine.store.queue_depths() == {"q": 2}
