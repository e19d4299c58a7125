"""
Tests that the SEND frames the router reads from one chunk of a STOMP
client's bytes are carried out as one batch (L{meshroute.stomp.connection}
over L{meshroute.sessions.connection_core.ConnectionCore.flush_sends}): one
store call, each SEND still receipted on its own and in order, any other
frame among them ending the batch.
"""

from meshroute.security.credentials import derive
from meshroute.security.policy import Permission, Security, SecurityPolicy

from support.engine_calls import recorded_submits
from support.fake_router import ROUTER
from support.stomp_ends import (  # noqa: F401 (auto_engine is a fixture)
    StompEnd, auto_engine, commands, frame_bytes, make_factory)


def send(n: int, queue: str = "q") -> bytes:
    return frame_bytes("SEND", ("destination", f"/queue/{queue}"), ("receipt", f"r{n}"),
                       body=b"%d" % n)


def receipts(frames) -> list[str]:
    return [frame.header("receipt-id") for frame in frames]


def test_a_read_of_sends_is_one_store_call_receipted_in_order(auto_engine, clock):
    client = StompEnd(make_factory(auto_engine, clock))
    client.connect()
    calls = recorded_submits(auto_engine)
    client.send(b"".join(send(n) for n in range(1, 6)))
    clock.advance(0)
    assert calls == [("submit_many", ["q"] * 5)]
    frames = client.received()
    assert commands(frames) == ["RECEIPT"] * 5
    assert receipts(frames) == ["r1", "r2", "r3", "r4", "r5"]


def test_a_frame_between_sends_ends_their_batch(engine, clock):
    client = StompEnd(make_factory(engine, clock))
    client.connect()
    calls = recorded_submits(engine)
    client.send(send(1) + send(2)
                + frame_bytes("SUBSCRIBE", ("id", "s1"), ("destination", "/queue/other"),
                              ("receipt", "sub"))
                + send(3) + frame_bytes("DISCONNECT", ("receipt", "bye")))
    assert calls == [("submit_many", ["q", "q"]), ("submit", "q")]
    for n, submitted in enumerate(engine.submitted, 1):
        submitted.deferred.callback(f"router-a:{n}")
    clock.advance(0)
    # The subscription was receipted as it was made, the sends once the
    # engine accepted them; the DISCONNECT once everything before it was.
    assert receipts(client.received()) == ["sub", "r1", "r2", "r3", "bye"]
    assert client.closed


def test_a_send_refused_in_a_batch_is_its_error_after_the_receipts_before_it(auto_engine,
                                                                              clock):
    client = StompEnd(make_factory(auto_engine, clock))
    client.connect()
    calls = recorded_submits(auto_engine)
    client.send(send(1) + send(2, "q@nowhere") + send(3))
    clock.advance(0)
    assert calls == [("submit_many", ["q", "q@nowhere", "q"])]
    frames = client.received()
    assert commands(frames) == ["RECEIPT", "ERROR"]
    assert receipts(frames) == ["r1", "r2"] and "nowhere" in frames[1].header("message")
    assert client.closed


def test_a_send_the_user_may_not_make_ends_the_connection_before_the_sends_after_it(
        auto_engine, clock):
    users = {"app": derive("app-pw", iterations=4096)}
    security = Security(SecurityPolicy(ROUTER, users, (Permission(("app",), send=("q",)),)))
    client = StompEnd(make_factory(auto_engine, clock, security=security, secret=b"s" * 32))
    client.connect(("login", "app"), ("passcode", "app-pw"))
    calls = recorded_submits(auto_engine)
    client.send(send(1) + send(2, "secret") + send(3))
    clock.advance(0)
    assert calls == [("submit", "q")]
    frames = client.received()
    assert commands(frames) == ["RECEIPT", "ERROR"] and receipts(frames) == ["r1", "r2"]
    assert client.closed


def test_the_sends_of_a_read_in_a_transaction_are_held_until_its_commit(auto_engine, clock):
    client = StompEnd(make_factory(auto_engine, clock))
    client.connect()
    calls = recorded_submits(auto_engine)
    in_t1 = ("transaction", "t1")
    client.send(frame_bytes("BEGIN", in_t1, ("receipt", "b"))
                + b"".join(frame_bytes("SEND", ("destination", "/queue/out"), in_t1,
                                       ("receipt", f"r{n}"), body=b"%d" % n) for n in (1, 2))
                + frame_bytes("ABORT", in_t1))
    clock.advance(0)
    assert calls == [] and receipts(client.received()) == ["b", "r1", "r2"]
    client.send(frame_bytes("BEGIN", in_t1)
                + b"".join(frame_bytes("SEND", ("destination", "/queue/out"), in_t1,
                                       body=b"%d" % n) for n in (3, 4))
                + frame_bytes("COMMIT", in_t1, ("receipt", "c")))
    clock.advance(0)
    assert receipts(client.received()) == ["c"]
    client.frame("SUBSCRIBE", ("id", "s1"), ("destination", "/queue/out"))
    assert [m.body for m in client.received() if m.command == "MESSAGE"] == [b"3", b"4"]
