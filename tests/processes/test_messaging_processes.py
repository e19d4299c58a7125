"""
Routed messaging as an operator sees it: real C{twistd -n meshroute}
routers on 127.0.0.1, a producer (C{meshroute send}) and a consumer
(C{meshroute receive --json}) as processes of their own, and routers
killed, frozen and stopped in the middle of a stream.

Every message body is numbered (C{meshroute send} without C{--body} sends
C{"message 1"}, C{"message 2"}, ...), so each test checks from what the
consumer printed that every message arrived exactly once and, where the
design promises it, in the producer's order.  "Exactly once" is checked
three ways: the consumer printed each body once; once the mesh is quiet
(no router's store holds anything), the destination queue is empty, so no
second copy waits unseen; and across the event logs of every router, no
message id was enqueued twice.

Order: a producer's persistent messages are enqueued in the order it sent
them (docs/client-protocol.md, "Commands are carried out in order") and,
on one path, stay in that order across link failures, because every store
serves its backlog by entry id and a message returned from a dead link's
outbox keeps its entry id (meshroute/store/outbox.py).  So order is
asserted on a line, whatever fails in it.  When traffic moves to another
path, the messages a dead router had already taken on arrive only when it
comes back, after later ones: there, only exactly once is asserted.

Intervals are short: connector retries every 200 ms, and C{reroute-delay}
1 s (a dead link's unacknowledged messages go back to the backlog after
one second).  The keepalive interval is 1 s, except in the SIGSTOP test
(200 ms, so a frozen peer is dropped after about one second): the
keepalive counter never gives back a beat that a busy peer sent late, so
on a loaded 2-core machine 200 ms links can be dropped in the middle of
a burst, and these tests want their links to close only when they
close them.  Synchronisation is always a poll (the consumer's progress,
the event logs, the admin API, the stores), never a sleep.
"""

import socket
import struct
from collections import Counter

import msgpack
import pytest

from support.routers import (  # noqa: F401 (mesh is a fixture)
    KEEPALIVE_INTERVAL_MS,
    mesh,
    wait_until,
)

#: How long a closed link keeps its unacknowledged messages before they
#: go back to the backlog, in the tests.
REROUTE_DELAY = "1s"
ROUTING = {"reroute-delay": REROUTE_DELAY}

#: The keepalive interval of links that should stay up (see above).
STEADY_KEEPALIVE_MS = 1000

#: The destination queue of every test.
QUEUE = "q"

#: Generous deadlines: a 2-core machine running the whole suite.
STREAM_TIMEOUT_S = 90.0


def _bodies(n: int, first: int = 1) -> list[str]:
    """
    The bodies C{meshroute send --count n} sends, in order.
    """
    return [f"message {i}" for i in range(first, first + n)]


def _line(mesh, routing=ROUTING, keepalive_interval=STEADY_KEEPALIVE_MS):
    """
    Line A–B–C: A connects to B, B to C; each has a client listener.
    Started in parallel; returns the three processes once A and C route
    to each other through B.
    """
    options = {"clients": True, "routing": routing, "keepalive_interval": keepalive_interval}
    c = mesh.router("router-c", **options)
    b = mesh.router("router-b", connect=[c], **options)
    a = mesh.router("router-a", connect=[b], **options)
    a_proc, b_proc, c_proc = mesh.start(a, b, c)
    a_proc.wait_route("router-c", next_hop="router-b")
    c_proc.wait_route("router-a", next_hop="router-b")
    return a_proc, b_proc, c_proc


def _restart(mesh, process):
    """
    Start C{process}'s router again, with the same configuration and
    data-dir, and wait until it serves its admin API.
    """
    [again] = mesh.start(process.spec)
    return again


def _wait_progress(consumer, at_least: int, timeout: float = 30.0) -> int:
    """
    Wait until the consumer printed at least C{at_least} messages; return
    how many it had.
    """

    def progressed():
        if consumer.poll() is not None:
            raise AssertionError(
                f"{consumer.label} exited with {consumer.poll()} early:\n{consumer.stderr}")
        n = consumer.count()
        return n if n >= at_least else None

    return wait_until(progressed, timeout, what=f"{consumer.label} to print {at_least} messages")


