"""
Client sessions that survive failures (issue 4), with real processes: a
C{twistd -n meshroute} router, C{meshroute send} / C{meshroute receive}
(or a small Python client) as processes of their own, and between them a
L{TcpProxy} the test cuts and restores (Diffusion's advice: kill the
proxy, start it again).

What the application sees is read from the client processes (exit
status, stdout, the FAILOVER / DISCONNECT lines of their failure
listeners on stderr); what the router did from its event log
(C{session.*}, C{message.*}) and its admin API.  Synchronisation is a poll
against a deadline, never a sleep; a cut lasts until the router saw the
connection go (and, where the test says, for a minimum time).

The in-process failover tests are in test_client_failover.py; these are
the same promises end to end.
"""

import re
import signal
import socket
import subprocess
import sys
import time
from collections import Counter

import pytest

from meshroute.wire import client_frames as f
from meshroute.wire.codec import FrameDecoder, encode

from support.proxy import TcpProxy
from support.routers import mesh, router_env, wait_until  # noqa: F401 (mesh is a fixture)

QUEUE = "q"
KEEP_ALIVE = "3s"
CHECK_INTERVAL_MS = 200
#: Client reconnection options: retry quickly, forever.
RECONNECT = ["--reconnect-attempts", "-1", "--retry-interval", "100",
             "--max-retry-interval", "200"]
WINDOW = ["--confirmation-window-size", "1048576"]
#: Deadlines: generous, for a loaded 2-core machine.
STREAM_TIMEOUT_S = 90.0


@pytest.fixture
def proxies():
    made: list[TcpProxy] = []

    def make(target_port: int) -> TcpProxy:
        proxy = TcpProxy(target_port)
        made.append(proxy)
        return proxy

    yield make
    for proxy in made:
        proxy.close()


def _router(mesh, name="router-a", *, keep_alive=KEEP_ALIVE, listener=None, reconnect=None):
    """
    A router with a client listener, short session intervals, and
    C{listener} / C{reconnect} keys added to C{[clients.listener]} /
    C{[clients.reconnect]}.
    """
    spec = mesh.router(name, clients=True)
    spec.extra["clients.listener"].update(
        {"connection-ttl-check-interval": f"{CHECK_INTERVAL_MS}ms", **(listener or {})})
    spec.extra["clients.reconnect"] = {"keep-alive": keep_alive, **(reconnect or {})}
    spec.write()
    return spec


def _bodies(n: int) -> set[str]:
    return {f"message {i}" for i in range(1, n + 1)}


def _hold(seconds: float) -> None:
    """
    Let a cut last at least C{seconds}: part of the scenario (how long the
    network is down), not a way to wait for something.
    """
    end = time.monotonic() + seconds
    wait_until(lambda: time.monotonic() >= end, seconds + 5, what="the end of the cut")


def _cut(proxy: TcpProxy, router, disconnected_before: int, sessions: int,
         at_least: float = 0.0) -> None:
    """
    Cut C{proxy} until the router logged C{sessions} more
    C{session.disconnected} (and at least C{at_least} seconds).
    """
    proxy.cut()
    started = time.monotonic()
    router.wait_event("session.disconnected", count=disconnected_before + sessions, timeout=10)
    _hold(max(0.0, at_least - (time.monotonic() - started)))
    proxy.restore()


def _failover_lines(client) -> list[str]:
    return [line for line in client.stderr.splitlines() if "(FAILOVER)" in line]


def _enqueued_once(router) -> dict[str, int]:
    """
    Message ids enqueued per the event log; asserts none twice.
    """
    counts = Counter(r["msg_id"] for r in router.events("message.enqueued"))
    twice = {m: n for m, n in counts.items() if n > 1}
    assert not twice, f"enqueued more than once: {twice}"
    return counts


# -- 1. a cut shorter than keep-alive is invisible ------------------------------------


