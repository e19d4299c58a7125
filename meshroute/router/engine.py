"""
The message engine of one router: where a message goes next.

A message accepted from a client, or received over a link, is either for
one of this router's queues (it is enqueued) or for another router (it
waits in the store's backlog until the route table names a next hop with a
live link, and is then handed to that link's
L{PeerChannel<meshroute.router.peer_channel.PeerChannel>}, which sends it and
takes its acknowledgement).

Exactly once across links (docs/routing.md tells the whole story):

 - Per link and direction, persistent messages carry sequence numbers.
   The receiver stores a message and the sequence in one transaction and
   only then acknowledges it (cumulatively, once per reactor turn); the
   sender forgets a message only when it is acknowledged.
 - When a link comes back, the recovery stage tells each side the last
   sequence the other holds: the sender drops what is acknowledged and
   replays the rest (before anything new), and the receiver discards
   sequences it already has.  Sequences belong to one store: the stores'
   ids travel with them, so a peer restarted with an empty data dir is
   not taken for the old one (L{meshroute.router.peer_channel}).
 - Any store failure closes the link, so that nothing after it is
   acknowledged and recovery replays what is missing.
 - A link that stays down for C{reroute-delay} gives its unacknowledged
   messages back to the backlog, where another route can take them.  The
   peer may have stored some of them without our hearing the ack, so
   every router also refuses a message id it holds or has enqueued: a
   second copy is dropped (C{message.duplicate}), never enqueued.
 - Order through a reroute: while a destination has messages in the
   outbox of a peer that is not its next hop, its newer messages stay in
   the backlog behind them (L{MessageEngine.assignable}).

Flow control: at most L{WINDOW<meshroute.router.peer_channel.WINDOW>}
unacknowledged messages per link, and at most
L{WINDOW_BYTES<meshroute.router.peer_channel.WINDOW_BYTES>} of their bodies (one
message more when a single one is larger); the rest wait in the store,
not in memory, however large the backlog.  A link whose transport is full
(L{PeerChannel.pause<meshroute.router.peer_channel.PeerChannel.pause>}) takes no
more messages until it drains: persistent ones wait in the store,
non-persistent ones in the bounded waiting queue below.

Non-persistent messages (C{persistent=False}) never touch the store: they
travel as C{FastTransfer} frames (or, on a version-4 link, in one
C{FastTransferBatch} per reactor turn) without sequence or acknowledgement, so
they may be lost with a link or a router and are never duplicated.  While
they have no route, or their link is paused, they wait in memory, at most
C{max-transient-backlog} per destination: past it producers get
L{BacklogFull} and, of those arriving over links, the oldest is dropped.
"""

from collections import defaultdict, deque
from typing import Callable

from twisted.internet.defer import Deferred, DeferredList, fail, gatherResults, succeed
from twisted.internet.interfaces import IDelayedCall, IReactorTime
from twisted.logger import Logger
from twisted.python.failure import Failure

from meshroute import events
from meshroute.errors import MeshrouteError
from meshroute.expiry import (
    IN_BACKLOG,
    IN_QUEUE,
    IN_TRANSIT,
    ExpirySweep,
    emit_expired,
    now_ms,
    set_aside,
)
from meshroute.messages import (
    DEAD_LETTER_QUEUE,
    EXPIRED_QUEUE,
    EXPIRY_NOTICES,
    NOTIFY_EXPIRY_HEADER,
    SYSTEM_QUEUES,
    AddressError,
    Message,
    MessageIds,
    expiry_headers,
    message_of,
    parse_address,
)
from meshroute.router.peer_channel import PeerChannel
from meshroute.router.queues import QueueManager
from meshroute.routing.flood import TurnFlood
from meshroute.routing.table import Advertisement
from meshroute.wire.frames import EPOCH_VERSION, Recovery, Routes

log = Logger()

#: How many waiting non-persistent messages one reactor turn hands a link
#: once a route appears, so that a large wait does not stall the reactor.
TRANSIENT_BATCH = 1024


class UnknownRouter(MeshrouteError):
    """
    No router of that name has ever been heard of in the mesh.
    """

    code = "unknown-router"


class BacklogFull(MeshrouteError):
    """
    The destination's backlog reached its bound (C{max-backlog}).
    """

    code = "backlog-full"


def _expiry(fields) -> tuple[int, str]:
    """
    C{(expires_ms, notify)} for L{MessageEngine._new_message} from the
    optional trailing fields of a send, C{[expires_ms, notify_expiry[,
    sender]]}: the session to notify only when asked.
    """
    if not fields:
        return 0, ""
    expires_ms, notify_expiry, *sender = fields
    return expires_ms, (sender[0] if sender and notify_expiry else "")


def _put(outcome, outcomes: list, position: int) -> None:
    """
    Record C{outcome} (a message id or a L{Failure}) as the outcome at
    C{position} of a batch of sends.
    """
    outcomes[position] = outcome


#: The fields of a message's MESSAGE_ACCEPTED record after the head.
_ACCEPTED_FIELDS = ("msg_id", "origin", "dest", "size", "persistent")
#: ... of its MESSAGE_ENQUEUED record.
_ENQUEUED_FIELDS = ("msg_id", "origin", "queue", "hops", "accepted_at", "persistent")
#: ... of its MESSAGE_FORWARDED record.
_FORWARDED_FIELDS = ("msg_id", "peer", "origin", "hops")
#: ... of the MESSAGE_DROPPED record of a message the engine drops.
_DROPPED_FIELDS = ("msg_id", "reason", "origin")