def _finish(consumer, timeout: float = STREAM_TIMEOUT_S) -> list[dict]:
    """
    Wait for a C{receive --count N} consumer to exit 0; return what it
    printed.
    """
    code = consumer.wait(timeout)
    assert code == 0, f"{consumer.label} exited with {code}:\n{consumer.stderr}"
    return consumer.messages()


def _finish_send(producer, timeout: float = STREAM_TIMEOUT_S) -> None:
    code = producer.wait(timeout)
    assert code == 0, f"{producer.label} exited with {code}:\n{producer.stderr}"


def _assert_exactly_once(messages: list[dict], expected: list[str], *, in_order: bool) -> None:
    """
    The consumer printed every body of C{expected} exactly once (and, if
    C{in_order}, in that order), nothing else, each under its own
    message id.
    """
    bodies = [m["body"] for m in messages]
    doubled = sorted((b for b, n in Counter(bodies).items() if n > 1), key=_number)
    assert not doubled, f"{len(doubled)} bodies received more than once: {doubled[:10]}"
    missing = sorted(set(expected) - set(bodies), key=_number)
    assert not missing, f"{len(missing)} of {len(expected)} never received: {missing[:10]}"
    foreign = sorted(set(bodies) - set(expected))
    assert not foreign, f"received bodies never sent: {foreign[:10]}"
    ids = [m["id"] for m in messages]
    assert len(set(ids)) == len(ids), "two deliveries carry the same message id"
    if in_order:
        out_of_order = [
            (bodies[i], bodies[i + 1]) for i in range(len(bodies) - 1)
            if _number(bodies[i]) > _number(bodies[i + 1])
        ]
        assert not out_of_order, f"out of order: {out_of_order[:10]}"


def _number(body: str) -> int:
    return int(body.rsplit(" ", 1)[1])


def _wait_quiet(*processes, timeout: float = 30.0) -> None:
    """
    Wait until no router's store holds any message (backlog, outbox or
    queue): every copy of every message has reached its end, so a late
    duplicate can no longer turn up.
    """

    def quiet():
        counts = {p.name: p.store_counts() for p in processes}
        return counts if not any(counts.values()) else None

    try:
        wait_until(quiet, timeout, what="every store to be empty")
    except AssertionError as e:
        counts = {p.name: p.store_counts() for p in processes}
        raise AssertionError(f"{e}; still held: {counts}") from None


def _delivery_closes(process) -> list[dict]:
    """
    The links of C{process} that closed once in delivery.  (Routers start
    in parallel, so a connector may reach a listener whose store is not
    open yet: that connection is closed in the connect stage and retried,
    which is no disturbance.)
    """
    return [e for e in process.events("link.closed") if e["stage"] == "delivery"]


def _audit(processes, origin, destination, messages: list[dict], count: int) -> dict:
    """
    Check from the event logs alone, as the audit of the next issue will,
    that C{origin} accepted C{count} messages for C{QUEUE@destination},
    that C{destination} enqueued each of them exactly once, that no
    router enqueued any message id twice, and that these are the ids the
    consumer printed.

    @return: C{{router name: Counter of its event names}}, for further
        checks.
    """
    address = f"{QUEUE}@{destination.name}"
    accepted = [e["msg_id"] for e in origin.events("message.accepted") if e["dest"] == address]
    assert len(accepted) == count, f"{origin.name} logged {len(accepted)} message.accepted"
    assert len(set(accepted)) == count, "message.accepted logged twice for one msg_id"
    enqueued_anywhere: Counter = Counter()
    by_router = {}
    for process in processes:
        records = process.events()
        by_router[process.name] = Counter(r["event"] for r in records)
        for record in records:
            if record["event"] == "message.enqueued":
                enqueued_anywhere[record["msg_id"]] += 1
                assert record["router"] == destination.name, record
                assert record["queue"] == QUEUE, record
    twice = [msg_id for msg_id, n in enqueued_anywhere.items() if n > 1]
    assert not twice, f"{len(twice)} message ids enqueued more than once: {twice[:5]}"
    assert set(enqueued_anywhere) == set(accepted), (
        f"enqueued {len(enqueued_anywhere)} distinct ids, accepted {len(accepted)}; "
        f"never enqueued: {sorted(set(accepted) - set(enqueued_anywhere))[:5]}"
    )
    assert {m["id"] for m in messages} == set(accepted)
    consumed = [e["msg_id"] for e in destination.events("message.consumed")]
    assert sorted(consumed) == sorted(accepted)
    return by_router


