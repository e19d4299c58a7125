"""
What the store's synchronous accessors answer, kept in memory.

L{meshroute.store.sqlite.SQLiteStore.last_received}, C{peer_store_id},
C{backlog_depths}, C{queue_depths}, C{queue_depth}, C{outbox_peers}, C{outbox_depths}
and C{prepared_count} are served from a L{StoreMirror}: loaded at the store's
open and updated only on the reactor thread, by a callback the store
adds to each write's Deferred before returning it.  So they change
exactly when the Deferred fires (after the commit), in submission order,
and a caller's own callbacks already see the change; they need no lock.
"""

from meshroute.messages import DEAD_LETTER_QUEUE, EXPIRED_QUEUE, Message
from meshroute.store.rows import CLAIMED


class StoreMirror:
    """
    The last sequence received from each peer and the store id of each
    peer, the number of messages in each place: the backlog per
    destination router, each local queue, each peer's outbox per
    destination router; and the number of prepared transactions.

    Each update is a Deferred callback taking the store function's result
    and returning what the store's caller gets.
    """

    def __init__(self, received: dict | None = None, peer_stores: dict | None = None,
                 backlog: dict | None = None, queues: dict | None = None,
                 outboxes: dict | None = None, prepared: int = 0) -> None:
        self._received: dict[str, int] = received or {}
        self._peer_stores: dict[str, str] = peer_stores or {}
        self._backlog: dict[str, int] = backlog or {}
        self._queues: dict[str, int] = queues or {}
        self._outboxes: dict[str, dict[str, int]] = outboxes or {}
        self._prepared = prepared

    @classmethod
    def read(cls, connection) -> "StoreMirror":
        """
        In a transaction on the store's connection: the mirror of what
        the database holds.
        """
        execute = connection.execute
        outboxes: dict = {}
        for peer, dest_router, n in execute(
            "SELECT peer, dest_router, count(*) FROM messages WHERE state = 'outbox' "
            "GROUP BY peer, dest_router"
        ):
            outboxes.setdefault(peer, {})[dest_router] = n
        return cls(
            received=dict(
                execute("SELECT peer, last_received FROM links WHERE last_received > 0")
            ),
            peer_stores=dict(
                execute("SELECT peer, peer_store_id FROM links WHERE peer_store_id != ''")
            ),
            backlog=dict(
                execute(
                    "SELECT dest_router, count(*) FROM messages WHERE state = 'backlog' "
                    "GROUP BY dest_router"
                )
            ),
            queues=dict(
                execute(
                    "SELECT dest_queue, count(*) FROM messages WHERE state = 'queue' "
                    "GROUP BY dest_queue"
                )
            ),
            outboxes=outboxes,
            prepared=execute("SELECT count(*) FROM prepared_transactions").fetchone()[0],
        )

    # The accessors.

    def last_received(self, peer: str) -> int:
        return self._received.get(peer, 0)

    def peer_store_id(self, peer: str) -> str:
        return self._peer_stores.get(peer, "")

    def backlog_depths(self) -> dict[str, int]:
        return dict(self._backlog)

    def backlog_depth(self, router: str) -> int:
        return self._backlog.get(router, 0)

    def queue_depths(self) -> dict[str, int]:
        return dict(self._queues)

    def queue_depth(self, queue: str) -> int:
        return self._queues.get(queue, 0)

    def outbox_peers(self) -> list[str]:
        return sorted(self._outboxes)

    def outbox_depths(self) -> dict[str, dict[str, int]]:
        return {peer: dict(outbox) for peer, outbox in self._outboxes.items()}

    def prepared_count(self) -> int:
        return self._prepared

    # The updates, as writes commit.

    def entered(self, result, message: Message, local: bool):
        """
        C{message} entered its local queue (C{local}) or the backlog.
        """
        if local:
            _count(self._queues, message.dest_queue, 1)
        else:
            _count(self._backlog, message.dest_router, 1)
        return result

    def entered_if_new(self, original: str | None, message: Message, local: bool):
        """
        After C{accept_once}: C{message} entered its place if it was
        accepted (no original).
        """
        if original is None:
            self.entered(None, message, local)
        return original

    def accepted(self, outcomes: list, calls: list) -> list:
        """
        C{calls} (C{(message, duplicate_id, local)}) were accepted with
        C{outcomes}: each persistent message accepted entered its place.
        """
        for (message, _, local), original in zip(calls, outcomes):
            if original is None and message.persistent:
                self.entered(None, message, local)
        return outcomes

    def committed(self, result: tuple, calls: list) -> list:
        """
        A client transaction accepted C{calls} and consumed entries.
        """
        outcomes, consumed = result
        self.accepted(outcomes, calls)
        _add_counts(consumed, self._queues, -1)
        return outcomes

    def prepared(self, locked: dict) -> None:
        """
        A transaction was prepared: C{locked[queue]} entries left each
        queue, locked to it.
        """
        self._prepared += 1
        _add_counts(locked, self._queues, -1)

    def committed_prepared(self, result: tuple, calls: list) -> tuple:
        """
        A prepared transaction accepted C{calls} (the entries it deleted
        had left their queues when it was prepared).
        """
        self._prepared -= 1
        self.accepted(result[0], calls)
        return result

    def rolled_back(self, result: tuple) -> tuple:
        """
        A prepared transaction was rolled back: the entries it had locked
        are back in their queues.
        """
        self._prepared -= 1
        for _, message in result[0]:
            _count(self._queues, message.dest_queue, 1)
        return result

    def copies_placed(self, result: tuple, calls: list) -> list:
        """
        The topic fan-out placed some of C{calls} (C{(message, local)})
        and consumed entries; returns the messages placed.
        """
        placed, consumed = result
        out = []
        for (message, local), new in zip(calls, placed):
            if new:
                self.entered(None, message, local)
                out.append(message)
        _add_counts(consumed, self._queues, -1)
        return out

    def emptied(self, deleted: int, queue: str) -> int:
        """
        C{queue}'s C{deleted} entries were deleted with it.
        """
        if deleted:
            _count(self._queues, queue, -deleted)
        return deleted

    def emptied_if_replaced(self, result: tuple, queue: str) -> tuple:
        """
        A durable subscription was recorded: C{result} is C{(what,
        deleted)}, its queue's entries deleted when it was replaced.
        """
        self.emptied(result[1], queue)
        return result

    def consumed(self, by_queue: dict) -> int:
        """
        C{by_queue[queue]} entries left each queue; returns how many.
        """
        return _add_counts(by_queue, self._queues, -1)

    def received(self, outcome, peer: str, seq: int, message: Message, local: bool) -> str:
        """
        C{seq} from C{peer} was received with C{outcome}, as
        L{meshroute.store.inbox} answers it; returns the outcome's name
        (a claimed one whole: C{(CLAIMED, entry_id)}).
        """
        if type(outcome) is tuple:
            if outcome[0] == CLAIMED:
                self._received[peer] = seq
                self.entered(None, message, local)
                # The router hands the entry over by its id.
                return outcome
            outcome, outbox_peer, returned = outcome
            _add_counts(self.left_outbox(returned, outbox_peer), self._backlog, 1)
        if outcome != "duplicate-seq":
            self._received[peer] = seq
            if outcome == "stored":
                self.entered(None, message, local)
        return outcome

    def received_many(self, outcomes: list, peer: str, items) -> list:
        received = self.received
        return [received(outcome, peer, seq, message, local)
                for outcome, (seq, message, local) in zip(outcomes, items)]

    def recorded_peer_store(self, _, peer: str, store_id: str, forget_received: bool) -> None:
        self._peer_stores[peer] = store_id
        if forget_received:
            self._received.pop(peer, None)

    def assigned(self, assigned: list, peer: str) -> list:
        """
        The messages C{assigned} left the backlog for C{peer}'s outbox.
        """
        if assigned:
            backlog = self._backlog
            for _, message in assigned:
                _count(backlog, message.dest_router, -1)
            outbox = self._outboxes.setdefault(peer, {})
            for _, message in assigned:
                _count(outbox, message.dest_router, 1)
        return assigned

    def entered_outbox(self, result, peer: str, assigned: list):
        """
        The messages C{assigned} were accepted straight into C{peer}'s
        outbox.
        """
        outbox = self._outboxes.setdefault(peer, {})
        for _, message in assigned:
            _count(outbox, message.dest_router, 1)
        return result

    def left_outbox(self, by_dest: dict, peer: str) -> dict:
        """
        C{by_dest[dest_router]} messages left C{peer}'s outbox; returns
        C{by_dest}.
        """
        outbox = self._outboxes.get(peer)
        if outbox is not None:
            _add_counts(by_dest, outbox, -1)
            if not outbox:
                del self._outboxes[peer]
        return by_dest

    def acknowledged(self, by_dest: dict, peer: str) -> int:
        """
        C{peer} acknowledged C{by_dest[dest_router]} messages; returns how
        many.
        """
        return sum(self.left_outbox(by_dest, peer).values())

    def returned(self, by_dest: dict, peer: str) -> int:
        """
        C{by_dest[dest_router]} messages went back from C{peer}'s outbox
        to the backlog; returns how many.
        """
        return _add_counts(self.left_outbox(by_dest, peer), self._backlog, 1)

    def dead_lettered(self, moved) -> None:
        if moved is not None:
            self._set_aside(moved, DEAD_LETTER_QUEUE)
        return None

    def expired(self, moved: list) -> list:
        """
        C{moved} (C{(message, state, dest_router, dest_queue, peer)}) went
        to the expired queue; returns their messages.
        """
        for place in moved:
            self._set_aside(place[1:], EXPIRED_QUEUE)
        return [place[0] for place in moved]

    def _set_aside(self, moved: tuple, queue: str) -> None:
        """
        A message left C{moved}'s place (C{(state, dest_router, dest_queue,
        peer)}) for local queue C{queue}.
        """
        state, dest_router, dest_queue, peer = moved
        if state == "backlog":
            _count(self._backlog, dest_router, -1)
        elif state == "queue":
            _count(self._queues, dest_queue, -1)
        elif state == "outbox":
            self.left_outbox({dest_router: 1}, peer)
        _count(self._queues, queue, 1)


def _count(counts: dict, key: str, delta: int) -> None:
    n = counts.get(key, 0) + delta
    if n:
        counts[key] = n
    else:
        del counts[key]


def _add_counts(by_key: dict, counts: dict, sign: int) -> int:
    """
    Add C{by_key}'s counts (times C{sign}) to C{counts}; return their sum.
    """
    total = 0
    for key, n in by_key.items():
        _count(counts, key, sign * n)
        total += n
    return total
