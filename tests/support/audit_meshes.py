"""
Synthetic meshes the audit tests audit, whose numbers are known: four
routers' logs with every kind of loss, duplicate, latency, link close
and malformed line (L{synthetic_mesh}), the same rotated into closed files
(L{rotated_synthetic}), and an HA pair with a witness, its failovers,
fencing and forced activation (L{pair_logs}).
"""

import json
from pathlib import Path

from support.closed_event_files import rotate_copy
from support.event_generator import START, MeshLog

A, B, C, D = "router-a", "router-b", "router-c", "router-d"


def old_version(record: dict) -> dict:
    """
    A router from before C{accepted_at} and C{last_heard} were logged.
    """
    record.pop("accepted_at", None)
    record.pop("last_heard", None)
    return record


def new_version(record: dict) -> dict:
    """
    A router from the future: fields and events this audit does not know.
    """
    record["trace"] = {"span": "x", "depth": [1, 2]}
    record["zone"] = "eu-1"
    return record


def synthetic_mesh(directory) -> MeshLog:
    """
    Four routers, A–B–C and D–A, over 300 s.  Known: per route, what was
    enqueued (with latencies), consumed, lost, in flight, duplicated,
    dead-lettered, dropped, vanished (non-persistent), unobserved and
    orphaned; per link, sessions and closes (keepalive on time, late and
    unchecked, stage-timeout, rejections, a crash); per router, session
    events; malformed lines of every kind; C an older version, D a newer.
    """
    log = MeshLog([A, B, C, D])
    log.versions = {C: old_version, D: new_version}
    for router in log.routers:
        log.boot(router, START)
    # Links.  B crashes at +100 and restarts at +110.
    log.link(A, B, START + 1, 98, reason="keepalive", silence_intervals=5.0, crashed=B)
    log.boot(B, START + 110)
    log.link(A, B, START + 112, 187, reason="shutdown")
    log.link(B, C, START + 1, 98, crashed=B)
    log.link(B, C, START + 111, 188, reason="shutdown")
    log.link(C, D, START + 2, 50, reason="keepalive", silence_intervals=5.5)  # C: unchecked
    log.link(D, A, START + 2, 60, reason="keepalive", silence_intervals=7.5)  # late
    log.link(D, A, START + 70, 229, reason="keepalive", silence_intervals=4.6)
    log.link(A, D, START + 5, 0, reached_delivery=False)
    log.rejection(C, A, START + 3, code="name-in-use")
    log.rejection(D, B, START + 4, code="authentication-failed")
    log.rejection(D, B, START + 8, code="authentication-failed")
    # Messages A → q@C through B: 200 with latencies 1..200 ms, 150 consumed.
    for i in range(200):
        log.message([A, B, C], START + 10 + i * 0.2, latency_s=(i + 1) / 1000,
                     consumed=i < 150)
    for i in range(3):
        log.message([A, B, C], START + 50 + i, fate="lost")
    log.message([A, B, C], START + 60, latency_s=0.01, copies=2)
    doubled = log.message([A, B, C], START + 61, latency_s=0.01, copies=3)
    log.duplicate_dropped(B, doubled, A, START + 62)
    for i in range(4):
        log.message([A, B, C], START + 280 + i, fate="in-flight")
    # Local messages at B after its restart.
    for i in range(20):
        log.message([B], START + 120 + i, latency_s=0.0005, queue="local")
    # D → q@A, and what gets lost on the way.
    for i in range(10):
        log.message([D, A], START + 150 + i, latency_s=0.02)
    log.message([D, A], START + 170, fate="dead-lettered")
    for i in range(2):
        log.message([D, A], START + 171 + i, fate="dropped", persistent=False)
    for i in range(3):
        log.message([D, A], START + 180 + i, fate="vanished", persistent=False)
    # To a router whose log is not here.
    log.routers.append("router-e")
    log.records["router-e"] = []
    for i in range(2):
        log.message([C, "router-e"], START + 190 + i, fate="unobserved")
    log.routers.remove("router-e")
    # Enqueued at B, but its origin's log is not here.
    log.emit(B, START + 200, "message.enqueued", msg_id="router-z:1:1", origin="router-z",
              queue="q", hops=1, accepted_at=START + 199.99, persistent=True)
    log.expected.routes[("router-z", "q@router-b")].update(enqueued=1, orphans=1)
    log.expected.latencies[("router-z", "q@router-b")].append(10.0)
    # Client sessions.
    for kind, n in (("opened", 3), ("disconnected", 2), ("reattached", 1), ("closed", 1)):
        for i in range(n):
            log.session_event(B, kind, START + 130 + i)
    log.session_event(D, "recreated", START + 140)
    log.session_event(D, "expired", START + 141)
    log.denial(A, "orders-app", "send", "invoices", START + 142)
    log.denial(A, "orders-app", "send", "audit@router-d", START + 143)
    log.denial(A, "mallory", "connect", "127.0.0.1:50000", START + 144)
    log.denial(B, "orders-app", "consume", "invoices", START + 145)
    log.emit(D, START + 142, "router.heartbeat", load=0.5)  # unknown to this audit
    for router in log.routers:
        log.stop(router, START + 300)
    # Malformed lines.
    log.bad_line(A, 5, '{"time":1800000005.5,"router":"router-a","event":"link.st', "truncated")
    log.bad_line(A, 10, "garbage, not JSON", "garbage")
    log.bad_line(A, 12, "[1, 2, 3]", "garbage")
    log.bad_line(B, 3, "", "blank")
    log.bad_line(B, 7, '{"time":"soon","router":"router-b","event":"link.stage"}', "missing")
    log.bad_line(B, 9, '{"time":1800000009,"router":"router-b","event":"message.accepted",'
                        '"msg_id":"router-b:9:9","size":"big"}', "type")
    log.bad_line(D, 4, '{"router":"router-d","event":"link.stage"}', "missing")
    log.bad_line(D, 6, '{"time":1800000006,"router":"router-d","event":"link.stage",'
                        '"keepalive_interval_ms":"soon"}', "type")
    log.write(directory, truncate_last={C: 25})
    return log