# -- a healthy line -----------------------------------------------------------


def test_line_delivers_ten_thousand_exactly_once_in_order(mesh):
    """
    10,000 messages sent at A to q@router-c arrive at C once each, in the
    order sent; the event logs of A, B and C prove it on their own: 10,000
    accepted at A, forwarded once by A and once by B, 10,000 distinct ids
    enqueued at C and consumed there, no id enqueued twice anywhere, no
    duplicate seen.
    """
    count = 10_000
    a_proc, b_proc, c_proc = _line(mesh)
    consumer = mesh.start_receive(c_proc, QUEUE, count, STREAM_TIMEOUT_S)
    sent = mesh.send(a_proc, f"{QUEUE}@router-c", count)
    assert sent.returncode == 0, sent.stderr
    assert f"{count} messages to {QUEUE}@router-c accepted" in sent.stdout

    messages = _finish(consumer)
    assert [m["body"] for m in messages] == _bodies(count)
    assert not any(m["redelivered"] for m in messages)
    _wait_quiet(a_proc, b_proc, c_proc)
    assert c_proc.queue_depth(QUEUE) == 0

    events = _audit([a_proc, b_proc, c_proc], a_proc, c_proc, messages, count)
    ids = {m["id"] for m in messages}
    for process, peer in ((a_proc, "router-b"), (b_proc, "router-c")):
        forwarded = [e for e in process.events("message.forwarded") if e["msg_id"] in ids]
        assert Counter(e["msg_id"] for e in forwarded) == Counter(ids), process.name
        assert {e["peer"] for e in forwarded} == {peer}
    enqueued = c_proc.events("message.enqueued")
    assert [e["msg_id"] for e in enqueued] == [m["id"] for m in messages]
    assert {e["hops"] for e in enqueued} == {2}
    assert all(e["origin"] == "router-a" for e in enqueued)
    for process in (a_proc, b_proc, c_proc):
        assert events[process.name]["message.duplicate"] == 0, process.name
        assert _delivery_closes(process) == [], process.name
    assert events["router-a"]["message.accepted"] == count
    assert events["router-b"]["message.accepted"] == 0


# -- failures in the middle of a line ------------------------------------------


@pytest.mark.parametrize("b_returns", ["within-reroute-delay", "after-reroute"])
def test_line_survives_sigkill_of_the_middle_router(mesh, b_returns):
    """
    B is killed with SIGKILL once C has taken some of the stream and not
    all of it, and A holds messages B has not acknowledged (B is frozen
    until A does, then killed), then restarted; every message arrives exactly once, in
    order.

    within-reroute-delay: B is back before A's reroute-delay (60 s here)
    runs out, so the recovery stage of the new links replays what B did
    not hold.  after-reroute: B comes back only once A has given its
    unacknowledged messages back to the backlog (A's store shows no
    outbox any more); A sends them again under new sequence numbers, so B
    and C must recognise by message id the ones they already had.
    """
    count = 10_000
    reroute_delay = "60s" if b_returns == "within-reroute-delay" else REROUTE_DELAY
    a_proc, b_proc, c_proc = _line(mesh, routing={"reroute-delay": reroute_delay})
    consumer = mesh.start_receive(c_proc, QUEUE, count, STREAM_TIMEOUT_S)
    # Paced, so that the stream is still flowing into A when B dies: on a
    # fast host an unpaced producer is done, and B has acknowledged all of
    # it, before C's consumer has printed its first 1,500.
    producer = mesh.start_send(a_proc, f"{QUEUE}@router-c", count, "--rate", "2500")

    at_kill = _wait_progress(consumer, 1500)
    # What the test is about: B dies while A holds messages it sent B and
    # has not heard acknowledged.  Frozen first, B acknowledges nothing
    # more, so that is certain when the SIGKILL lands.
    b_proc.sigstop()
    a_proc.wait_for(lambda: a_proc.store_counts().get("outbox", 0) > 0,
                    what="router-a to hold messages router-b did not acknowledge")
    b_proc.sigkill()
    before_restart = consumer.count()
    assert before_restart < count, "the stream was over before B died: kill it sooner"
    a_proc.wait_event("link.closed", peer="router-b", stage="delivery")
    c_proc.wait_event("link.closed", peer="router-b", stage="delivery")
    if b_returns == "after-reroute":
        a_proc.wait_for(lambda: "outbox" not in a_proc.store_counts(),
                        what="router-a to return its outbox to router-b to the backlog")
    b_proc = _restart(mesh, b_proc)

    _finish_send(producer)
    messages = _finish(consumer)
    _assert_exactly_once(messages, _bodies(count), in_order=True)
    assert at_kill <= before_restart < count
    _wait_quiet(a_proc, b_proc, c_proc)
    assert c_proc.queue_depth(QUEUE) == 0
    _audit([a_proc, b_proc, c_proc], a_proc, c_proc, messages, count)


