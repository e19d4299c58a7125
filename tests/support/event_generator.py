"""
Synthetic router event logs with known outcomes, for the audit.

L{MeshLog} writes small, hand-shaped logs: each call (a message on a
path, a link session that ends for a reason, a rejection, a client-session
event, a malformed line) writes the events real routers would write, in
every involved router's log, and adds what the audit must find to
L{MeshLog.expected}.  L{write_bulk} writes millions of plausible events
fast (string templates, no json.dumps), for the scale benchmark, and
returns the totals the audit must find in them.
"""

import hashlib
import json
import os
import random
from collections import Counter, defaultdict
from dataclasses import dataclass, field

#: 2027-01-15 08:00:00 UTC: far from the epoch, so a float second keeps µs.
START = 1_800_000_000.0


@dataclass
class Expected:
    """
    What the audit must report for the logs a L{MeshLog} wrote.
    """

    #: (origin, "queue@router") → Counter of the summary's message counts.
    routes: dict = field(default_factory=lambda: defaultdict(Counter))
    #: (origin, "queue@router") → latencies in ms of the enqueued messages.
    latencies: dict = field(default_factory=lambda: defaultdict(list))
    #: (router, peer) → Counter: connections, sessions, closed_<reason>, keepalive_late, ...
    links: dict = field(default_factory=lambda: defaultdict(Counter))
    #: (router, peer) → seconds in delivery.
    delivery_s: dict = field(default_factory=lambda: defaultdict(float))
    #: (router, code, by) → count.
    rejections: Counter = field(default_factory=Counter)
    #: router → Counter of session_disconnected, session_reattached, ...
    sessions: dict = field(default_factory=lambda: defaultdict(Counter))
    #: (router, user, action) → client requests denied.
    denials: Counter = field(default_factory=Counter)
    #: (file name, line) → problem class: "truncated", "garbage", "type", "blank", "missing".
    malformed: dict = field(default_factory=dict)

    def total(self, key: str) -> int:
        return sum(counts[key] for counts in self.routes.values())


