"""
Hostile MQTT clients beside a QoS 1 load (docs/security.md, "Hostile
input"): one C{twistd} router with an MQTT listener (C{max-connections
= 48}, C{stage-valid-timeout = "1s"}, C{max-frame-size = 65536}), a
paho-mqtt publisher sending L{MESSAGES} QoS 1 publications to a paho
subscriber of a persistent session, and at the same listener at the same
time (L{support.hostile_clients}, as the native listener's test):

 - a slowloris client holding every connection the listener allows, each
   trickling a CONNECT one byte every 0.1 s, after probing past
   C{max-connections};
 - a client throwing L{GARBAGE}, one throw per connection: bytes that
   are not MQTT, a 256 MB remaining length, a five-byte one, packets
   breaking their version's rules, 1,000 CONNECTs in one write, a packet
   past C{max-frame-size};
 - a client flooding L{FLOOD} QoS 1 PUBLISHes in one go, never reading
   the PUBACKs, then holding its connection.

Pass: every QoS 1 message arrives exactly once; the router stays up and
its RSS bounded; every connection of the slowloris and the thrower is
closed with a reason logged for its address; the flood made the router
hold its topic publishers (C{hold-publishers-at} L{HOLD_AT}) and read
them again; the flooder, once its flood is read, is closed for its
silence (its TTL), logged.  The numbers are printed (C{pytest -s}) for
docs/security.md.
"""

import os
import re
import threading
from collections import Counter

from meshroute.mqtt import packets as p

from support.hostile_clients import Flooder, Slowloris, Thrower, rss
from support.mqtt_clients import mqtt_router, paho_client, stop, subscribe
from support.routers import mesh, wait_until  # noqa: F401 (mesh is a fixture)
from support.stomp_clients import TIMEOUT_S

MAX_CONNECTIONS = 48
#: Slots the slowloris client leaves to the others (publisher,
#: subscriber, thrower, flooder) once it has shown the limit holds.
RESERVED = 6
MESSAGES = 1000
#: The flooder's QoS 1 PUBLISHes, its PUBACKs never read: far faster
#: than the fan-out copies (one read of them is one acceptance, the
#: fan-out takes 256 per turn), so the router holds its topic publishers
#: while C{$topic} is deep (docs/topics.md, "Flow control").  Its silence
#: ends it once all was read.
FLOOD = 20_000
#: The router's C{hold-publishers-at}: a fifth of the flood.
HOLD_AT = 4000
MAX_FRAME_SIZE = 65536
#: RSS the router may gain over its size before the attack.
RSS_BOUND = 96 * 1024 * 1024


def _connect(client_id: str, level: int = p.MQTT_3_1_1, keep_alive: int = 60) -> bytes:
    return p.encode(p.Connect(level, client_id, True, keep_alive), level)


def _packet(first_byte: int, body: bytes) -> bytes:
    """
    A packet with any first byte and body (a remaining length under 128).
    """
    return bytes([first_byte, len(body)]) + body


_V4, _V5 = _connect("h"), _connect("h5", p.MQTT_5)
#: What the thrower throws, each on a connection of its own.
GARBAGE = [
    os.urandom(512),
    b"\x10\xff\xff\xff\x7f" + b"x" * 64,  # a CONNECT of 256 MB
    _V4 + b"\x30\xff\xff\xff\x7f" + b"x" * 64,  # a PUBLISH of 256 MB
    b"\x10\xff\xff\xff\xff\x01",  # a remaining length of five bytes
    _packet(0x10, b"\x00\x04MQTX\x04\x02\x00\x3c\x00\x01h"),  # not MQTT's protocol name
    _packet(0x10, b"\x00\x04MQTT\x04\x03\x00\x3c\x00\x01h"),  # CONNECT's reserved flag
    p.encode(p.Publish("a/b", b"before", 0), p.MQTT_3_1_1),  # a PUBLISH before CONNECT
    _V4 + _V4,  # CONNECT twice
    _connect("flood") * 1000,  # a CONNECT flood
    _V4 + _packet(0x82, b"\x00\x01\x00\x01a\x03"),  # SUBSCRIBE at QoS 3
    _V4 + b"\x00\x00",  # the reserved packet type 0
    _V4 + b"\xf0\x00",  # AUTH in 3.1.1
    _V4 + _packet(0x30, b"\x00\x03a/#x"),  # a wildcard in a topic name
    _V4 + _packet(0x36, b"\x00\x01a\x00\x01x"),  # PUBLISH at QoS 3
    _V4 + _packet(0x30, b"\x00\x02\xff\xfex"),  # a topic name of invalid UTF-8
    _V5 + _packet(0x30, b"\x00\x01a\x03\x23\x00\x00x"),  # 5.0: topic alias 0
    _V5 + p.encode(p.Publish("a/b", b"x" * MAX_FRAME_SIZE, 1, packet_id=1), p.MQTT_5),
]


def _closings(log: str) -> list[tuple[str, str]]:
    """
    The code and detail of each connection the router's log says it
    closed (C{client session … from 127.0.0.1:PORT: CODE: DETAIL}).
    """
    return re.findall(r"from 127\.0\.0\.1:\d+: ([a-z-]+): (.*)", log)