def test_line_survives_sigstop_of_the_middle_router(mesh):
    """
    B is frozen with SIGSTOP in the middle of the stream and stays frozen
    until A and C have closed their links to it because the keepalive ran
    out (and A, after reroute-delay, has given its unacknowledged messages
    back to the backlog); then SIGCONT.  B finds its old links dead,
    reconnects, and every message arrives exactly once, in order.
    """
    count = 10_000
    a_proc, b_proc, c_proc = _line(mesh, keepalive_interval=KEEPALIVE_INTERVAL_MS)
    consumer = mesh.start_receive(c_proc, QUEUE, count, STREAM_TIMEOUT_S)
    # Paced, so that A still has messages to send B once B is frozen (see
    # the SIGKILL test above).
    producer = mesh.start_send(a_proc, f"{QUEUE}@router-c", count, "--rate", "2500")

    _wait_progress(consumer, 1500)
    b_proc.sigstop()
    frozen_at = consumer.count()
    # A keeps sending until its window is full of unacknowledged messages.
    a_proc.wait_for(lambda: a_proc.store_counts().get("outbox", 0) > 0,
                    what="router-a to hold messages router-b did not acknowledge")
    for neighbour in (a_proc, c_proc):
        [closed] = neighbour.wait_event("link.closed", timeout=10, peer="router-b", stage="delivery")
        assert closed["reason"] == "keepalive", closed
    assert consumer.count() < count, "the stream was over before B froze: freeze it sooner"
    # A's outbox to B goes back to its backlog after reroute-delay: the
    # messages B may hold are then sent again, under new sequence numbers.
    a_proc.wait_for(lambda: "outbox" not in a_proc.store_counts(),
                    what="router-a to return its outbox to router-b to the backlog")
    b_proc.sigcont()

    _finish_send(producer)
    messages = _finish(consumer)
    _assert_exactly_once(messages, _bodies(count), in_order=True)
    assert frozen_at < count
    _wait_quiet(a_proc, b_proc, c_proc)
    assert c_proc.queue_depth(QUEUE) == 0
    _audit([a_proc, b_proc, c_proc], a_proc, c_proc, messages, count)
    # B was never restarted: one router.started, and it saw its own links die.
    assert len(b_proc.events("router.started")) == 1
    assert {e["peer"] for e in b_proc.events("link.closed")} >= {"router-a", "router-c"}


# -- rerouting ------------------------------------------------------------------