class MeshLog:
    """
    The event logs of a mesh, built call by call and written at the end.

    Link ids follow the routers' rule (C{ROUTER/Cn} for a connector,
    C{ROUTER/Ln} for a listener, a new n per connection); message ids are
    C{ORIGIN:1:n}.
    """

    def __init__(self, routers, start: float = START) -> None:
        self.routers = list(routers)
        self.start = start
        self.records: dict[str, list[tuple[float, int, dict]]] = {r: [] for r in self.routers}
        self.expected = Expected()
        self._order = 0
        self._link_numbers = Counter()
        self._message_numbers = Counter()
        #: router → transform(record) → record, to imitate another version.
        self.versions: dict = {}
        #: router → [(after this many records, raw line, problem)].
        self._bad_lines: dict[str, list] = defaultdict(list)

    # -- raw events ----------------------------------------------------------

    def emit(self, router: str, time: float, event: str, **fields) -> None:
        record = {"time": time, "router": router, "event": event, **fields}
        self._order += 1
        self.records[router].append((time, self._order, record))

    def boot(self, router: str, time: float, version: str = "0.1.0") -> None:
        self.emit(router, time, "router.started", version=version, pid=4000 + len(router))

    def stop(self, router: str, time: float) -> None:
        self.emit(router, time, "router.stopped")

    # -- messages --------------------------------------------------------------

    def message(self, path: list[str], at: float, latency_s: float = 0.01, queue: str = "q",
                fate: str = "enqueued", persistent: bool = True, consumed: bool = True,
                copies: int = 1) -> str:
        """
        A message accepted at C{path[0]} at C{at} for C{queue@path[-1]},
        forwarded along C{path}.

        @param fate: C{enqueued} (C{copies} times at the destination, the
            first C{latency_s} after acceptance), C{lost} (forwarded part
            way and never enqueued), C{in-flight} (the same, meant to be
            accepted near the end of the logs), C{unobserved} (the same,
            to a router whose log is not written), C{dead-lettered} (at the
            last router of C{path}), C{dropped} (non-persistent, given up
            at the last router of C{path}) or C{vanished} (non-persistent,
            never enqueued, no event).
        """
        origin, dest_router = path[0], path[-1]
        if fate in ("dead-lettered", "dropped"):
            dest_router = self._elsewhere(path)
        dest = f"{queue}@{dest_router}"
        msg_id = self._accepted(origin, dest, at, persistent)
        base = {"msg_id": msg_id, "origin": origin}
        hops = len(path) - 1
        short = max(hops - 1, 0)
        reach = {"lost": short, "in-flight": short, "unobserved": short}.get(fate, hops)
        step = latency_s / (hops + 1)
        for i in range(reach):
            self.emit(path[i], at + step * (i + 1), "message.forwarded", **base,
                      peer=path[i + 1], hops=i + 1)
        route = self.expected.routes[(origin, dest)]
        route["accepted"] += 1
        end = path[-1]
        if fate == "enqueued":
            for copy in range(copies):
                self.emit(end, at + latency_s + copy * 0.5, "message.enqueued", **base,
                          queue=queue, hops=hops, accepted_at=at, persistent=persistent)
            route["enqueued"] += 1
            self.expected.latencies[(origin, dest)].append(latency_s * 1000)
            if copies > 1:
                route["duplicated"] += 1
                route["duplicate_copies"] += copies - 1
            if consumed:
                self.emit(end, at + latency_s + 0.001, "message.consumed", **base, queue=queue,
                          accepted_at=at, persistent=persistent, redelivered=False)
                route["consumed"] += 1
        elif fate == "lost":
            route["lost"] += 1
        elif fate == "in-flight":
            route["in_flight"] += 1
        elif fate == "unobserved":
            route["unobserved"] += 1
        elif fate == "dead-lettered":
            self.emit(end, at + latency_s, "message.dead-lettered", **base, hops=hops,
                      reason="max-hops", dest=dest)
            route["dead_lettered"] += 1
        elif fate == "dropped":
            self.emit(end, at + latency_s, "message.dropped", **base, reason="max-backlog")
            route["dropped"] += 1
        elif fate == "vanished":
            route["lost_non_persistent"] += 1
        else:
            raise ValueError(fate)
        return msg_id

    def _accepted(self, origin: str, dest: str, at: float, persistent: bool) -> str:
        """
        The next message id of C{origin}, accepted there at C{at} for C{dest}.
        """
        self._message_numbers[origin] += 1
        msg_id = f"{origin}:1:{self._message_numbers[origin]}"
        self.emit(origin, at, "message.accepted", msg_id=msg_id, origin=origin, dest=dest,
                  size=100, persistent=persistent)
        return msg_id

    def duplicate_dropped(self, router: str, msg_id: str, peer: str, at: float) -> None:
        """
        A copy of C{msg_id} caught and dropped at C{router}.
        """
        origin = msg_id.split(":")[0]
        self.emit(router, at, "message.duplicate", msg_id=msg_id, origin=origin, peer=peer)

    def _elsewhere(self, path: list[str]) -> str:
        """
        A destination beyond the end of C{path}, for messages that never get there.
        """
        return next(r for r in self.routers if r not in path) if len(path) < len(
            self.routers) else path[0]

    # -- topics ------------------------------------------------------------------

    def publish(self, origin: str, topic: str, at: float, persistent: bool = True) -> str:
        """
        A publication to C{topic} accepted at C{origin} at C{at} and
        enqueued in its C{$topic} 1 ms later (its route counts it
        accepted and enqueued; L{fan_out} takes it from there): its id.
        """
        dest = f"topic:{topic}"
        msg_id = self._accepted(origin, dest, at, persistent)
        base = {"msg_id": msg_id, "origin": origin}
        self.emit(origin, at + 0.001, "message.enqueued", **base, queue="$topic", hops=0,
                  accepted_at=at, persistent=persistent)
        route = self.expected.routes[(origin, dest)]
        route["accepted"] += 1
        route["enqueued"] += 1
        self.expected.latencies[(origin, dest)].append(1.0)
        return msg_id

    def fan_out(self, router: str, publication: str, topic: str, at: float, taken=None,
                persistent: bool = True, hops: int = 0, durable=(), non_durable=(),
                sent=()) -> dict[str, str]:
        """
        C{router}'s fan-out takes C{taken} (a copy's id; by default the
        publication itself) from its C{$topic} at C{at}: its
        C{message.consumed} and C{topic.fanned-out}, naming the
        subscription queues C{durable} and C{non_durable} and the copies
        C{sent}, C{(hop, targets)} pairs.  No copy's own events: those
        are L{copy_arrives} and L{subscription_copy}.

        @return: each hop's copy id.
        """
        taken = taken or publication
        origin = publication.split(":")[0]
        if taken == publication:
            self.expected.routes[(origin, f"topic:{topic}")]["consumed"] += 1
        self.emit(router, at, "message.consumed", msg_id=taken, origin=origin, queue="$topic",
                  accepted_at=at, persistent=persistent, redelivered=False)
        copies = {hop: topic_copy_id(publication, router, targets) for hop, targets in sent}
        self.emit(router, at, "topic.fanned-out", msg_id=taken, publication=publication,
                  origin=origin, topic=topic, persistent=persistent, hops=hops,
                  accepted_at=at, durable=list(durable), non_durable=list(non_durable),
                  sent=[copies[hop] for hop, _ in sent],
                  targets=[sorted(targets) for _, targets in sent])
        return copies

    def copy_arrives(self, sender: str, hop: str, copy_id: str, at: float,
                     persistent: bool = True, forwarded: bool = True, enqueued: int = 1) -> None:
        """
        A copy between routers sent from C{sender} to C{hop} at C{at}:
        C{message.forwarded} there (unless not C{forwarded}), then
        C{enqueued} C{message.enqueued} into C{hop}'s C{$topic}.
        """
        origin = copy_id.split(":")[0]
        if forwarded:
            self.emit(sender, at, "message.forwarded", msg_id=copy_id, origin=origin, peer=hop,
                      hops=1)
        for n in range(enqueued):
            self.emit(hop, at + 0.001 + n * 0.5, "message.enqueued", msg_id=copy_id,
                      origin=origin, queue="$topic", hops=1, accepted_at=at,
                      persistent=persistent)

    def subscription_copy(self, router: str, publication: str, queue: str, at: float,
                          persistent: bool = True, enqueued: int = 1, consumed: int = 1,
                          dropped: str | None = None) -> str:
        """
        The copy of C{publication} in subscription C{queue} at
        C{router}: C{enqueued} C{message.enqueued} at C{at}, then
        C{consumed} C{message.consumed}, or C{message.dropped} for
        C{dropped}: its id.
        """
        copy_id = f"{publication}/{queue}@{router}"
        origin = publication.split(":")[0]
        base = {"msg_id": copy_id, "origin": origin}
        for n in range(enqueued):
            self.emit(router, at + n * 0.5, "message.enqueued", **base, queue=queue, hops=1,
                      accepted_at=at, persistent=persistent)
        for n in range(consumed):
            self.emit(router, at + 0.01 + n * 0.5, "message.consumed", **base, queue=queue,
                      accepted_at=at, persistent=persistent, redelivered=n > 0)
        if dropped:
            self.emit(router, at + 0.01, "message.dropped", **base, queue=queue, reason=dropped)
        return copy_id

    def subscribe(self, router: str, queue: str, pattern: str, at: float,
                  replaced: bool = False) -> None:
        """
        C{topic.subscribed} of subscription C{queue} (durable when it
        is a C{$durable:CLIENT:NAME}).
        """
        if queue.startswith("$durable:"):
            _, client_id, name = queue.split(":")
            self.emit(router, at, "topic.subscribed", queue=queue, pattern=pattern,
                      kind="durable", client_id=client_id, name=name, shared=False, user=None,
                      replaced=replaced, deleted=0)
        else:
            self.emit(router, at, "topic.subscribed", queue=queue, pattern=pattern,
                      kind="non-durable")

    def unsubscribe(self, router: str, queue: str, at: float, deleted: int = 0) -> None:
        """
        C{topic.unsubscribed} of subscription C{queue}.
        """
        if queue.startswith("$durable:"):
            _, client_id, name = queue.split(":")
            self.emit(router, at, "topic.unsubscribed", queue=queue, kind="durable",
                      client_id=client_id, name=name, dropped=0, deleted=deleted)
        else:
            self.emit(router, at, "topic.unsubscribed", queue=queue, kind="non-durable",
                      dropped=0)

    # -- links -----------------------------------------------------------------

    def _link_id(self, router: str, kind: str) -> str:
        self._link_numbers[router, kind] += 1
        return f"{router}/{kind}{self._link_numbers[router, kind]}"

    def link(self, connector: str, listener: str, opened: float, duration_s: float,
             reason: str = "shutdown", keepalive_interval_ms: int = 1000,
             silence_intervals: float = 5.0, reached_delivery: bool = True,
             crashed: str | None = None) -> None:
        """
        One connection from C{connector} to C{listener}, through the four
        stages at C{opened}, in delivery for C{duration_s}, then closed.

        C{reason} is what the side that noticed logs: for C{keepalive},
        the connector dropped a peer silent for C{silence_intervals}
        intervals, and the listener sees C{peer-closed}; for C{shutdown},
        the connector is stopping and the listener sees C{peer-closed}.
        Without C{reached_delivery} the link dies in authentication with
        C{stage-timeout} on the connector and C{peer-closed} at the listener.
        The C{crashed} router (if any) logs no close: it died with the link.
        """
        ends = [(connector, listener, "connector", self._link_id(connector, "C")),
                (listener, connector, "listener", self._link_id(listener, "L"))]
        stages = ["connect", "authentication", "recovery"]
        delivery_at = opened + 0.003
        closed_at = delivery_at + duration_s if reached_delivery else opened + 1.0
        for router, peer, direction, link in ends:
            common = {"link": link, "peer": peer, "direction": direction}
            for i, stage in enumerate(stages if reached_delivery else stages[:2]):
                self.emit(router, opened + 0.001 * i, "link.stage", **common, stage=stage)
            if reached_delivery:
                self.emit(router, delivery_at, "link.stage", **common, stage="delivery",
                          keepalive_interval_ms=keepalive_interval_ms)
            counts = self.expected.links[(router, peer)]
            counts["connections"] += 1
            if reached_delivery:
                counts["sessions"] += 1
                if router != crashed:
                    self.expected.delivery_s[(router, peer)] += duration_s
            noticed = direction == "connector"
            if not reached_delivery:
                close = "stage-timeout" if noticed else "peer-closed"
            else:
                close = reason if noticed else "peer-closed"
            last_heard = closed_at - 0.01
            if noticed and close == "keepalive":
                last_heard = closed_at - silence_intervals * keepalive_interval_ms / 1000
                counts["keepalive_closes"] += 1
                counts["keepalive_late"] += silence_intervals > 6
            if router == crashed:
                counts["not_closed"] += 1
                continue
            counts[f"closed_{close.replace('-', '_')}"] += 1
            self.emit(router, closed_at, "link.closed", **common, reason=close, detail="",
                      stage="delivery" if reached_delivery else "authentication",
                      last_heard=last_heard if reached_delivery else None,
                      keepalive_interval_ms=keepalive_interval_ms if reached_delivery else None)

    def rejection(self, connector: str, listener: str, at: float,
                  code: str = "name-in-use") -> None:
        """
        A handshake refused by C{listener}: both sides log it and close.
        """
        for router, peer, direction, by in ((listener, connector, "listener", "local"),
                                             (connector, listener, "connector", "peer")):
            link = self._link_id(router, "L" if direction == "listener" else "C")
            common = {"link": link, "peer": peer, "direction": direction}
            self.emit(router, at, "link.stage", **common, stage="connect")
            self.emit(router, at + 0.001, "link.rejected", **common, code=code,
                      detail="already connected", by=by)
            self.emit(router, at + 1.0, "link.closed", **common, reason="rejected",
                      detail=code, stage="connect", last_heard=at, keepalive_interval_ms=None)
            self.expected.rejections[(router, code, by)] += 1
            counts = self.expected.links[(router, peer)]
            counts["connections"] += 1
            counts["closed_rejected"] += 1
            counts["rejections"] += 1

    def session_event(self, router: str, kind: str, at: float, client_id: str = "app-1") -> None:
        self.emit(router, at, f"session.{kind}", client_id=client_id, session_id="s-1")
        self.expected.sessions[router][f"session_{kind}"] += 1

    def denial(self, router: str, user: str, action: str, target: str, at: float) -> None:
        """
        A client request refused by the router's security.
        """
        self.emit(router, at, "security.denied", user=user, action=action, target=target,
                  reason="no permission")
        self.expected.denials[(router, user, action)] += 1

    # -- bad lines and versions -------------------------------------------------

    def bad_line(self, router: str, after: int, text: str, problem: str) -> None:
        """
        Put C{text} (without its newline) in C{router}'s log after its
        first C{after} records.
        """
        self._bad_lines[router].append((after, text, problem))

    def write(self, directory, truncate_last: dict | None = None) -> dict[str, str]:
        """
        Write one C{ROUTER/events.jsonl} per router under C{directory}.

        @param truncate_last: router → how many characters of its last
            record to keep, without a newline (a crash mid-write).
        @return: router → path.
        """
        paths = {}
        for router in self.routers:
            records = [r for _, _, r in sorted(self.records[router], key=lambda x: (x[0], x[1]))]
            transform = self.versions.get(router)
            lines = [json.dumps(transform(dict(r)) if transform else r, separators=(",", ":"))
                     for r in records]
            for after, text, problem in sorted(self._bad_lines[router], key=lambda b: -b[0]):
                lines.insert(after, text)
            bad = {text for _, text, _ in self._bad_lines[router]}
            problems = {text: problem for _, text, problem in self._bad_lines[router]}
            path = os.path.join(str(directory), router, "events.jsonl")
            os.makedirs(os.path.dirname(path), exist_ok=True)
            tail = ""
            cut = (truncate_last or {}).get(router)
            if cut is not None:
                tail = lines.pop()[:cut]
            for number, line in enumerate(lines, 1):
                if line in bad:
                    self.expected.malformed[(path, number)] = problems[line]
            if cut is not None:
                self.expected.malformed[(path, len(lines) + 1)] = "truncated"
            with open(path, "w", encoding="utf-8") as f:
                f.write("".join(line + "\n" for line in lines) + tail)
            paths[router] = path
        return paths