def rotated_synthetic(directory: Path, per_file: int, mesh=None) -> Path:
    """
    The synthetic mesh (or C{mesh}: another of this module's), each
    router's log rotated into closed files of C{per_file} lines under
    C{directory/rotated/ROUTER/events}.
    """
    (mesh or synthetic_mesh)(directory / "single")
    for source in sorted((directory / "single").glob("*/events.jsonl")):
        rotate_copy(source, directory / "rotated" / source.parent.name / "events", per_file)
    return directory / "rotated"


def ha(role: str, at: float, event: str, **fields) -> dict:
    """
    An C{ha.*} event of B's instance of C{role}, C{at} seconds after the
    start.
    """
    return {"time": START + at, "router": B, "event": event, "group": B, "role": role,
            **fields}


def pair_logs(directory) -> None:
    """
    B's primary serves, is SIGKILLed at +100 (the backup last heard it at
    +100.2 and serves at +104.1: a takeover of 3900 ms), returns, catches
    up and gets the router back by a hand-over of 420.5 ms at +200; the
    backup's instance was fenced on the way and later force-activated.
    """
    logs = {
        "a/events.jsonl": [
            {"time": START, "router": A, "event": "router.started", "version": "1", "pid": 1},
            {"time": START + 300, "router": A, "event": "router.stopped"},
        ],
        "b-primary/events.jsonl": [
            {"time": START, "router": B, "event": "router.started", "version": "1", "pid": 2},
            ha("primary", 1, "ha.state", state="starting", epoch=0, reason=None),
            ha("primary", 2, "ha.epoch", epoch=1, mode="alone"),
            ha("primary", 2, "ha.state", state="active-alone", epoch=1, reason=None),
            ha("primary", 10, "ha.replication", status="in-sync", position=40, lag=0),
            ha("primary", 10, "ha.epoch", epoch=2, mode="replicated"),
            # SIGKILLed at +100; restarted at +150.
            {"time": START + 150, "router": B, "event": "router.started", "version": "1",
             "pid": 3},
            ha("primary", 199.9, "ha.epoch", epoch=5, mode="replicated"),
            ha("primary", 200, "ha.failover", **{"from": "backup", "to": "primary"}, epoch=5,
               kind="handover", duration_ms=420.5),
            {"time": START + 300, "router": B, "event": "router.stopped"},
        ],
        "b-backup/events.jsonl": [
            {"time": START, "router": B, "event": "router.started", "version": "1", "pid": 4},
            ha("backup", 104.0, "ha.epoch", epoch=3, mode="alone"),
            ha("backup", 104.1, "ha.failover", **{"from": "primary", "to": "backup"}, epoch=3,
               kind="takeover", duration_ms=3900.0),
            ha("backup", 120, "ha.fenced", epoch=3, reason="lease-lost"),
            ha("backup", 121, "ha.epoch", epoch=4, mode="alone"),
            ha("backup", 250, "ha.force-activate", step="recorded",
               requested_by="ops@host-1", epoch=None),
            {"time": START + 300, "router": B, "event": "router.stopped"},
        ],
    }
    for name, records in logs.items():
        path = directory / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("".join(json.dumps(r) + "\n" for r in records))


#: The topic mesh's subscriptions: durable ones at C and D, a
#: non-durable one at B.
PRICES, GBP, ALL, KEEP = ("$durable:app:prices", "$durable:app:gbp", "$durable:ops:all",
                          "$durable:old:keep")
SUBSCRIBER = "$subscriber:1"