def test_traffic_reroutes_around_a_killed_router(mesh):
    """
    A square: A–B–D and A–C–D.  A's two paths to D have two hops each, and
    the tie goes to the smallest next hop, router-b.  A producer at A
    streams 4,000 messages to q@router-d; B is killed with SIGKILL in the
    middle, and a second producer at once sends 2,000 more.  A's route to
    D moves to router-c (the routes API shows it); what A had sent B
    without an acknowledgement, and everything the second producer sent,
    goes through C.  While B is dead, every message accepted at A is at D
    or durably held in B's store: nothing is lost.  Restarted, B delivers
    what it holds, and every message is enqueued at D exactly once.

    Order is not asserted: the messages held by B arrive after later ones
    that went through C, as the design allows.  (The second producer is
    there because B, which stores faster than it forwards, may well have
    taken on the whole first stream before it died.)
    """
    first, second = 4_000, 2_000
    count = first + second
    late = "sent after the kill"
    options = {"routing": ROUTING, "keepalive_interval": STEADY_KEEPALIVE_MS}
    d = mesh.router("router-d", clients=True, **options)
    b = mesh.router("router-b", connect=[d], **options)
    c = mesh.router("router-c", connect=[d], **options)
    a = mesh.router("router-a", connect=[b, c], clients=True, **options)
    a_proc, b_proc, c_proc, d_proc = mesh.start(a, b, c, d)
    assert a_proc.wait_route("router-d", next_hop="router-b") == {"next_hop": "router-b", "hops": 2}
    c_proc.wait_route("router-d", next_hop="router-d")
    d_proc.wait_route("router-a")

    consumer = mesh.start_receive(d_proc, QUEUE, count, STREAM_TIMEOUT_S)
    producer = mesh.start_send(a_proc, f"{QUEUE}@router-d", first)
    _wait_progress(consumer, 1000)
    b_proc.sigkill()
    assert consumer.count() < first, "the stream was over before B died: kill it sooner"
    late_producer = mesh.start_send(a_proc, f"{QUEUE}@router-d", second, "--body", late)

    assert a_proc.wait_route("router-d", next_hop="router-c") == {"next_hop": "router-c", "hops": 2}
    assert "router-b" not in {hop["next_hop"] for hop in a_proc.routes().values()}
    _finish_send(producer)
    _finish_send(late_producer)
    accepted = {e["msg_id"] for e in a_proc.events("message.accepted")}
    assert len(accepted) == count

    def everything_at_d_or_held_by_b():
        held = {row["msg_id"] for row in b_proc.stored_messages()}
        received = {m["id"] for m in consumer.messages()}
        return (received | held) == accepted

    wait_until(everything_at_d_or_held_by_b, STREAM_TIMEOUT_S,
               what="every message at D, or held in dead B's store")
    through_c = {e["msg_id"] for e in a_proc.events("message.forwarded", peer="router-c")}
    through_b = {e["msg_id"] for e in a_proc.events("message.forwarded", peer="router-b")}
    late_ids = {m["id"] for m in consumer.messages() if m["body"] == late}
    assert len(late_ids) == second
    assert late_ids <= through_c
    assert not late_ids & through_b

    b_proc = _restart(mesh, b_proc)
    messages = _finish(consumer)
    _assert_exactly_once([m for m in messages if m["body"] != late], _bodies(first),
                         in_order=False)
    assert len({m["id"] for m in messages}) == count
    _wait_quiet(a_proc, b_proc, c_proc, d_proc)
    assert d_proc.queue_depth(QUEUE) == 0
    _audit([a_proc, b_proc, c_proc, d_proc], a_proc, d_proc, messages, count)
    # With B back, the tie goes to router-b again.
    a_proc.wait_route("router-d", next_hop="router-b")


# -- a destination that is down --------------------------------------------------