def topic_copy_id(publication: str, router: str, targets) -> str:
    """
    The id of the copy of C{publication} that C{router} makes for
    C{targets}, as a router's fan-out makes it (meshroute.router.topic_fan_out).
    """
    digest = hashlib.blake2s(",".join(sorted(targets)).encode(), digest_size=8).hexdigest()
    return f"{publication}>{router}:{digest}"


# -- bulk ----------------------------------------------------------------------


def write_bulk(directory, events: int, routers: int = 10, seed: int = 1,
               loss_rate: float = 0.001, duplicate_rate: float = 0.001,
               malformed_every: int = 100_000, span_s: float = 3600.0) -> dict:
    """
    About C{events} events of a ring of C{routers} routers, one file each:
    messages between random routers along the ring (1 to 3 hops; each
    message writes accepted, a forward per hop, enqueued, consumed), a few
    link sessions per router pair ending in keepalive or shutdown, a
    rejection per router, malformed lines now and then.  A C{loss_rate}
    of the messages are never enqueued and a C{duplicate_rate} enqueued
    twice; none is accepted in the last 5 minutes, so none is in flight.

    @return: the totals the audit must find: C{events} (lines written,
        malformed included), C{accepted}, C{enqueued}, C{lost},
        C{duplicated}, C{malformed}, C{routers}.
    """
    rng = random.Random(seed)
    names = [f"router-{i:02d}" for i in range(routers)]
    os.makedirs(str(directory), exist_ok=True)
    files = {name: open(os.path.join(str(directory), f"{name}.jsonl"), "w", encoding="utf-8",
                        buffering=1 << 20) for name in names}
    written = Counter()
    totals = Counter()
    start = START
    for name in names:
        files[name].write(f'{{"time":{start:.6f},"router":"{name}","event":"router.started",'
                          f'"version":"0.1.0","pid":{rng.randint(100, 99999)}}}\n')
        written[name] += 1
    for i, name in enumerate(names):
        peer = names[(i + 1) % routers]
        for n in range(3):
            opened = start + 1 + n * span_s / 3
            closed = opened + span_s / 3 - 5
            reason = "keepalive" if n == 1 else "shutdown"
            for router, other, kind in ((name, peer, "C"), (peer, name, "L")):
                link = f"{router}/{kind}{i * 3 + n}"
                direction = "connector" if kind == "C" else "listener"
                why = reason if kind == "C" else "peer-closed"
                files[router].write(
                    f'{{"time":{opened:.6f},"router":"{router}","event":"link.stage","link":'
                    f'"{link}","peer":"{other}","direction":"{direction}","stage":"delivery",'
                    f'"keepalive_interval_ms":1000}}\n'
                    f'{{"time":{closed:.6f},"router":"{router}","event":"link.closed","link":'
                    f'"{link}","peer":"{other}","direction":"{direction}","reason":"{why}",'
                    f'"detail":"","stage":"delivery","last_heard":{closed - 5:.6f},'
                    f'"keepalive_interval_ms":1000}}\n')
                written[router] += 2
    message_span = span_s - 300
    n = 0
    remaining = events - sum(written.values())
    while remaining > 0:
        n += 1
        origin = rng.randrange(routers)
        hops = rng.randint(1, 3)
        path = [names[(origin + k) % routers] for k in range(hops + 1)]
        at = start + 2 + message_span * rng.random()
        msg_id = f"{path[0]}:1:{n}"
        dest = f"q{n % 4}@{path[-1]}"
        roll = rng.random()
        lost = roll < loss_rate
        copies = 2 if loss_rate <= roll < loss_rate + duplicate_rate else 1
        head = f'"msg_id":"{msg_id}","origin":"{path[0]}"'
        out = files[path[0]]
        out.write(f'{{"time":{at:.6f},"router":"{path[0]}","event":"message.accepted",{head},'
                  f'"dest":"{dest}","size":{rng.randint(10, 4000)},"persistent":true}}\n')
        count = 1
        t = at
        for k in range(hops if not lost else hops - 1):
            t += 0.002
            files[path[k]].write(
                f'{{"time":{t:.6f},"router":"{path[k]}","event":"message.forwarded",{head},'
                f'"peer":"{path[k + 1]}","hops":{k + 1}}}\n')
            count += 1
        totals["accepted"] += 1
        if lost:
            totals["lost"] += 1
        else:
            end = files[path[-1]]
            queue = dest.split("@")[0]
            for copy in range(copies):
                t += 0.001 + copy * 0.4
                end.write(f'{{"time":{t:.6f},"router":"{path[-1]}","event":"message.enqueued",'
                          f'{head},"queue":"{queue}","hops":{hops},"accepted_at":{at:.6f},'
                          f'"persistent":true}}\n')
                count += 1
            end.write(f'{{"time":{t + 0.05:.6f},"router":"{path[-1]}","event":'
                      f'"message.consumed",{head},"queue":"{queue}","accepted_at":{at:.6f},'
                      f'"persistent":true,"redelivered":false}}\n')
            count += 1
            totals["enqueued"] += 1
            totals["duplicated"] += copies > 1
        remaining -= count
        totals["events"] += count
        if malformed_every and totals["events"] // malformed_every > totals["malformed"]:
            out.write('{"time":17,"router":"trunc\n')
            totals["malformed"] += 1
            totals["events"] += 1
            remaining -= 1
    for name in names:
        files[name].write(f'{{"time":{start + span_s:.6f},"router":"{name}",'
                          '"event":"router.stopped"}\n')
        files[name].close()
    totals["events"] += sum(written.values()) + len(names)
    totals["routers"] = routers
    return dict(totals)
