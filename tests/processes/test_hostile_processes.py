"""
Hostile clients against real routers: two C{twistd} routers one hop apart
(router-a, where the attack happens, and router-c, where the queue is),
a persistent load running across them, and at router-a at the same time:

 - a slowloris client holding as many half-open connections as the
   listener allows (each trickling the first bytes of an Open, never
   finishing it), re-opening them as the router closes them after
   C{stage-valid-timeout}, and probing past C{max-connections};
 - a hostile client throwing garbage and valid frames in invalid orders;
 - a client flooding Pings and never reading the Pongs.

Pass: router-a stays up, the producer and consumer are served, every
persistent message (sent twice, with duplicate ids) is consumed exactly
once, and router-a's memory (RSS from /proc) stays bounded.  The numbers
are printed (C{pytest -s}) for docs/security.md.
"""

import os
import struct
import threading

from meshroute.wire import client_frames as f
from meshroute.wire.codec import encode

from support.hostile_clients import Flooder, Slowloris, Thrower, rss
from support.routers import mesh, wait_until  # noqa: F401 (mesh is a fixture)

MAX_CONNECTIONS = 48
#: Slots the slowloris client leaves to the others (producer, hostile
#: client, flooder) once it has shown the limit holds.
RESERVED = 6
MESSAGES = 2000
#: RSS router-a may gain over its size before the attack.
RSS_BOUND = 96 * 1024 * 1024


#: What the hostile client throws, each on a connection of its own.
def _frame(body: bytes) -> bytes:
    return struct.pack(">I", len(body)) + body


GARBAGE = [
    os.urandom(512),
    struct.pack(">I", 2**32 - 1) + b"x" * 64,  # a huge declared length
    _frame(b"\x91" * 3000 + b"\xc0"),  # deep msgpack
    _frame(b"\xdd\xff\xff\xff\xff"),  # an array of 4 Gi items
    _frame(b"\x95\x01\x91\x01\xa2\xff\xfe\xa0\xcd\xea\x60"),  # Open with invalid UTF-8
    encode(f.Send(1, "q", {}, b"before open", True)),  # a command before Open
    encode(f.Open([1], "h", "", 60000)) + encode(f.Open([1], "h", "", 60000)),  # Open twice
    encode(f.Open([1], "h", "", 60000)) + encode(f.Ack(7, [1])),  # a command id out of order
    encode(f.Open([99], "h", "", 60000)),  # no version in common
    encode(f.Open([4], "h", "", 60000)) + encode(f.Send(1, "q", {str(i): "" for i in range(100)},
                                                        b"", True)),  # too many headers
    encode(f.Open([1], "h", "", 60000)) + encode(f.SendBatch(1, [["q", {}, b"", True, ""]])),
    encode(f.Open([4], "h", "", 60000)) + encode(f.Close(1)) + encode(f.Send(2, "q", {}, b"",
                                                                            True)),
    encode(f.Pong(1)) * 1000,  # tiny frames before Open
]
#: The Error codes the hostile client counts in the router's answers.
CODES = tuple(code.encode() for code in (f.PROTOCOL_ERROR, f.BAD_COMMAND,
                                         f.UNSUPPORTED_VERSION, f.LIMIT_REACHED))


def test_the_router_serves_its_clients_through_hostile_ones(mesh):
    c = mesh.router("router-c", clients=True)
    a = mesh.router("router-a", connect=[c], clients=True)
    a.extra["clients.listener"].update({
        "max-connections": MAX_CONNECTIONS, "stage-valid-timeout": "1s",
        "connection-ttl-check-interval": 200,
    })
    a.write()
    a_proc, c_proc = mesh.start(a, c)
    a_proc.wait_route("router-c")
    port = a.client_port
    before = rss(a_proc.pid)

    stop = threading.Event()
    slowloris = Slowloris(port, stop, encode(f.Open([1, 2, 3, 4], "slow" * 100, "", 60000)),
                          MAX_CONNECTIONS, RESERVED)
    slowloris.start()
    try:
        wait_until(slowloris.probed.is_set, timeout=30, what="the slowloris probe refused")
        consumer = mesh.start_receive(c_proc, "q", MESSAGES, 240)
        hostile = Thrower(port, stop, GARBAGE, CODES)
        pings = b"".join(encode(f.Ping(i)) for i in range(10_000))
        flooder = Flooder(port, stop, encode(f.Open([1], "flood", "", -1)), pings,
                          len(encode(f.Ping(1))), most=256 * 1024 * 1024)
        hostile.start()
        flooder.start()
        peak = before
        # Every message twice: the second run's sends are all duplicates.
        for _ in range(2):
            producer = mesh.start_send(a_proc, "q@router-c", MESSAGES,
                                       "--duplicate-id-prefix", "hostile-")

            def produced() -> bool:
                nonlocal peak
                peak = max(peak, rss(a_proc.pid))
                return producer.poll() is not None

            wait_until(produced, timeout=240, interval=0.2, what="the producer's end")
            assert producer.poll() == 0, producer.stderr
        assert consumer.wait(240) == 0, consumer.stderr
        peak = max(peak, rss(a_proc.pid))
        assert a_proc.popen.poll() is None, "router-a died"
        # A throw the router waits out (stage-valid-timeout) takes a
        # second: on a loaded machine the clients can end before every
        # kind of garbage has been thrown, so the attack goes on until it has.
        wait_until(lambda: hostile.tally.closed > len(GARBAGE), timeout=120,
                   what="every kind of garbage thrown")
    finally:
        stop.set()
        slowloris.join(30)
    hostile.join(30)
    flooder.join(30)
    after = rss(a_proc.pid)

    bodies = [m["body"] for m in consumer.messages()]
    assert sorted(bodies) == sorted(f"message {n}" for n in range(1, MESSAGES + 1))
    assert c_proc.queue_depth("q") == 0  # nothing was enqueued twice
    assert a_proc.info()["name"] == "router-a"  # the admin API still answers
    assert slowloris.tally.refused >= 10
    assert slowloris.tally.timed_out > 0
    assert hostile.tally.closed > len(GARBAGE)
    assert peak - before < RSS_BOUND
    print(f"\nslowloris: {slowloris.tally}, most held {slowloris.most_held}"
          f"\nhostile: {hostile.tally}\nflooder: {flooder.tally}, "
          f"stalled {flooder.stalled.is_set()}"
          f"\nrouter-a RSS: before {before / 2**20:.1f} MiB, peak {peak / 2**20:.1f} MiB, "
          f"after {after / 2**20:.1f} MiB; {len(bodies)} messages consumed once each")