def test_messages_for_a_stopped_destination_wait_at_the_origin(mesh):
    """
    C is stopped (SIGTERM).  A still knows router-c, but has no route to
    it: 1,000 messages sent to q@router-c are durably accepted
    (C{meshroute send} exits 0) and wait in A's store.  When C starts
    again they all arrive, exactly once, in order.
    """
    count = 1_000
    a_proc, b_proc, c_proc = _line(mesh)
    assert c_proc.terminate() == 0
    a_proc.wait_for(lambda: a_proc.routes().get("router-c", {}).get("next_hop") is None,
                    what="router-a to lose its route to router-c")

    sent = mesh.send(a_proc, f"{QUEUE}@router-c", count)
    assert sent.returncode == 0, sent.stderr
    assert a_proc.store_counts() == {"backlog": count}
    assert b_proc.store_counts() == {}
    assert not c_proc.events("message.enqueued")

    c_proc = _restart(mesh, c_proc)
    consumer = mesh.start_receive(c_proc, QUEUE, count, STREAM_TIMEOUT_S)
    messages = _finish(consumer)
    _assert_exactly_once(messages, _bodies(count), in_order=True)
    _wait_quiet(a_proc, b_proc, c_proc)
    _audit([a_proc, b_proc, c_proc], a_proc, c_proc, messages, count)


# -- bad input ---------------------------------------------------------------------


def _frame(*fields) -> bytes:
    """
    A client-protocol frame: 4-byte big-endian length, msgpack array.
    """
    body = msgpack.packb(list(fields), use_bin_type=True)
    return struct.pack(">I", len(body)) + body


def _read_until_closed(sock: socket.socket, timeout: float = 10.0) -> list:
    """
    Read what the router sends until it closes the connection; return the
    decoded frames.
    """
    sock.settimeout(timeout)
    data = b""
    try:
        while chunk := sock.recv(65536):
            data += chunk
    except ConnectionResetError:
        pass
    frames = []
    while len(data) >= 4:
        (length,) = struct.unpack(">I", data[:4])
        frames.append(msgpack.unpackb(data[4:4 + length], raw=False))
        data = data[4 + length:]
    assert data == b"", f"a truncated frame: {data!r}"
    return frames