def _forwarded(peer: str, message: Message) -> tuple:
    """
    The C{_FORWARDED_FIELDS} of C{message}'s record, sent on to C{peer}.
    """
    return (message.msg_id, peer, message.origin, message.hops + 1)


def _address(message: Message) -> str:
    return f"{message.dest_queue}@{message.dest_router}"


def _routes_frame(advertisements, version: int) -> Routes:
    """
    The L{Routes} frame of C{advertisements} for a link at C{version}: an
    advertisement of an epoch above 0 carries it, except on a version-2
    link, whose peer could not read it (it compares C{seq} alone).
    """
    return Routes([
        [a.origin, a.seq, list(a.neighbors)]
        + ([a.epoch] if a.epoch and version >= EPOCH_VERSION else [])
        for a in advertisements
    ])


class MessageEngine:
    """
    Accepts, forwards and enqueues messages for one router.

    @param max_hops: links a message may cross; past it, it is
        dead-lettered where that happens.
    @param max_backlog: persistent messages that may wait (in the store)
        for one destination router; past it, producers get L{BacklogFull}.
    @param max_transient_backlog: non-persistent messages that may wait (in
        memory) for one destination router; past it, producers get
        L{BacklogFull}, and the oldest of those arriving over links are
        dropped.
    @param reroute_delay: seconds a closed link keeps its unacknowledged
        messages for its own recovery before they go back to the backlog.
    @param epoch_heard: called C{(origin, epoch)} for every route
        advertisement taken from an epoch above 0
        (L{meshroute.link.epochs.PeerEpochs.heard}).
    @param routers_heard: called with the set of router names the route
        table heard of first, after a link came up or advertisements
        arrived (L{meshroute.routing.known.KnownRouters.heard}).
    """

    def __init__(
        self,
        name: str,
        store,
        routes,
        event_log: events.EventLog,
        clock: IReactorTime,
        max_hops: int = 16,
        max_backlog: int = 100_000,
        max_transient_backlog: int = 10_000,
        reroute_delay: float = 5.0,
        epoch_heard: Callable[[str, int], None] = lambda origin, epoch: None,
        routers_heard: Callable[[set[str]], None] = lambda routers: None,
    ) -> None:
        self.name = name
        self.queues = QueueManager(store, event_log, clock, expired=self.expired)
        #: Sets aside expired messages nobody is about to take (started
        #: with the router, L{start}).
        self.expiry_sweep = ExpirySweep(clock, store, self.queues, self._swept)
        #: Who hands expiry notices to this router's client sessions: each
        #: is called C{(sender, msg_id, address, router)} (C{sender} as
        #: L{submit} was given it) and answers
        #: whether it knows that session (L{SessionRegistry.expired_notice
        #: <meshroute.sessions.session.SessionRegistry.expired_notice>}).
        self.expiry_notices: list[Callable[[str, str, str, str], bool]] = []
        self.routes = routes
        self._store = store
        self._events = event_log
        self._clock = clock
        self._max_hops = max_hops
        self._max_backlog = max_backlog
        self._max_transient_backlog = max_transient_backlog
        self._reroute_delay = reroute_delay
        self._epoch_heard = epoch_heard
        self._routers_heard = routers_heard
        self._ids = MessageIds(name)
        self._channels: dict[str, PeerChannel] = {}
        self._serving: dict[str, frozenset] | None = {}
        self._flood = TurnFlood(clock, self._turn_ended)
        self._reroutes: dict[str, IDelayedCall] = {}
        self._accepting: dict[str, int] = defaultdict(int)
        self._transient: dict[str, deque] = defaultdict(deque)
        #: Who takes what arrives for each of this router's system queues:
        #: expiry notices here, admin requests and answers in
        #: L{meshroute.router.remote_views}.
        self._system: dict[str, Callable[[Message], None]] = {
            EXPIRY_NOTICES: self._notice_arrived}

    # -- clients ------------------------------------------------------------

    def submit(self, address: str, body: bytes, headers: dict, persistent: bool,
               duplicate_id: str = "", expires_ms: int = 0, notify_expiry: bool = False,
               sender: str = "") -> Deferred:
        """
        Accept a message from a client.

        @param expires_ms: when its time to live runs out (absolute
            wall-clock epoch milliseconds; 0: never): not delivered after
            it, but set aside in C{$expired} (L{meshroute.expiry}).
        @param notify_expiry: tell the session C{sender} (what L{expiry_notices}
            know it by: L{SessionCore.notice_id
            <meshroute.sessions.session.SessionCore.notice_id>}) if it
            expires (best effort, docs/client-protocol.md).

        @param duplicate_id: when not empty, accept the message only if no
            send with this id was accepted within the store's duplicate-id
            window (the id is recorded in the same transaction as the
            message); a duplicate fires with the first message's id,
            enqueues nothing and emits C{message.duplicate} with reason
            C{duplicate-id}, even when a send to that address would be
            refused now (L{UnknownRouter}, L{BacklogFull}).
        @return: Deferred firing with the message id once the message is
            durable (persistent) or accepted (non-persistent); failing with
            L{AddressError}, L{UnknownRouter} or L{BacklogFull}.
        """
        try:
            queue, router = parse_address(address, self.name)
        except AddressError as e:
            return fail(e)
        refusal = self._refusal(router, persistent)
        if refusal is not None:
            if duplicate_id:
                return self._refused_unless_sent(refusal, duplicate_id, f"{queue}@{router}")
            return fail(refusal)
        message = self._new_message(queue, router, body, headers, persistent, expires_ms,
                                    sender if notify_expiry else "")
        if not persistent:
            if duplicate_id:
                d = self._store.accept_once(message, duplicate_id)
                d.addCallback(self._accepted_transient_once, message, duplicate_id)
                return d
            self._emit_accepted(message)
            self._route_transient(message)
            return succeed(message.msg_id)
        if router != self.name:
            self._accepting[router] += 1
        if duplicate_id:
            d = self._store.accept_once(message, duplicate_id)
            d.addBoth(self._accepted_once, message, duplicate_id)
        else:
            d = self._store.accept(message)
            d.addBoth(self._accepted, message)
        self._pump_ahead((router,))
        return d

    def submit_many(self, sends) -> Deferred:
        """
        Accept a batch of client sends, each C{(address, headers, body,
        persistent, duplicate_id)} (a Send's fields, as a SendBatch carries
        them) or C{(..., duplicate_id, expires_ms, notify_expiry[,
        sender])}, each as L{submit} would (same
        refusals, same events, in order), with ONE store call for all the
        messages to store (L{SQLiteStore.accept_many}).

        @return: Deferred firing with one outcome per send, in order: the
            message id (the first message's for a duplicate id), or a
            L{Failure} (L{AddressError}, L{UnknownRouter}, L{BacklogFull},
            or the store's error for every stored one when the store call
            failed).
        """
        outcomes: list = []
        stored: list[tuple[Message, str]] = []
        positions: list[int] = []
        rechecks: list[Deferred] = []
        # The position of the first stored send of each duplicate id, and
        # the refused sends repeating one: answered as that send is (its
        # transaction is not written yet, a look-up would not find it).
        firsts: dict[str, int] = {}
        repeats: list[tuple] = []
        # Non-persistent sends without a duplicate id: taken at once, their
        # acceptance recorded with one call of the event log.
        transient: list[Message] = []
        now = self._clock.seconds()
        # The addresses of the batch parsed, each once (a batch's sends
        # mostly go to one).
        parsed: dict[str, tuple[str, str]] = {}
        for address, headers, body, persistent, duplicate_id, *expiry in sends:
            where = parsed.get(address)
            if where is None:
                try:
                    where = parsed[address] = parse_address(address, self.name)
                except AddressError as e:
                    outcomes.append(Failure(e))
                    continue
            queue, router = where
            refusal = self._refusal(router, persistent)
            if refusal is not None:
                if duplicate_id in firsts:
                    repeats.append((len(outcomes), firsts[duplicate_id], refusal,
                                    f"{queue}@{router}", duplicate_id))
                    outcomes.append(None)
                elif duplicate_id:
                    # Its place first: the store's look-up may answer at once.
                    outcomes.append(None)
                    d = self._refused_unless_sent(refusal, duplicate_id, f"{queue}@{router}")
                    rechecks.append(d.addBoth(_put, outcomes, len(outcomes) - 1))
                else:
                    outcomes.append(Failure(refusal))
                continue
            message = self._new_message(queue, router, body, headers, persistent,
                                        *_expiry(expiry), accepted_at=now)
            if not persistent and not duplicate_id:
                transient.append(message)
                outcomes.append(message.msg_id)
                continue
            if persistent and router != self.name:
                self._accepting[router] += 1
            if duplicate_id:
                firsts.setdefault(duplicate_id, len(outcomes))
            positions.append(len(outcomes))
            outcomes.append(None)
            stored.append((message, duplicate_id))
        if transient:
            self._emit_accepted_many(transient)
            self._route_transient_many(transient)
        if stored:
            d = self._store.accept_many(stored)
            d.addBoth(self._accepted_many, stored, positions, outcomes)
            if repeats:
                d.addCallback(self._repeats_answered, repeats, outcomes)
            rechecks.append(d)
            self._pump_ahead({m.dest_router for m, _ in stored if m.persistent})
        if not rechecks:
            return succeed(outcomes)
        return DeferredList(rechecks).addCallback(lambda _: outcomes)

    def _accepted_many(self, result, stored: list, positions: list, outcomes: list) -> None:
        if isinstance(result, Failure):
            self._not_accepting(stored)
            for position in positions:
                outcomes[position] = result
            return None
        for (message, duplicate_id), original, position in zip(stored, result, positions):
            if message.persistent:
                outcome = self._accepted_once(original, message, duplicate_id)
            else:
                outcome = self._accepted_transient_once(original, message, duplicate_id)
            outcomes[position] = outcome
        return None

    def _repeats_answered(self, _, repeats: list, outcomes: list) -> None:
        """
        Answer the refused sends of a batch that repeat the duplicate id of
        a send stored before them in it, as L{submit} would answer them
        after that send: with its message id once it is accepted.
        """
        for position, first, refusal, dest, duplicate_id in repeats:
            original = outcomes[first]
            if type(original) is str:
                self._emit_duplicate_send(original, dest, duplicate_id)
                outcomes[position] = original
            else:
                outcomes[position] = Failure(refusal)

    def _new_message(self, queue: str, router: str, body: bytes, headers: dict,
                     persistent: bool, expires_ms: int = 0, notify: str = "",
                     accepted_at: float | None = None) -> Message:
        """
        A message accepted now, or at C{accepted_at}: the one time of all
        the sends of a batch, accepted together.
        """
        if accepted_at is None:
            accepted_at = self._clock.seconds()
        return message_of(self._ids.next(), self.name, router, queue, body,
                          expiry_headers(headers, expires_ms, notify), 0, persistent,
                          accepted_at)

    def commit(self, sends, entry_ids) -> Deferred:
        """
        Carry out a client transaction: accept every message of C{sends}
        (C{(address, body, headers, persistent, duplicate_id)} tuples, or
        with C{expires_ms, notify_expiry[, sender]} after them, each as
        L{submit} would) and delete the queue entries C{entry_ids}, in
        one store call, so that all of it or none of it is done.  A send
        that L{submit} would refuse refuses the whole transaction, unless
        its duplicate id was accepted before (the transaction is a retry of
        one that was applied, whose answer a failure swallowed): as with
        L{submit}, that send is answered with the first message's id,
        whatever the mesh's state now.

        @return: Deferred firing with the message id of each send (the
            first message's for a duplicate id) once durable; failing
            with L{AddressError}, L{UnknownRouter}, L{BacklogFull} or the
            store's error, nothing done.
        """
        refused = []
        try:
            for address, _body, _headers, persistent, duplicate_id, *_ in sends:
                _queue, router = parse_address(address, self.name)
                refusal = self._refusal(router, persistent)
                if refusal is not None:
                    if not duplicate_id:
                        raise refusal
                    refused.append((refusal, duplicate_id))
        except MeshrouteError as e:
            return fail(e)
        if not refused:
            return self._commit(sends, entry_ids)
        d = gatherResults([self._store.duplicate_of(duplicate_id)
                           for _refusal, duplicate_id in refused], consumeErrors=True)

        def decided(originals):
            for (refusal, _duplicate_id), original in zip(refused, originals):
                if original is None:
                    return Failure(refusal)
            return self._commit(sends, entry_ids)

        d.addCallbacks(decided, lambda failure: failure.value.subFailure)
        return d

    def _commit(self, sends, entry_ids) -> Deferred:
        messages: list[tuple[Message, str]] = []
        for address, body, headers, persistent, duplicate_id, *expiry in sends:
            queue, router = parse_address(address, self.name)
            message = self._new_message(queue, router, body, headers, persistent,
                                        *_expiry(expiry))
            if persistent and router != self.name:
                self._accepting[router] += 1
            messages.append((message, duplicate_id))
        stored = [(m, duplicate_id) for m, duplicate_id in messages
                  if m.persistent or duplicate_id]
        d = self._store.commit(stored, entry_ids)
        d.addBoth(self._committed, messages)
        self._pump_ahead({m.dest_router for m, _ in stored if m.persistent})
        return d

    def _not_accepting(self, messages) -> None:
        for message, _ in messages:
            if message.persistent and message.dest_router != self.name:
                self._accepting[message.dest_router] -= 1

    def _committed(self, outcomes, messages: list) -> list:
        if isinstance(outcomes, Failure):
            self._not_accepting(messages)
            return outcomes
        outcomes = iter(outcomes)
        msg_ids = []
        for message, duplicate_id in messages:
            original = next(outcomes) if message.persistent or duplicate_id else None
            if message.persistent:
                msg_ids.append(self._accepted_once(original, message, duplicate_id))
            else:
                msg_ids.append(self._accepted_transient_once(original, message, duplicate_id))
        return msg_ids

    def _refusal(self, router: str, persistent: bool) -> MeshrouteError | None:
        """
        Why a send to C{router} would be refused now, if it would: no
        router of that name is known, or its backlog is at its bound.
        """
        if router == self.name:
            return None
        if not self.routes.known(router):
            return UnknownRouter(f"no router named {router!r} is known in the mesh")
        if persistent:
            waiting = self._store.backlog_depths().get(router, 0) + self._accepting[router]
            if waiting >= self._max_backlog:
                return BacklogFull(f"{waiting} messages already wait for {router} (max-backlog)")
        else:
            waiting = len(self._transient.get(router, ()))
            if waiting >= self._max_transient_backlog:
                return BacklogFull(
                    f"{waiting} non-persistent messages already wait for {router}")
        return None

    def _refused_unless_sent(self, refusal: MeshrouteError, duplicate_id: str,
                             dest: str) -> Deferred:
        """
        A send that would be refused may be the retry of one accepted
        before, whose answer a lost connection swallowed: its answer is
        then the first message's id, whatever the mesh's state now.
        """
        d = self._store.duplicate_of(duplicate_id)

        def answer(original: str | None):
            if original is None:
                return Failure(refusal)
            self._emit_duplicate_send(original, dest, duplicate_id)
            return original

        d.addCallback(answer)
        return d

    def _accepted_once(self, result, message: Message, duplicate_id: str):
        if isinstance(result, str):
            if message.dest_router != self.name:
                self._accepting[message.dest_router] -= 1
            self._emit_duplicate_send(result, _address(message), duplicate_id)
            return result
        return self._accepted(result, message)

    def _accepted_transient_once(self, original: str | None, message: Message,
                                 duplicate_id: str):
        if original is not None:
            self._emit_duplicate_send(original, _address(message), duplicate_id)
            return original
        self._emit_accepted(message)
        self._route_transient(message)
        return message.msg_id

    def _emit_duplicate_send(self, original: str, dest: str, duplicate_id: str) -> None:
        self._events.emit(events.MESSAGE_DUPLICATE, msg_id=original, origin=self.name,
                          reason="duplicate-id", duplicate_id=duplicate_id, dest=dest)

    def _accepted(self, result, message: Message):
        if message.dest_router != self.name:
            self._accepting[message.dest_router] -= 1
        if isinstance(result, Failure):
            return result
        self._emit_accepted(message)
        if message.dest_router == self.name:
            self._emit_enqueued(message)
            self.queues.notify(message.dest_queue)
        else:
            self.pump_towards(message.dest_router)
        return message.msg_id

    # -- links --------------------------------------------------------------

    def recovery(self, peer: str) -> Recovery:
        """
        For the recovery stage: the last sequence durably received from
        C{peer}, our store id, and the store of C{peer}'s it belongs to.
        """
        store = self._store
        return Recovery(store.last_received(peer), store.store_id, store.peer_store_id(peer))

    def link_up(self, peer: str, send, fail, emit, version: int) -> PeerChannel:
        """
        A link to C{peer} reached delivery; C{send(frame)} writes to it,
        C{fail(detail)} closes it because the store failed, and
        C{emit(event, **fields)} writes a link event; C{version} is the
        link protocol version it speaks.

        @return: the channel the link feeds its delivery-stage frames to.
        """
        pending = self._reroutes.pop(peer, None)
        if pending is not None and pending.active():
            pending.cancel()
        channel = PeerChannel(peer, version, send, fail, emit, self, self._store, self._clock)
        self._channels[peer] = channel
        for advertisement in self.routes.link_up(peer):
            self._flood.news(advertisement)
        channel.send(_routes_frame(self.routes.advertisements(), version))
        self._flood.sent_everything(peer)
        self._serving = None
        return channel

    def link_down(self, peer: str, channel: PeerChannel) -> None:
        """
        The delivery-stage link to C{peer} is gone.
        """
        if self._channels.get(peer) is not channel:
            return
        del self._channels[peer]
        for advertisement in self.routes.link_down(peer):
            self._flood.news(advertisement)
        self._serving = None
        self._reroutes[peer] = self._clock.callLater(self._reroute_delay, self._reroute, peer)

    def start(self) -> None:
        """
        The store is open: reroute what a previous run left in outboxes
        (L{reroute_orphans}) and start the expiry sweep.
        """
        self.reroute_orphans()
        self.expiry_sweep.start()

    def reroute_orphans(self) -> None:
        """
        At start: outboxes left by a previous run for peers that do not
        come back within reroute-delay go back to the backlog.
        """
        for peer in self._store.outbox_peers():
            if peer not in self._reroutes:
                self._reroutes[peer] = self._clock.callLater(
                    self._reroute_delay, self._reroute, peer)

    def stop(self) -> None:
        """
        The router is stopping: no more reroutes (outboxes wait in the
        store for the next start).
        """
        for call in self._reroutes.values():
            if call.active():
                call.cancel()
        self._reroutes.clear()
        self._flood.stop()
        self.expiry_sweep.stop()

    def _reroute(self, peer: str) -> None:
        del self._reroutes[peer]
        if peer in self._channels:
            return
        d = self._store.return_outbox(peer)

        def returned(count: int) -> None:
            if count:
                log.info("{count} unacknowledged messages for {peer} returned to the "
                         "backlog", count=count, peer=peer)
                self._pump_all()

        d.addCallback(returned)
        d.addErrback(lambda f: log.failure("returning the outbox of {peer}", f, peer=peer))

    def routes_received(self, peer: str, frame: Routes) -> None:
        """
        Advertisements arrived from C{peer}: what is news is taken now
        (every question about routes sees it) and flooded, and the routes
        acted on, once at the end of the turn (L{TurnFlood}).
        """
        for origin, seq, neighbors, *epoch in frame.advertisements:
            advertisement = Advertisement(origin, seq, tuple(neighbors), *epoch)
            news = self.routes.received(advertisement)
            if not news:
                self._flood.heard_again(advertisement, peer)
                continue
            if advertisement.epoch and origin != self.name:
                self._epoch_heard(origin, advertisement.epoch)
            for fresh in news:
                # Our own fresh one (above a stale one about us) goes to
                # the sender too: it holds the stale one.
                self._flood.news(fresh, peer if fresh is advertisement else None)
            self._serving = None

    def _hand_over_routers_heard(self) -> None:
        heard = self.routes.newly_heard()
        if heard:
            self._routers_heard(heard)

    def _turn_ended(self, pending: dict) -> None:
        """
        The end of a turn in which routes changed: flood its news, one
        frame per neighbour with what it does not hold, save the names
        first heard, then move what the new routes let move.
        """
        for peer, channel in list(self._channels.items()):
            news = [advertisement for advertisement, holders in pending.values()
                    if peer not in holders]
            if news:
                channel.send(_routes_frame(news, channel.version))
        self._hand_over_routers_heard()
        self._routes_changed()

    def _routes_changed(self) -> None:
        """
        Move what the new routes let move: the non-persistent messages
        that wait, and the backlog.  With nothing waiting, routes are not
        computed: the table computes them on the next question (a message
        to forward), so a router that forwards nothing does no route
        computation while the mesh changes.
        """
        for router in [router for router, waiting in self._transient.items() if waiting]:
            self._release_transient(router)
        if any(self._store.backlog_depths().values()):
            self._pump_all()

    def serving(self, peer: str) -> frozenset:
        """
        The destination routers whose next hop is C{peer}.
        """
        if self._serving is None:
            serving = defaultdict(set)
            for router, (next_hop, _hops) in self.routes.routes().items():
                serving[next_hop].add(router)
            self._serving = {peer: frozenset(routers) for peer, routers in serving.items()}
        return self._serving.get(peer, frozenset())

    def assignable(self, peer: str) -> frozenset:
        """
        The destination routers whose backlog C{peer} may take now: those
        it is the next hop of, except any with messages still in another
        peer's outbox.

        Those messages are older than everything in the backlog for that
        destination (a producer's messages enter the backlog in order).
        Until they are acknowledged (their link recovered) or returned to
        the backlog (C{reroute-delay} passed), which puts them back in
        front of the newer ones, the newer ones wait: otherwise they would
        overtake them on the new route.
        """
        serving = self.serving(peer)
        if not serving:
            return serving
        held = {dest for other, outbox in self._store.outbox_depths().items()
                if other != peer for dest in outbox}
        return serving - held if held else serving

    def outbox_resolved(self, count: int, peer: str) -> int:
        """
        C{count} messages left C{peer}'s outbox (acknowledged, or
        dead-lettered): destinations they held back may move on other
        links.
        """
        if count:
            for other, channel in list(self._channels.items()):
                if other != peer:
                    channel.pump()
        return count

    def acknowledge_due(self) -> None:
        """
        Every link sends now the acknowledgement it would send at the end
        of this reactor turn: a transfer about to be sent may carry a
        message one of them acknowledges.
        """
        for channel in self._channels.values():
            channel.send_ack()

    def _next_channel(self, router: str) -> PeerChannel | None:
        hop = self.routes.next_hop(router)
        return self._channels.get(hop) if hop is not None else None

    def accepting(self, router: str) -> int:
        """
        Persistent messages for C{router} submitted to the store and not
        yet accepted (they join its backlog when they are).
        """
        return self._accepting.get(router, 0)

    def transient_depths(self) -> dict[str, int]:
        """
        C{{router: messages}}: the non-persistent messages waiting in
        memory for each destination router (no route, or its link paused).
        """
        return {router: len(waiting) for router, waiting in self._transient.items() if waiting}

    def _pump_ahead(self, routers) -> None:
        """
        Persistent messages for C{routers} were just submitted to the
        store, not yet accepted: let their links take them from the backlog
        now, so that the store's group commit writes the accept and the
        hand-over in one transaction (the assign is submitted after the
        accept and sees it; if the writer commits them apart, the assign
        finds less, and the accept pumps again when it is durable).  The
        pump that follows an assign which took messages counts them too
        (L{ChannelCore.send_from<meshroute.router.peer_channel.ChannelCore.send_from>});
        one that follows an assign which took none counts the backlog
        alone, so a store that answers the assign before the accept does
        not make the link pump in a loop.
        """
        for router in routers:
            if router != self.name:
                channel = self._next_channel(router)
                if channel is not None:
                    channel.pump(ahead=True)

    def pump_towards(self, router: str) -> None:
        """
        The backlog for C{router} grew: its next hop's link may take it.
        """
        channel = self._next_channel(router)
        if channel is not None:
            channel.pump()

    def _pump_all(self) -> None:
        for channel in list(self._channels.values()):
            channel.pump()

    # -- arrivals -----------------------------------------------------------

    def arrived(self, peer: str, seq: int, previous: int, message: Message) -> Deferred:
        """
        A persistent message arrived from C{peer}: store it (dead-lettered
        here if it crossed too many links, enqueued if it is for us).

        @param previous: see L{IMessageStore.receive}.
        @return: Deferred firing when it is durable (or known duplicate),
            with the destination routers whose backlog it added to (empty
            when there is nothing to forward): the caller acknowledges it
            before it forwards them (see L{meshroute.router.acknowledgements}).
        """
        stored, local, aside = self._placed(message)
        d = self._store.receive(peer, seq, stored, local or bool(aside), previous)
        d.addCallback(self._stored, peer, message, stored, local, aside)
        if local:
            self.queues.notify(message.dest_queue)
        return d

    def arrived_many(self, peer: str, previous: int, arrivals: list) -> Deferred:
        """
        L{arrived} for each of C{arrivals} (C{(seq, message)} in link
        order, C{previous} the highest sequence known received before the
        first), in one store call.

        @return: Deferred firing when all are durable (or known
            duplicates) with the destination routers whose backlog they
            added to.
        """
        placed = [self._placed(message) for _seq, message in arrivals]
        d = self._store.receive_many(
            peer, previous, [(seq, stored, local or bool(aside))
                             for (seq, _), (stored, local, aside) in zip(arrivals, placed)])
        d.addCallback(self._stored_many, peer, arrivals, placed)
        for queue in {message.dest_queue for message, local, _ in placed if local}:
            self.queues.notify(queue)
        return d

    def _stored_many(self, results: list, peer: str, arrivals: list, placed: list) -> set:
        onward = set()
        for result, (_seq, message), (stored, local, aside) in zip(results, arrivals, placed):
            onward.update(self._stored(result, peer, message, stored, local, aside))
        return onward

    def _placed(self, message: Message) -> tuple[Message, bool, str]:
        """
        Where a message that arrived over a link goes: C{(what is stored,
        for a local queue, why it is set aside here)}: C{EXPIRED_QUEUE}
        when its time to live ran out (wherever it was going), or
        C{"max-hops"} (dead-lettered) when it crossed too many links on
        its way elsewhere; else empty.
        """
        if message.headers and message.expired(now_ms(self._clock)):
            return set_aside(message, self.name), False, EXPIRED_QUEUE
        local = message.dest_router == self.name
        dead = not local and message.hops >= self._max_hops
        stored = message
        if dead:
            stored = Message(
                msg_id=message.msg_id, origin=message.origin, dest_router=self.name,
                dest_queue=DEAD_LETTER_QUEUE, body=message.body,
                headers={**message.headers, "x-dead-letter-reason": "max-hops",
                         "x-original-address": f"{message.dest_queue}@{message.dest_router}"},
                hops=message.hops, accepted_at=message.accepted_at,
            )
        return stored, local, "max-hops" if dead else ""

    def _stored(self, result: str, peer: str, message: Message, stored: Message,
                local: bool, aside: str) -> tuple:
        if result == "duplicate-id":
            self._events.emit(events.MESSAGE_DUPLICATE, msg_id=message.msg_id, peer=peer,
                              origin=message.origin)
        elif result == "recalled":
            log.info("message {msg_id} came back from {peer} while our copy awaited its "
                     "acknowledgement: the returned copy is kept", msg_id=message.msg_id,
                     peer=peer)
            # Ours went back to the backlog, with what followed it in its
            # outbox (possibly for other destinations).
            return tuple(self._store.backlog_depths())
        elif result == "stored":
            if aside == EXPIRED_QUEUE:
                self.moved_to_expired((message,), IN_TRANSIT)
            elif aside:
                self.dead_lettered(message, aside)
            elif local:
                # Its queue was notified when it was submitted (arrived).
                self._emit_enqueued(message)
            else:
                return (message.dest_router,)
        return ()

    def arrived_transient(self, message: Message) -> None:
        self.arrived_transient_many((message,))

    def arrived_transient_many(self, messages) -> None:
        """
        Non-persistent messages arrived from a peer, in order: routed on
        (L{_route_transient_many}), those for a system queue to its
        handler.
        """
        routed = []
        for message in messages:
            if message.dest_queue in SYSTEM_QUEUES:
                self._route_system(message)
            else:
                routed.append(message)
        self._route_transient_many(routed)

    # -- system messages ------------------------------------------------------

    def serve_system(self, queue: str, handler: Callable[[Message], None]) -> None:
        """
        Hand C{handler} every message that arrives for C{queue}, one of
        this router's system queues (L{meshroute.messages.SYSTEM_QUEUES}).
        """
        self._system[queue] = handler

    def send_system(self, message: Message) -> bool:
        """
        Send a router's own non-persistent message to a system queue of
        another router (or of this one), on the next hop's link now.  It
        is no message of the mesh's traffic: no event records it, and it
        never waits: with no live route it is not sent.

        @return: whether it was sent (or, for this router, handed over).
        """
        if message.dest_router == self.name:
            handler = self._system.get(message.dest_queue)
            if handler is not None:
                handler(message)
            return True
        if message.hops >= self._max_hops:
            return False
        channel = self._next_channel(message.dest_router)
        if channel is None:
            return False
        channel.send_transient(message)
        return True

    def _route_system(self, message: Message) -> None:
        if not self.send_system(message):
            log.info("a message for {queue}@{router} from {origin} has no route on; dropped",
                     queue=message.dest_queue, router=message.dest_router,
                     origin=message.origin)

    # -- non-persistent messages ----------------------------------------------

    def _route_transient(self, message: Message) -> None:
        self._route_transient_many((message,))

    def _route_transient_many(self, messages) -> None:
        """
        Route non-persistent messages, in order: each expired one set
        aside, each for this router enqueued, each past the hop limit
        dropped, each other one handed to its next hop's link, or, while
        that link is paused or others wait for the same router, kept
        waiting (the oldest dropped past C{max-transient-backlog}).  Their
        records are written with one call of the event log per event,
        and the messages of one local queue enqueued in one call.
        """
        name = self.name
        max_hops = self._max_hops
        waiting_for = self._transient
        now = None
        local: dict[str, list[Message]] = {}
        forwarded: list[tuple] = []
        dropped: list[tuple] = []
        for message in messages:
            if message.headers:
                if now is None:
                    now = now_ms(self._clock)
                if message.expired(now):
                    self._transient_expired(message)
                    continue
            router = message.dest_router
            if router == name:
                queued = local.get(message.dest_queue)
                if queued is None:
                    local[message.dest_queue] = [message]
                else:
                    queued.append(message)
                continue
            if message.hops >= max_hops:
                dropped.append((message.msg_id, "max-hops", message.origin))
                continue
            channel = self._next_channel(router)
            if channel is not None and not channel.paused and router not in waiting_for:
                forwarded.append(_forwarded(channel.peer, message))
                channel.send_transient(message)
                continue
            waiting = waiting_for[router]
            if len(waiting) >= self._max_transient_backlog:
                oldest = waiting.popleft()
                dropped.append((oldest.msg_id, "max-backlog", oldest.origin))
            waiting.append(message)
        if forwarded:
            self._events.emit_many(events.MESSAGE_FORWARDED, _FORWARDED_FIELDS, forwarded)
        if dropped:
            self._events.emit_many(events.MESSAGE_DROPPED, _DROPPED_FIELDS, dropped)
        for queue, queued in local.items():
            self._emit_enqueued_many(queue, queued)
            self.queues.put_transient_many(queue, queued)

    def _release_transient(self, router: str) -> None:
        """
        A route to C{router} may have appeared, or its link resumed: hand
        its waiting non-persistent messages to the link, a batch per
        reactor turn, until the link pauses (new ones queue behind them, so
        order is kept).
        """
        channel = self._next_channel(router)
        waiting = self._transient.get(router)
        if channel is None or not waiting:
            return
        now = now_ms(self._clock)
        sent: list[Message] = []
        for _ in range(min(TRANSIENT_BATCH, len(waiting))):
            if channel.paused:
                # The rest waits for link_resumed.
                break
            message = waiting.popleft()
            if message.headers and message.expired(now):
                self._transient_expired(message, IN_BACKLOG)
            else:
                sent.append(message)
                channel.send_transient(message)
        if sent:
            self.emit_forwarded_many(channel.peer, sent)
        if waiting and channel.paused:
            return
        if waiting:
            self._clock.callLater(0, self._release_transient, router)
        else:
            del self._transient[router]

    def link_resumed(self, peer: str) -> None:
        """
        The link to C{peer} can take messages again.
        """
        for router in list(self._transient):
            if self.routes.next_hop(router) == peer:
                self._release_transient(router)

    # -- events -------------------------------------------------------------

    def _emit_accepted(self, message: Message) -> None:
        self._emit_accepted_many((message,))

    def _emit_accepted_many(self, messages) -> None:
        self._events.emit_many(
            events.MESSAGE_ACCEPTED, _ACCEPTED_FIELDS,
            [(m.msg_id, m.origin, _address(m), len(m.body), m.persistent) for m in messages])

    def expired(self, message: Message, where: str) -> None:
        """
        C{message} (as it was addressed) expired C{where} and is now in
        this router's C{$expired}: C{message.expired}, and the notice its
        sender asked for, if it did: handed to the sender's session here,
        or sent to its origin router as a non-persistent system message
        (best effort: lost with a link or a router, as any non-persistent
        message may be).
        """
        emit_expired(self._events, message, where)
        session = message.headers.get(NOTIFY_EXPIRY_HEADER)
        if not session:
            return
        address = _address(message)
        if message.origin == self.name:
            self._tell_session(session, message.msg_id, address, self.name)
            return
        notice = Message(
            msg_id=self._ids.next(), origin=self.name, dest_router=message.origin,
            dest_queue=EXPIRY_NOTICES, body=b"", persistent=False,
            headers={"session": session, "msg-id": message.msg_id, "address": address,
                     "router": self.name},
            accepted_at=self._clock.seconds(),
        )
        if not self.send_system(notice):
            log.info("message {msg_id} expired; no route to its origin {origin} now, so its "
                     "sender is not told", msg_id=message.msg_id, origin=message.origin)

    def moved_to_expired(self, messages, where: str) -> None:
        """
        C{messages} expired C{where} and the store moved them to this
        router's C{$expired}: L{expired} for each, then its consumers are
        told.
        """
        for message in messages:
            self.expired(message, where)
        self.queues.notify(EXPIRED_QUEUE)

    def _notice_arrived(self, notice: Message) -> None:
        headers = notice.headers
        self._tell_session(headers["session"], headers["msg-id"], headers["address"],
                           headers["router"])

    def _tell_session(self, session: str, msg_id: str, address: str, router: str) -> None:
        """
        Hand an expiry notice to the session C{session} of this router,
        through the first of L{expiry_notices} that knows it.
        """
        for tell in self.expiry_notices:
            if tell(session, msg_id, address, router):
                return
        log.info("message {msg_id} expired at {router}; its sender's session {session} is "
                 "gone, so it is not told", msg_id=msg_id, router=router, session=session)

    def _swept(self, message: Message) -> None:
        self.expired(message, IN_QUEUE if message.dest_router == self.name else IN_BACKLOG)

    def _transient_expired(self, message: Message, where: str = IN_TRANSIT) -> None:
        """
        A non-persistent message expired before it was forwarded: it waits
        in this router's C{$expired} (in memory, as any non-persistent one).
        """
        self.queues.put_transient(EXPIRED_QUEUE, set_aside(message, self.name))
        self.expired(message, where)

    def dead_lettered(self, message: Message, reason: str) -> None:
        """
        C{message} is now in this router's dead-letter queue, for C{reason}.
        """
        self._events.emit(events.MESSAGE_DEAD_LETTERED, msg_id=message.msg_id,
                          origin=message.origin, hops=message.hops, reason=reason,
                          dest=_address(message))
        self.queues.rates.entered(DEAD_LETTER_QUEUE)
        self.queues.notify(DEAD_LETTER_QUEUE)

    def _emit_enqueued(self, message: Message) -> None:
        self._emit_enqueued_many(message.dest_queue, (message,))

    def _emit_enqueued_many(self, queue: str, messages) -> None:
        """
        C{message.enqueued} for C{messages}, all enqueued in C{queue}.
        """
        self.queues.rates.entered(queue, len(messages))
        self._events.emit_many(
            events.MESSAGE_ENQUEUED, _ENQUEUED_FIELDS,
            [(m.msg_id, m.origin, queue, m.hops, m.accepted_at, m.persistent)
             for m in messages])

    def emit_forwarded_many(self, peer: str, messages) -> None:
        """
        C{message.forwarded} for C{messages}, sent on to C{peer}.
        """
        self._events.emit_many(
            events.MESSAGE_FORWARDED, _FORWARDED_FIELDS,
            [_forwarded(peer, m) for m in messages])

    def describe_routes(self) -> dict:
        """
        C{GET /api/v1/routes}.
        """
        return {router: {"next_hop": hop, "hops": hops}
                for router, (hop, hops) in sorted(self.routes.routes().items())}