def test_short_cuts_are_invisible(mesh, proxies):
    """
    40,000 sends and 40,000 receives, each through its own proxy, both
    cut twice for about a second (keep-alive is 3 s), the second time with
    three quarters of the sends still to go (a producer that ended before
    a cut would leave its session nothing to reattach, however slow the
    machine makes this test's polling): both commands exit 0
    without an error, every message arrives exactly once, in order, never
    flagged redelivered (the recovery buffer holds the consumer's
    prefetch); both failure listeners said FAILOVER (sessions
    reattached) and the router logged disconnected + reattached for both.
    """
    n = 40_000
    # The recovery buffer covers the consumer's prefetch (100), so every
    # delivery lost in the cut is re-sent as it was; with a smaller one the
    # older lost deliveries go back to the queue and come later, flagged
    # redelivered (docs/client-protocol.md, "Reattaching").
    router, = mesh.start(_router(mesh, reconnect={"recovery-buffer-size": 256}))
    to_producer = proxies(router.spec.client_port)
    to_consumer = proxies(router.spec.client_port)
    consumer = mesh._client("receive", [
        "receive", "--connect", to_consumer.endpoint, "--queue", QUEUE, "--json",
        "--count", str(n), "--timeout", str(STREAM_TIMEOUT_S), *RECONNECT, *WINDOW])
    router.wait_event("session.opened", count=1)
    # Paced (5 s in all), so that both still stream at the second cut on
    # a fast host too.
    producer = mesh._client("send", [
        "send", "--connect", to_producer.endpoint, "--to", QUEUE, "--count", str(n),
        "--rate", "8000", *RECONNECT, *WINDOW])

    for cut, threshold in enumerate((n // 10, n // 4)):
        # Cut while both stream: the producer is faster than the consumer,
        # so its progress (what the router enqueued) sets the moment.
        wait_until(lambda: (len(router.events("message.enqueued")) >= threshold
                            and consumer.count() > 0) or producer.poll() is not None,
                   STREAM_TIMEOUT_S, what=f"{threshold} messages enqueued")
        assert producer.poll() is None and consumer.poll() is None, "finished before the cut"
        before = len(router.events("session.disconnected"))
        to_producer.cut()
        to_consumer.cut()
        router.wait_event("session.disconnected", count=before + 2, timeout=30)
        _hold(1.0)
        to_producer.restore()
        to_consumer.restore()
        router.wait_event("session.reattached", count=2 * (cut + 1), timeout=20)

    assert producer.wait(STREAM_TIMEOUT_S) == 0, producer.stderr
    assert consumer.wait(STREAM_TIMEOUT_S) == 0, consumer.stderr
    assert "failed:" not in producer.stderr + consumer.stderr
    assert "sent" not in producer.stderr, "nothing needed sending again"

    messages = consumer.messages()
    bodies = [m["body"] for m in messages]
    assert len(bodies) == n and set(bodies) == _bodies(n)
    assert bodies == [f"message {i}" for i in range(1, n + 1)], "in order"
    assert not [m for m in messages if m["redelivered"]]
    assert router.queue_depth(QUEUE) == 0
    assert len(_enqueued_once(router)) == n

    for client in (producer, consumer):
        lines = _failover_lines(client)
        assert len(lines) >= 2 and all("session reattached" in line for line in lines), \
            client.stderr
    assert not router.events("session.expired")
    assert not router.events("session.recreated")
    assert to_producer.cuts == to_consumer.cuts == 2


# -- 2. a cut longer than keep-alive: the session is made anew ------------------------


def test_long_cut_recreates_sessions(mesh, proxies):
    """
    Keep-alive 1 s, cut until both sessions expired: both commands make
    new sessions (session.recreated), the consumer subscribes again, the
    producer sends the messages that were in flight again under their
    duplicate ids: every message is enqueued exactly once and received;
    one received twice was flagged redelivered the second time.
    """
    # Paced (4 s in all), so that the producer is still sending when the
    # cut comes early in the stream, however fast the host.
    n = 20_000
    router, = mesh.start(_router(mesh, keep_alive="1s"))
    to_producer = proxies(router.spec.client_port)
    to_consumer = proxies(router.spec.client_port)
    consumer = mesh._client("receive", [
        "receive", "--connect", to_consumer.endpoint, "--queue", QUEUE, "--json",
        "--count", str(n), "--timeout", str(STREAM_TIMEOUT_S), *RECONNECT, *WINDOW])
    router.wait_event("session.opened", count=1)
    producer = mesh._client("send", [
        "send", "--connect", to_producer.endpoint, "--to", QUEUE, "--count", str(n),
        "--duplicate-id-prefix", "p-", "--rate", "5000", *RECONNECT, *WINDOW])

    wait_until(lambda: consumer.count() >= 200 or consumer.poll() is not None,
               STREAM_TIMEOUT_S, what="the stream to be flowing")
    assert consumer.poll() is None and producer.poll() is None, "finished before the cut"
    to_producer.cut()
    to_consumer.cut()
    assert not router.events("session.closed"), "a client closed its session before the cut"
    router.wait_event("session.expired", count=2, timeout=15)
    to_producer.restore()
    to_consumer.restore()
    recreated = router.wait_event("session.recreated", count=2, timeout=20)

    assert producer.wait(STREAM_TIMEOUT_S) == 0, producer.stderr
    assert consumer.wait(STREAM_TIMEOUT_S) == 0, consumer.stderr
    expired = {r["session_id"] for r in router.events("session.expired")}
    assert {r["requested_session_id"] for r in recreated} == expired
    for client in (producer, consumer):
        lines = _failover_lines(client)
        assert lines and all("session recreated" in line for line in lines), client.stderr

    messages = consumer.messages()
    seen: Counter = Counter()
    for m in messages:
        seen[m["body"]] += 1
        if seen[m["body"]] > 1:
            assert m["redelivered"], f"second copy of {m['body']} not flagged redelivered"
    missing = _bodies(n) - set(seen)
    if missing:
        # The consumer stopped at --count with copies among them: the rest
        # is still in the queue.
        rest = mesh._client("receive", [
            "receive", "--connect", router.client_endpoint, "--queue", QUEUE, "--json",
            "--count", str(len(missing)), "--timeout", "30"])
        assert rest.wait(60) == 0, rest.stderr
        seen.update(m["body"] for m in rest.messages())
    assert set(seen) == _bodies(n)
    assert router.queue_depth(QUEUE) == 0
    enqueued = _enqueued_once(router)
    assert len(enqueued) == n, "each message enqueued once, duplicates dropped"
    resent = [r for r in router.events("message.duplicate") if r.get("reason") == "duplicate-id"]
    again = re.search(r"sent (\d+) messages? again", producer.stderr)
    assert len(resent) <= (int(again[1]) if again else 0), "a repeat only for a resend"


# -- 3. router killed during sends ------------------------------------------------------


def test_router_sigkill_during_sends_enqueues_once(mesh):
    """
    The producer sends with duplicate ids and retries forever; the router
    is killed with SIGKILL twice mid-stream and started again: the producer
    exits 0 and, across the router's lives, every message was enqueued
    exactly once (the consumer gets each body once, then the queue is
    empty; no msg_id is logged as enqueued twice);
    repeats were dropped as message.duplicate with reason duplicate-id.
    """
    n = 12000
    spec = _router(mesh)
    router, = mesh.start(spec)
    producer = mesh.start_send(router, QUEUE, n, "--duplicate-id-prefix", "k-",
                               "--rate", "4000", *RECONNECT, *WINDOW)
    # Both kills come early (at a tenth and a quarter), so that however
    # late the log shows the enqueues on a loaded machine, the producer
    # still has three quarters of its sends to make at the second; and it
    # is paced (3 s in all), so that a fast host has not sent them all
    # between two reads of the log.
    for threshold in (n // 10, n // 4):
        wait_until(lambda: len(router.events("message.enqueued")) >= threshold
                   or producer.poll() is not None, STREAM_TIMEOUT_S,
                   what=f"{threshold} messages enqueued")
        assert producer.poll() is None, "the producer finished before the kill"
        router.sigkill()
        router, = mesh.start(spec)

    assert producer.wait(STREAM_TIMEOUT_S) == 0, producer.stderr
    assert "(FAILOVER)" in producer.stderr

    consumer = mesh.start_receive(router, QUEUE, n, 60)
    assert consumer.wait(STREAM_TIMEOUT_S) == 0, consumer.stderr
    bodies = [m["body"] for m in consumer.messages()]
    assert Counter(bodies) == Counter(_bodies(n))
    assert router.queue_depth(QUEUE) == 0
    # A SIGKILL loses the events of the router's last reactor turn (a
    # store commit can enqueue hundreds of messages in one), so the log
    # may miss some enqueues, never hold one twice.
    assert len(_enqueued_once(router)) <= n
    assert len(router.events("router.started")) == 3, "each life's first record is whole"
    for r in router.events("message.duplicate"):
        if "duplicate_id" in r:
            assert r["reason"] == "duplicate-id" and r["duplicate_id"].startswith("k-")


def _hold_deliveries(port: int, queue: str, n: int) -> socket.socket:
    """
    Be a client that subscribes to C{queue}, takes C{n} deliveries and
    acknowledges none: speak the protocol over a blocking socket.

    @return: the socket, still connected.
    """
    sock = socket.create_connection(("127.0.0.1", port), timeout=30)
    sock.sendall(encode(f.Open(list(f.SUPPORTED_VERSIONS), "holder", "", -1, 0, 0))
                 + encode(f.Subscribe(1, 1, queue, n)))
    decoder = FrameDecoder(frames=f.FROM_ROUTER)
    redelivered: list[bool] = []  # each delivery's flag, one Deliver or a DeliverBatch's
    while len(redelivered) < n:
        data = sock.recv(65536)
        assert data, "the router closed the connection"
        for frame in decoder.feed(data):
            if isinstance(frame, f.Deliver):
                redelivered.append(frame.redelivered)
            elif isinstance(frame, f.DeliverBatch):
                redelivered += [item[5] for item in frame.deliveries]
    assert not any(redelivered)
    return sock


def test_redelivered_survives_sigkill(mesh):
    """
    Issue 8, scenario 10: messages delivered and not acknowledged when the
    router is killed with SIGKILL come back flagged redelivered; those
    never delivered do not.
    """
    spec = _router(mesh)
    router, = mesh.start(spec)
    assert mesh.send(router, QUEUE, 6).returncode == 0
    holder = _hold_deliveries(spec.client_port, QUEUE, 3)
    try:
        router.sigkill()
    finally:
        holder.close()
    router, = mesh.start(spec)
    consumer = mesh.start_receive(router, QUEUE, 6, 60)
    assert consumer.wait(STREAM_TIMEOUT_S) == 0, consumer.stderr
    flags = {m["body"]: m["redelivered"] for m in consumer.messages()}
    assert flags == {f"message {i}": i <= 3 for i in range(1, 7)}


# -- 4. giving up -------------------------------------------------------------------------


@pytest.mark.parametrize("command", ["send", "receive"])
def test_reconnect_attempts_exhausted(mesh, proxies, command):
    """
    --reconnect-attempts 2 and a proxy cut for good: the command reports
    DISCONNECT and exits non-zero within a bound; nothing hangs.
    """
    router, = mesh.start(_router(mesh))
    proxy = proxies(router.spec.client_port)
    options = ["--reconnect-attempts", "2", "--retry-interval", "100", *WINDOW]
    if command == "send":
        client = mesh._client("send", [
            "send", "--connect", proxy.endpoint, "--to", QUEUE, "--count", "1000000",
            *options])
        wait_until(lambda: router.queue_depth(QUEUE) > 0, 30, what="sends arriving")
    else:
        client = mesh._client("receive", [
            "receive", "--connect", proxy.endpoint, "--queue", QUEUE, "--json", *options])
        router.wait_event("session.opened", count=1, timeout=30)
    proxy.cut()
    cut_at = time.monotonic()
    status = client.wait(15)
    elapsed = time.monotonic() - cut_at
    assert status != 0
    assert "(DISCONNECT)" in client.stderr, client.stderr
    assert "(FAILOVER)" not in client.stderr
    assert elapsed < 10, f"took {elapsed:.1f} s to give up"


# -- 5. connection TTL: a frozen client -------------------------------------------------

_IDLE_CLIENT = r"""
import sys
from twisted.internet import reactor, defer
from meshroute.client import connect

async def main():
    options = {"ttl_ms": int(sys.argv[2])} if sys.argv[2] != "default" else {}
    client = await connect(reactor, sys.argv[1], client_id="idle", **options)
    client.add_failure_listener(lambda event: print(event, flush=True))
    print("OPENED", client.session_id, client.ttl_ms, flush=True)
    await defer.Deferred()

defer.ensureDeferred(main()).addErrback(lambda f: (f.printTraceback(), reactor.stop()))
reactor.run()
"""


def _idle_client(mesh, endpoint: str, ttl: str) -> subprocess.Popen:
    directory = mesh.directory / "clients"
    directory.mkdir(parents=True, exist_ok=True)
    out = open(directory / f"idle-{ttl}.out", "wb")
    popen = subprocess.Popen([sys.executable, "-c", _IDLE_CLIENT, endpoint, ttl],
                             env=router_env(), stdout=out, stderr=subprocess.STDOUT)
    popen.out_path = directory / f"idle-{ttl}.out"
    return popen


@pytest.mark.parametrize("ttl_ms, override, expected_ms", [
    (1000, None, 1000),
    ("default", 1500, 1500),
])
def test_frozen_client_closed_after_ttl(mesh, proxies, ttl_ms, override, expected_ms):
    """
    A client frozen with SIGSTOP stops pinging: the router closes its
    connection once it has heard nothing for the TTL (the client's, or
    connection-ttl-override), not before, and not much after (one check
    interval plus slack).  The client's last activity is the last byte
    the proxy carried from it.
    """
    listener = {} if override is None else {"connection-ttl-override": override}
    router, = mesh.start(_router(mesh, listener=listener))
    proxy = proxies(router.spec.client_port)
    client = _idle_client(mesh, proxy.endpoint, str(ttl_ms))
    try:
        opened = wait_until(lambda: "OPENED" in client.out_path.read_text(), 30,
                            what="the client's session")
        assert opened
        line = next(l for l in client.out_path.read_text().splitlines() if l.startswith("OPENED"))
        assert int(line.split()[2]) == expected_ms, line
        # Alive past its TTL while it runs: it pings.
        started = time.monotonic()
        wait_until(lambda: time.monotonic() - started > 2 * expected_ms / 1000, 10,
                   what="two TTLs")
        assert not router.events("session.disconnected")
        client.send_signal(signal.SIGSTOP)
        disconnected, = router.wait_event("session.disconnected", timeout=15)
        last = proxy.last_from_client()
        assert last is not None
        silent = disconnected["time"] - last
        ttl = expected_ms / 1000
        assert ttl - 0.05 <= silent <= ttl + CHECK_INTERVAL_MS / 1000 + 0.5, silent
    finally:
        client.send_signal(signal.SIGCONT)
        client.kill()
        client.wait(10)


# -- 6. client failure detection: a frozen router ----------------------------------------


def test_frozen_router_noticed_within_check_period(mesh):
    """
    A router frozen with SIGSTOP answers nothing: a receive with
    --client-failure-check-period 1000 (TTL long, so its own pings are the
    only traffic) reports the failure (DISCONNECT, as it may not
    reconnect) within the period plus slack.
    """
    period_ms = 1000
    router, = mesh.start(_router(mesh))
    client = mesh.start_receive(router, QUEUE, None, None,
                                "--client-failure-check-period", str(period_ms),
                                "--ttl", "60000", "--reconnect-attempts", "0")
    router.wait_event("session.opened", count=1, timeout=30)
    # Let the client run a few check periods against the live router: an
    # idle router is not taken for dead.
    started = time.monotonic()
    wait_until(lambda: time.monotonic() - started > 2.5 * period_ms / 1000, 10,
               what="a few check periods")
    assert client.poll() is None and "(DISCONNECT)" not in client.stderr, client.stderr
    router.sigstop()
    stopped_at = time.monotonic()
    try:
        wait_until(lambda: "(DISCONNECT)" in client.stderr, 10, what="DISCONNECT",
                   interval=0.01)
        noticed = time.monotonic() - stopped_at
    finally:
        router.sigcont()
    assert noticed <= period_ms / 1000 + 0.6, noticed
    assert client.wait(15) != 0