def test_bad_addresses_and_malformed_clients_disturb_nothing_else(mesh):
    """
    Refused addresses make C{meshroute send} and C{receive} exit non-zero
    with the router's error code; raw connections that send garbage, or a
    command before Open, get a connection-level Error with its code and
    are closed.  Meanwhile a producer streams 2,000 messages from A to C
    undisturbed: they all arrive, exactly once, in order, and no link
    between the routers closes.
    """
    count = 2_000
    a_proc, b_proc, c_proc = _line(mesh)
    links = {p.name: {peer: link["link"] for peer, link in p.delivery_links().items()}
             for p in (a_proc, b_proc, c_proc)}
    consumer = mesh.start_receive(c_proc, QUEUE, count, STREAM_TIMEOUT_S)
    producer = mesh.start_send(a_proc, f"{QUEUE}@router-c", count)

    bad_queue = mesh.send(a_proc, "bad queue@router-c")
    assert bad_queue.returncode != 0
    assert "bad-address" in bad_queue.stderr, bad_queue.stderr
    unknown = mesh.send(a_proc, f"{QUEUE}@nonexistent")
    assert unknown.returncode != 0
    assert "unknown-router" in unknown.stderr, unknown.stderr
    bad_router = mesh.send(a_proc, f"{QUEUE}@router c")
    assert bad_router.returncode != 0
    assert "bad-address" in bad_router.stderr, bad_router.stderr
    bad_consumer = mesh.start_receive(a_proc, "bad queue", 1, 10)
    assert bad_consumer.wait(30) != 0
    assert "bad-address" in bad_consumer.stderr, bad_consumer.stderr

    host, port = "127.0.0.1", a_proc.spec.client_port
    with socket.create_connection((host, port), timeout=5) as garbage, \
            socket.create_connection((host, port), timeout=5) as too_soon:
        garbage.sendall(b"GET /api/v1/queues HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        # Subscribe (type 6) before Open: a valid command at the wrong time.
        too_soon.sendall(_frame(6, 1, 1, QUEUE, 10))
        [error] = _read_until_closed(garbage)
        assert error[:3] == [5, 0, "protocol-error"], error
        [error] = _read_until_closed(too_soon)
        assert error[:3] == [5, 0, "bad-command"], error

    _finish_send(producer)
    messages = _finish(consumer)
    _assert_exactly_once(messages, _bodies(count), in_order=True)
    _wait_quiet(a_proc, b_proc, c_proc)
    _audit([a_proc, b_proc, c_proc], a_proc, c_proc, messages, count)
    for process in (a_proc, b_proc, c_proc):
        assert _delivery_closes(process) == [], process.name
        now = {peer: link["link"] for peer, link in process.delivery_links().items()}
        assert now == links[process.name], process.name
    # The router is still fine: a new client is served.
    again = mesh.send(a_proc, f"{QUEUE}@router-c", 1, "--body", "after")
    assert again.returncode == 0, again.stderr


# -- non-persistent -------------------------------------------------------------------


def test_non_persistent_messages_arrive_once(mesh):
    """
    1,000 non-persistent messages from A to C, with no router dying, all
    arrive, exactly once, in order (the non-persistent stream of one
    producer is ordered, docs/client-protocol.md), and none ever touches
    a store.
    """
    count = 1_000
    a_proc, b_proc, c_proc = _line(mesh)
    consumer = mesh.start_receive(c_proc, QUEUE, count, STREAM_TIMEOUT_S)
    sent = mesh.send(a_proc, f"{QUEUE}@router-c", count, "--non-persistent")
    assert sent.returncode == 0, sent.stderr
    assert "accepted (non-persistent)" in sent.stdout
    messages = _finish(consumer)
    _assert_exactly_once(messages, _bodies(count), in_order=True)
    enqueued = c_proc.events("message.enqueued")
    assert len(enqueued) == count
    assert {e["persistent"] for e in enqueued} == {False}
    assert len({e["msg_id"] for e in enqueued}) == count
    for process in (a_proc, b_proc, c_proc):
        assert process.stored_messages() == [], process.name


def test_non_persistent_messages_may_be_lost_but_never_doubled(mesh):
    """
    A producer at A streams 10,000 non-persistent messages to C; B is
    killed in the middle and restarted.  Some may be lost (those in B's
    memory or on its dead links); none arrives twice, none is invented.
    A last non-persistent message sent once A routes to C again marks the
    end of the stream: it is sent after every other one and travels the
    same path, so once it arrived nothing more is coming.  (Being
    non-persistent, a marker may be lost too if a link drops under it:
    then another is sent.)
    """
    count = 10_000
    a_proc, b_proc, c_proc = _line(mesh)
    consumer = mesh.start_receive(c_proc, QUEUE, None, 2 * STREAM_TIMEOUT_S)
    # Paced (2 s in all), so that B dies in the middle of the stream.
    producer = mesh.start_send(a_proc, f"{QUEUE}@router-c", count, "--non-persistent",
                               "--rate", "5000")
    _wait_progress(consumer, 500)
    assert producer.poll() is None, "the stream was over before B died: kill it sooner"
    b_proc.sigkill()
    a_proc.wait_event("link.closed", peer="router-b", stage="delivery")
    _finish_send(producer)
    b_proc = _restart(mesh, b_proc)

    def marked_end():
        return any(m["body"].startswith("the end") for m in consumer.messages())

    for attempt in range(1, 6):
        a_proc.wait_route("router-c", next_hop="router-b")
        marker = mesh.send(a_proc, f"{QUEUE}@router-c", 1, "--non-persistent",
                           "--body", f"the end {attempt}")
        assert marker.returncode == 0, marker.stderr
        try:
            wait_until(marked_end, 15, what="an end marker at the consumer")
            break
        except AssertionError:
            if attempt == 5:
                raise
    consumer.kill()

    messages = consumer.messages()
    assert messages[-1]["body"].startswith("the end")
    bodies = [m["body"] for m in messages if not m["body"].startswith("the end")]
    doubled = [b for b, n in Counter(bodies).items() if n > 1]
    assert not doubled, f"received twice: {doubled[:10]}"
    assert set(bodies) <= set(_bodies(count))
    assert len(bodies) >= 500
    enqueued = Counter(e["msg_id"] for e in c_proc.events("message.enqueued"))
    assert max(enqueued.values()) == 1
    assert {m["id"] for m in messages} <= set(enqueued)
    for process in (a_proc, b_proc, c_proc):
        assert process.stored_messages() == [], process.name