def topic_mesh(directory) -> MeshLog:
    """
    Publications at A fanned out along A → B → {C, D} over 300 s (what
    the audit must find is counted out in tests/audit/test_audit_topics.py):
    durable subscriptions PRICES (C{prices.#}) and GBP (C{prices.*.gbp},
    forgotten at +100) at C, ALL (C{#}) at D, KEEP at C (made before the
    logs), a non-durable one at B (C{prices.#}); a copy doubled in a
    subscription, one due and never enqueued, one lost between B and D,
    one left waiting, one deleted with its subscription, one after its
    subscription was forgotten, a non-durable copy dropped, copies that
    arrived where the fan-out's record is missing, one consumed without
    its enqueue record, a non-persistent publication one of whose copies
    vanished, one still on its way at the end, a copy fanned out twice.
    """
    log = MeshLog([A, B, C, D])
    for router in log.routers:
        log.boot(router, START)
    for router, queue, pattern in ((C, PRICES, "prices.#"), (C, GBP, "prices.*.gbp"),
                                   (D, ALL, "#"), (B, SUBSCRIBER, "prices.#")):
        log.subscribe(router, queue, pattern, START + 5)
    log.unsubscribe(C, GBP, START + 100, deleted=1)

    def tree(at: float, topic: str = "prices.eu.gbp", persistent: bool = True,
             skip=(), lost_to_d: bool = False, c_durable=None, **copies) -> str:
        """
        One publication at C{at} through the whole tree, every copy
        enqueued once and consumed, but for C{skip} (fan-outs whose
        record is missing: "b", "c", "d") and C{copies} (a queue's
        L{MeshLog.subscription_copy} options, by name).
        """
        matches = topic.startswith("prices.")
        c_durable = c_durable if c_durable is not None else (
            [PRICES, GBP] if topic.endswith(".gbp") else [PRICES] if matches else [])
        pub = log.publish(A, topic, at, persistent)
        ab = log.fan_out(A, pub, topic, at + 0.002, persistent=persistent,
                         sent=[(B, [C, D])])[B]
        log.copy_arrives(A, B, ab, at + 0.003, persistent)
        if "b" in skip:
            return pub
        onward = log.fan_out(B, pub, topic, at + 0.004, taken=ab, persistent=persistent, hops=1,
                             non_durable=[SUBSCRIBER] if matches else [],
                             sent=[(C, [C]), (D, [D])])
        if matches:
            log.subscription_copy(B, pub, SUBSCRIBER, at + 0.005, persistent=False,
                                  **copies.get("subscriber", {}))
        log.copy_arrives(B, C, onward[C], at + 0.006, persistent)
        if lost_to_d:
            log.emit(B, at + 0.006, "message.forwarded", msg_id=onward[D], origin=A, peer=D,
                     hops=1)
        else:
            log.copy_arrives(B, D, onward[D], at + 0.006, persistent)
        for router, durable in ((C, c_durable), (D, [] if lost_to_d else [ALL])):
            if router.split("-")[1] in skip or not durable:
                continue
            log.fan_out(router, pub, topic, at + 0.008, taken=onward[router],
                        persistent=persistent, hops=2, durable=durable)
            for queue in durable:
                log.subscription_copy(router, pub, queue, at + 0.009, persistent=persistent,
                                      **copies.get(queue.split(":")[2], {}))
        return pub

    for i in range(5):
        tree(START + 10 + i)
    tree(START + 20, prices={"enqueued": 2})
    tree(START + 21, all={"enqueued": 0, "consumed": 0})
    tree(START + 22, lost_to_d=True)
    tree(START + 23, topic="prices.us.usd", prices={"consumed": 0})
    tree(START + 24, subscriber={"consumed": 0, "dropped": "max-depth"})
    tree(START + 25, skip="c")
    tree(START + 26, gbp={"consumed": 0})
    tree(START + 120)
    # B's fan-out record is lost (killed), but its copy for C went on.
    pub = tree(START + 27, skip="b")
    from_b = log.fan_out(B, pub, "prices.eu.gbp", START + 27.004, sent=[(C, [C])])[C]
    log.records[B] = [r for r in log.records[B] if r[2].get("msg_id") != from_b
                      and r[2].get("publication") != pub]
    log.copy_arrives(B, C, from_b, START + 27.006)
    log.fan_out(C, pub, "prices.eu.gbp", START + 27.008, taken=from_b, hops=2,
                durable=[PRICES, GBP])
    for queue in (PRICES, GBP):
        log.subscription_copy(C, pub, queue, START + 27.009)
    tree(START + 28, all={"enqueued": 0})
    # Non-persistent: the copy for GBP vanished.
    tree(START + 29, persistent=False, gbp={"enqueued": 0, "consumed": 0})
    tree(START + 31, topic="other.x", c_durable=[KEEP])
    pub = tree(START + 32)
    doubled = [r for _, _, r in log.records[D] if r["event"] == "topic.fanned-out"
               and r["publication"] == pub][0]
    log.copy_arrives(B, D, doubled["msg_id"], START + 33, forwarded=False)
    log.emit(D, START + 33.5, "topic.fanned-out", **{k: v for k, v in doubled.items()
                                                     if k not in ("time", "router", "event")})
    tree(START + 280, skip="b")  # never arrives at B (below)
    log.records[B] = [r for r in log.records[B] if r[0] < START + 279]
    for router in log.routers:
        log.stop(router, START + 300)
    log.write(directory)
    return log