def _flooder_dropped(spec) -> bool:
    """
    The router's log says the flooder's session was closed for its
    silence (its TTL: 1.5 times its keep-alive of 2 s).
    """
    log = spec.log_text()
    opened = re.search(r"client session (\w+) opened for flooder", log)
    return opened is not None and (
        f"silent for its TTL (3000 ms); closing it (session {opened[1]})" in log)


def test_hostile_mqtt_clients_beside_a_qos_1_load(mesh):
    a = mqtt_router(mesh, "router-a")
    a.extra["mqtt.listener"].update({
        "max-connections": MAX_CONNECTIONS, "stage-valid-timeout": "1s",
        "max-frame-size": MAX_FRAME_SIZE})
    a.extra.setdefault("routing", {})["hold-publishers-at"] = HOLD_AT
    a.write()
    (a_proc,) = mesh.start(a)
    port = a.mqtt_port
    before = peak = rss(a_proc.pid)

    stop_attack = threading.Event()
    most_waiting = 0
    slowloris = Slowloris(port, stop_attack, _connect("slow" * 100), MAX_CONNECTIONS, RESERVED,
                          silent_refusals=True)
    slowloris.start()
    try:
        wait_until(slowloris.probed.is_set, timeout=30, what="the slowloris probe refused")
        subscriber, got = paho_client(a, "steady-sink", clean=False)
        assert subscribe(subscriber, got, ("load/#", 1)) == [1]
        publisher, _ = paho_client(a, "steady-source")
        thrower = Thrower(port, stop_attack, GARBAGE)
        publishes = b"".join(p.encode(p.Publish("flood/x", b"f" * 16, 1, packet_id=i), 4)
                             for i in range(1, 10_001))
        flooder = Flooder(port, stop_attack, _connect("flooder", keep_alive=2), publishes,
                          len(publishes) // 10_000, most=len(publishes) * FLOOD // 10_000,
                          hold=True)
        thrower.start()
        flooder.start()
        infos = [publisher.publish(f"load/{i % 5}", b"%d" % i, qos=1) for i in range(MESSAGES)]

        def delivered() -> bool:
            nonlocal peak, most_waiting
            peak = max(peak, rss(a_proc.pid))
            most_waiting = max(most_waiting, a_proc.get("/api/v1/topics")["fan_out"]["waiting"])
            return len(got.messages) >= MESSAGES

        wait_until(delivered, timeout=TIMEOUT_S * 2, interval=0.2,
                   what=f"{MESSAGES} QoS 1 messages (have {len(got.messages)})")
        for info in infos:
            info.wait_for_publish(TIMEOUT_S)
        # On a loaded machine the load can end before every kind of
        # garbage was thrown: the attack goes on until it was, and until
        # the flooder, silent once its flood was read, was closed for it.
        wait_until(lambda: thrower.tally.closed > len(GARBAGE) and _flooder_dropped(a),
                   timeout=TIMEOUT_S * 2, what="every throw, and the flooder closed")
        assert a_proc.popen.poll() is None, "the router died"
    finally:
        stop_attack.set()
        slowloris.join(30)
    thrower.join(30)
    flooder.join(30)
    stop(publisher)
    stop(subscriber)
    peak = max(peak, rss(a_proc.pid))

    counts = Counter(int(m.payload) for m in got.messages)
    assert sorted(counts) == list(range(MESSAGES)) and set(counts.values()) == {1}
    assert a_proc.info()["name"] == "router-a"  # the admin API still answers
    assert peak - before < RSS_BOUND
    log = a.log_text()
    # The flood made the router hold its topic publishers, and read them
    # again once the fan-out caught up.
    assert "topic publishers held" in log and "topic publishers read again" in log
    closings = _closings(log)
    codes = Counter(code for code, _ in closings)
    # Every hostile connection the router closed, it closed saying why:
    # each throw breaks the protocol, each slowloris is over a limit.
    assert codes["protocol-error"] >= thrower.tally.closed, codes
    assert codes["limit-reached"] >= slowloris.tally.closed >= 10, codes
    broken = {detail for code, detail in closings if code == "protocol-error"}
    assert len(broken) >= len(GARBAGE) - 2, broken  # two throws are a second CONNECT
    slow = Counter("max-connections" if "max-connections" in detail else detail
                   for code, detail in closings if code == "limit-reached")
    assert slow["max-connections"] > 0, slow
    assert slow["no CONNECT within stage-valid-timeout (1000 ms)"] > 0, slow
    print(f"\nslowloris: {slowloris.tally}, most held {slowloris.most_held}, "
          f"closed for {dict(slow)}"
          f"\nthrower: {thrower.tally}, {len(broken)} kinds of protocol-error logged"
          f"\nflooder: {flooder.tally}, stalled {flooder.stalled.is_set()}; $topic at most "
          f"{most_waiting} deep as sampled (hold-publishers-at {HOLD_AT}), held "
          f"{log.count('topic publishers held')} times"
          f"\nrouter-a RSS: before {before / 2**20:.1f} MiB, peak {peak / 2**20:.1f} MiB; "
          f"{MESSAGES} QoS 1 messages received once each")
