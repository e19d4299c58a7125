"""
The delivery stage of one routing link, both directions, as the message
engine sees it: a L{PeerChannel}.

Sending: up to L{WINDOW} transfers in flight, taken from the store's
backlog for the destinations this peer is the next hop of; on a
version-4 link what one backlog read hands it goes in L{TransferBatch}
frames (a new one at each gap in the sequence, or when one is full).
Receiving: each transfer (each batch in one store call) is stored, then
acknowledged cumulatively once per reactor turn
(L{meshroute.router.acknowledgements}); while the disk is low it is held
instead, neither stored nor acknowledged, so that the peer stops at its
window (L{PeerChannel.release_held}; docs/routing.md, "A router whose
disk is low").

Early sends: a fresh client send may leave before its accept is
committed at this router, its origin (L{PeerChannel.send_early}, while
C{ready}), numbered from a durably reserved block
(L{meshroute.router.early_numbers}), and accepted into the outbox after a
hold that the peer's acknowledgement may make moot
(L{meshroute.router.early_accepts}); docs/routing.md, "Forwarding while
the origin's commit is in flight".

Any store failure closes the link (reason C{store-failed}): a transfer
that could not be stored is then never covered by a later cumulative
acknowledgement (the store refuses every transfer after it, see
L{IMessageStore.receive}), and an outbox that could not be replayed is
replayed by the next recovery stage, before anything new is sent.

Sending is an Automat machine, each state named for what it waits for:

    state              waits for
    -----------------  ------------------------------------------------------
    awaiting_recovery  the peer's Recovery: what it holds of our outbox
    replaying          the store: the outbox the peer lacks, sent again
                       before anything new
    assigning          the store: backlog assigned to this link (and the move
                       of a message that may not go to $dead-letter/$expired)
    ready              a pump: backlog for a destination this peer may take,
                       room in the window, a transport that takes more
    closing            the link's close, after a store failure
    closed             nothing: the link is gone

The transitions, top to bottom (the code below follows the same order):

    awaiting_recovery ─ recovered ─────▶ replaying  (asks the store for the outbox)
    ready             ─ pump ──────────▶ ready      (looks at the window, the backlog)
    ready             ─ found_backlog ─▶ assigning  (asks the store for it)
    replaying, assigning
                      ─ handed ────────▶ (same)     (sends them, see below)
                      ─ all_sent ──────▶ ready      (looks again: more may wait)
    replaying, assigning, ready
                      ─ acknowledged ──▶ (same)     (the outbox forgets them; ready looks)
                      ─ resume ────────▶ (same)     (waiting non-persistent messages
                                                     go; ready looks)
                      ─ store_failed ──▶ closing    (sends nothing more, closes the link)
    all but closed    ─ closed ────────▶ closed     (the outbox keeps what is in flight)

C{handed} sends what the store handed, in order, up to a message that may
not go (expired, or too large for any link): that one is set aside in the
store first, and what follows is handed again once that is durable, so
that no acknowledgement of a later one can delete it from the outbox
first.  Elsewhere inputs are moot: a pump before the replay (a message
taken from the backlog would get a higher sequence than the replayed
ones, and a receiver that got it first would discard them as already
received), or while an assign is in flight (the channel pumps again once
it is sent); once closing, whatever the store answers or the peer sends
(a store failure is logged).

Acknowledging what arrives is not part of this machine: see
L{meshroute.router.acknowledgements}, for why.  Nor is the transport's flow,
which is a plain fact, C{paused}, the transport's last word, read by
C{ready} before it takes from the backlog: the transport pauses in the
middle of a write, often inside a transition (a batch sent, waiting
non-persistent messages released on C{resume}), and Automat runs an
input that arrives while its machine is in a transition only once that
transition ends, while the engine, handing the link non-persistent
messages one by one, must see the pause before its next one.  (C{resume}
is an input: what it does depends on the state.)  L{ChannelCore.ready}
mirrors the state C{ready}, as the link's C{delivering} mirrors its
delivery stage, to spare the machine the moot pump that comes with every
accepted message.
"""

from collections import deque
from dataclasses import dataclass, field
from typing import Callable, Protocol

from automat import TypeMachineBuilder
from twisted.internet.defer import Deferred, succeed
from twisted.internet.interfaces import IDelayedCall, IReactorTime
from twisted.logger import Logger
from twisted.python.failure import Failure
from zope.interface import implementer

from meshroute import events
from meshroute.router.acknowledgements import Acknowledging, Stopped
from meshroute.router.early_accepts import EarlyAccepts, EarlyPending
from meshroute.router.early_numbers import EarlyNumbers
from meshroute.router.transfer_frames import (
    TransferFrames,
    fits_a_link,
    message_from_frame,
    message_from_item,
    on_the_wire,
    wire_size,
)
from meshroute.expiry import IN_BACKLOG, now_ms
from meshroute.interfaces import IChannelEngine, ILinkChannel, IMessageStore
from meshroute.messages import Message
from meshroute.wire.frames import (
    BATCH_MAX_BYTES,
    BATCH_MAX_MESSAGES,
    BATCH_VERSION,
    Ack,
    FastTransfer,
    FastTransferBatch,
    Interest,
    Recovery,
    Routes,
    Transfer,
    TransferBatch,
)

log = Logger()

#: Unacknowledged transfers allowed per link direction.
WINDOW = 1024
#: Bytes of message bodies allowed in those transfers: with large messages
#: the window is full by size long before it is by count.
WINDOW_BYTES = 16 * 1024 * 1024
#: How many backlog messages one store call hands a link.
ASSIGN_BATCH = 256
#: Durable transfers a receiver acknowledges at the end of the turn they
#: became durable in; fewer, with none to forward, wait up to
#: L{ACK_DELAY_S} for more (one Ack then covers them all).
ACK_EVERY = WINDOW // 16
#: The longest a durable transfer waits for its acknowledgement: at a low
#: rate, one Ack for a few transfers instead of one frame (and one wake-up
#: of the sender) per message; far below anything a window notices, and
#: well within the sender's C{early-accept-hold}, whose held accepts the Ack
#: makes moot (L{meshroute.router.early_accepts}): a producer confirmed by
#: it waits this long more than its own origin's commit would take.
ACK_DELAY_S = 0.002
#: Dead-letter reason of a message whose Transfer no link would take.
TOO_LARGE = "too-large"


class ChannelInputs(Protocol):
    """
    Everything that can happen to the sending side of a channel.
    """

    def recovered(self, frame: Recovery) -> None:
        "The peer's recovery point arrived (once, on entering delivery)."

    def handed(self, assigned: list, start: int = 0) -> None:
        """
        The store handed this link C{assigned}, C{(seq, message)} in
        sequence order (its outbox replayed, or backlog assigned); those
        from C{start} on are still to send.
        """

    def all_sent(self, took: bool) -> None:
        "What the store handed is sent or set aside; C{took}: its last part held any."

    def pump(self, ahead: bool = False) -> None:
        "The backlog, the window or the routes changed; C{ahead}: see L{PeerChannel.pump}."

    def found_backlog(self, destinations: frozenset, limit: int, max_bytes: int) -> None:
        "A pump found room in the window and backlog this peer may take."

    def send_early(self, messages: list) -> Deferred:
        "Fresh client sends, within L{ChannelCore.early_room}, to send before their commit."

    def acknowledged(self, frame: Ack, spared: frozenset = frozenset()) -> None:
        """
        The peer durably holds every transfer up to C{frame.seq}; those in
        C{spared} were never written here (their accepts made moot).
        """

    def resume(self) -> None:
        "The link's transport has drained."

    def store_failed(self, failure: Failure, doing: str) -> None:
        "A store call of this link failed, while C{doing} something."

    def closed(self) -> None:
        "The link is gone."


@dataclass
class ChannelCore:
    """
    The data of one channel and the I/O its sending behaviours perform.

    @ivar send: writes a frame on the link.
    @ivar flush: hands what was written on the link to the kernel now
        (L{meshroute.wire.transport.flush_now}), once a batch of
        transfers is written: the peer waits for them.
    @ivar fail_link: closes the link because the store failed (reason
        C{store-failed}), with a detail.
    @ivar emit: writes a link event (C{emit(event, **fields)}).
    @ivar channel: the L{PeerChannel} this is the core of (what the
        engine knows it by).
    @ivar acks: the receiving side's acknowledgements (L{Acknowledging},
        then L{Stopped} once the channel stops).
    @ivar in_flight: C{{seq: message}}, sent and not yet acknowledged.
    @ivar previous: the highest sequence known to be received from the
        peer before the next transfer: the recovery point we announced,
        then each transfer's seq (see L{IMessageStore.receive}).
    @ivar paused: the link's transport is full (see the module docstring).
    @ivar ready: the machine is in C{ready} (set on entering it, cleared on
        leaving it): only then does a pump from outside reach it.  One
        comes with every message accepted, mostly while an assign is in
        flight, and Automat finds a transition by a scan of them all.
    """

    peer: str
    version: int
    send: Callable[[object], None]
    fail_link: Callable[[str], None]
    emit: Callable[..., None]
    engine: IChannelEngine
    store: IMessageStore
    clock: IReactorTime
    channel: "PeerChannel"
    acks: Acknowledging | Stopped
    flush: Callable[[], None]
    in_flight: dict[int, Message] = field(default_factory=dict)
    in_flight_bytes: int = 0
    previous: int = 0
    paused: bool = False
    ready: bool = False
    # Early sends' numbers and accepts (docs/routing.md, "Forwarding
    # while the origin's commit is in flight"), if this link makes them.
    early: EarlyNumbers | None = None
    early_accepts: EarlyAccepts | None = None
    # Non-persistent messages for the FastTransferBatch at the end of this
    # reactor turn (version 4), and their bytes (_wire_size).
    _fast: list[tuple] = field(default_factory=list, init=False)
    _fast_bytes: int = field(default=0, init=False)
    _fast_call: IDelayedCall | None = field(default=None, init=False)

    # -- recovery -------------------------------------------------------------

    def recover(self, inputs: ChannelInputs, frame: Recovery) -> None:
        """
        Receiving: if the peer's store is not the one we last knew (it
        lost its data dir and numbers from 1 again), what we received from
        the old one is forgotten, so its new transfers are not taken for
        old ones.  Sending: the peer holds everything up to its
        C{last_received}, if that is about our current store (else
        nothing): forget that, then hand the rest of our outbox to
        C{handed}.
        """
        store = self.store
        self.previous = store.last_received(self.peer)
        known = store.peer_store_id(self.peer)
        d = succeed(None)
        if frame.store_id and frame.store_id != known:
            if known:
                self._new_incarnation(known, frame.store_id)
            d = store.record_peer_store(self.peer, frame.store_id, bool(known))
        held = frame.last_received if frame.peer_store_id == store.store_id else 0
        d.addCallback(lambda _: self.acknowledge(held))
        d.addCallback(lambda _: store.outbox(self.peer, held))
        d.addCallback(inputs.handed)
        d.addErrback(inputs.store_failed, "replaying the outbox")

    def _new_incarnation(self, previous_store: str, store_id: str) -> None:
        log.warn("link to {peer}: its store changed from {previous} to {current} (restarted "
                 "with an empty data dir?); forgetting that its previous store's transfers "
                 "up to {last} were received", peer=self.peer, previous=previous_store,
                 current=store_id, last=self.previous)
        self.emit(events.LINK_INCARNATION, previous_store_id=previous_store,
                  store_id=store_id, discarded_last_received=self.previous)
        self.previous = 0

    # -- sending ----------------------------------------------------------------

    def look_for_backlog(self, inputs: ChannelInputs, ahead: bool) -> None:
        """
        Take more from the backlog if the transport takes more, the window
        has room and there are messages for destinations this peer may
        take (with C{ahead}, or being accepted for them).
        """
        if self.paused:
            return
        room = WINDOW - len(self.in_flight)
        byte_room = WINDOW_BYTES - self.in_flight_bytes
        if room <= 0 or byte_room <= 0:
            return
        serving = self.engine.assignable(self.peer)
        depths = self.store.backlog_depths()
        accepting = self.engine.accepting if ahead else lambda router: 0
        if not any(depths.get(router) or accepting(router) for router in serving):
            return
        inputs.found_backlog(serving, min(room, ASSIGN_BATCH), byte_room)

    def assign(self, inputs: ChannelInputs, destinations: frozenset, limit: int,
               max_bytes: int) -> None:
        self.ready = False
        d = self.store.assign(self.peer, destinations, limit, max_bytes)
        if self.early is not None:
            # After the assign: the next block is reserved above its numbers.
            self.early.assigned()
        d.addCallback(inputs.handed)
        d.addErrback(inputs.store_failed, "taking messages from the backlog")

    def send_from(self, inputs: ChannelInputs, assigned: list, start: int) -> None:
        """
        Send C{assigned[start:]}, then tell the machine (C{all_sent}): it
        pumps, as more may wait.  When some were sent, that pump also
        counts the messages being accepted (as
        L{meshroute.router.forwarding.Forwarding.pump_ahead} does): one accepted
        while this assign was in flight is then assigned in the
        transaction after its accept's, or in the same one if the writer
        has not taken the accept yet, instead of waiting for the accept to
        be durable and only then submitting its assign.

        A message whose Transfer no peer would take (it would be refused as
        a protocol error, and replayed on every reconnect) is
        dead-lettered here instead, with reason L{TOO_LARGE}; nothing after
        it is sent before that is durable, so no acknowledgement can
        delete it from the outbox first.
        """
        if start < len(assigned):
            self.engine.acknowledge_due()
        in_flight = self.in_flight
        frames = TransferFrames(self.send, self.version)
        now = now_ms(self.clock)
        for index in range(start, len(assigned)):
            seq, message = assigned[index]
            if message.headers and message.expired(now):
                self._write_out(frames, index > start)
                self._expire_from(inputs, assigned, index, now)
                return
            item = on_the_wire(message)
            size = wire_size(item)
            if size > BATCH_MAX_BYTES and not fits_a_link(size, Transfer(seq, *item)):
                self._write_out(frames, index > start)
                self._dead_letter_from(inputs, assigned, index)
                return
            frames.add(seq, item, size)
            in_flight[seq] = message
            self.in_flight_bytes += len(message.body)
        sent = start < len(assigned)
        self._write_out(frames, sent)
        inputs.all_sent(sent)

    def _write_out(self, frames: TransferFrames, sent: bool) -> None:
        """
        Write the transfers gathered, and hand them to the kernel now if
        there were any (L{flush}): the peer waits for them.
        """
        frames.flush()
        if sent:
            self.flush()

    def _dead_letter_from(self, inputs: ChannelInputs, assigned: list, index: int) -> None:
        """
        C{assigned[index]} is too large for any link: dead-lettered here,
        and what follows it handed again once that is durable.
        """
        message = assigned[index][1]
        log.warn("message {msg_id} is too large for any link; dead-lettered",
                 msg_id=message.msg_id)
        d = self.store.dead_letter(message, TOO_LARGE)
        d.addCallback(lambda _: self.engine.dead_lettered(message, TOO_LARGE))
        d.addCallback(lambda _: self.engine.outbox_resolved(1, self.peer))
        d.addCallback(lambda _: inputs.handed(assigned, index + 1))
        d.addErrback(inputs.store_failed, "dead-lettering a message too large for the link")

    def _expire_from(self, inputs: ChannelInputs, assigned: list, start: int,
                     now: int) -> None:
        """
        C{assigned[start]} and the expired messages right after it are not
        forwarded: they go to C{$expired} here (one store call), and what
        follows is handed again once that is durable, so that no
        acknowledgement of a later one deletes them from the outbox first
        (as for a message too large).
        """
        end = start + 1
        while end < len(assigned) and assigned[end][1].headers \
                and assigned[end][1].expired(now):
            end += 1
        d = self.store.expire([message for _, message in assigned[start:end]])

        def moved(messages: list) -> None:
            self.engine.moved_to_expired(messages, IN_BACKLOG)
            self.engine.outbox_resolved(end - start, self.peer)
            inputs.handed(assigned, end)

        d.addCallback(moved)
        d.addErrback(inputs.store_failed, "moving expired messages to $expired")

    def forget_acknowledged(self, inputs: ChannelInputs, frame: Ack,
                            spared: frozenset = frozenset()) -> None:
        """
        The peer durably holds every transfer up to C{frame.seq}: they are
        forwarded, and leave the outbox; C{spared}: those of them never
        written here (L{EarlyAccepts.made_moot}, already answered).
        """
        if self.early_accepts is not None and self.early_accepts.holds(frame):
            # It covers an early send whose accept is not durable yet: it
            # applies after that commit (EarlyAccepts).
            if spared:
                self.engine.outbox_resolved(len(spared), self.peer)
            return
        held = [seq for seq in self.in_flight if seq <= frame.seq]
        done = [self.in_flight.pop(seq) for seq in held]
        self.in_flight_bytes -= sum(len(message.body) for message in done)
        if done:
            self.engine.emit_forwarded_many(self.peer, done)
        if spared and spared.issuperset(held):
            # Nothing it covers was written here: no store call.
            self.engine.outbox_resolved(len(spared), self.peer)
            return
        d = self.acknowledge(frame.seq)
        d.addErrback(inputs.store_failed, "recording an acknowledgement")

    def acknowledge(self, seq: int) -> Deferred:
        """
        Forget our outbox up to C{seq}, which the peer holds; then the
        newer messages for the same destinations may move on other links.
        """
        d = self.store.acknowledge(self.peer, seq)
        d.addCallback(self.engine.outbox_resolved, self.peer)
        return d

    # -- early sends --------------------------------------------------------------

    def early_room(self) -> tuple[int, int]:
        """
        How many messages, and how many bytes of bodies, may be sent now
        before their accept is committed: as many as the window and the
        reserved numbers hold, when the machine is C{ready} and the
        transport takes more.
        """
        if self.early is None or not self.ready or self.paused:
            return 0, 0
        count = min(WINDOW - len(self.in_flight), self.early.available())
        return max(count, 0), WINDOW_BYTES - self.in_flight_bytes

    def send_early(self, messages: list) -> Deferred:
        """
        Send C{messages} (fresh client sends, within L{early_room}) now,
        numbered from the reserved block, and accept them into the outbox
        (L{EarlyAccepts.accept}).
        """
        assigned = self.early.take(messages)
        frames = TransferFrames(self.send, self.version)
        in_flight = self.in_flight
        for seq, message in assigned:
            item = on_the_wire(message)
            frames.add(seq, item, wire_size(item))
            in_flight[seq] = message
            self.in_flight_bytes += len(message.body)
        frames.flush()
        self.flush()
        return self.early_accepts.accept(assigned)

    # -- non-persistent messages ------------------------------------------------

    def send_transient(self, message: Message) -> None:
        "See L{PeerChannel.send_transient}."
        item = on_the_wire(message)
        if self.version < BATCH_VERSION:
            self.send(FastTransfer(*item))
            return
        size = wire_size(item)
        if self._fast and self._fast_bytes + size > BATCH_MAX_BYTES:
            self.send_fast()
        self._fast.append(item)
        self._fast_bytes += size
        if len(self._fast) == BATCH_MAX_MESSAGES or self._fast_bytes >= BATCH_MAX_BYTES:
            self.send_fast()
        elif self._fast_call is None:
            self._fast_call = self.clock.callLater(0, self.send_fast)

    def send_fast(self) -> None:
        """
        Send the non-persistent messages gathered: one L{FastTransferBatch},
        or a L{FastTransfer} for a single message.
        """
        if self._fast_call is not None:
            if self._fast_call.active():
                self._fast_call.cancel()
            self._fast_call = None
        items, self._fast, self._fast_bytes = self._fast, [], 0
        if len(items) > 1:
            self.send(FastTransferBatch(items))
        elif items:
            self.send(FastTransfer(*items[0]))
        else:
            return
        self.flush()

    # -- the end ----------------------------------------------------------------

    def stop(self) -> None:
        """
        Send nothing more: what this turn gathered goes as it would have
        (non-persistent messages may be lost with the link, never held
        back), and no acknowledgement follows.
        """
        self.ready = False
        self.send_fast()
        self.acks = self.acks.stop()

    def fail(self, failure: Failure, doing: str) -> None:
        """
        The store failed: close the link, having stopped sending on it (no
        acknowledgement, no new transfer), so the peer replays what we may
        lack and we replay what it may lack.
        """
        self.stop()
        log.failure("link to {peer}: {doing} failed; closing the link", failure,
                    peer=self.peer, doing=doing)
        self.fail_link(f"{doing} failed: {failure.getErrorMessage()}")

    def close(self) -> None:
        """
        The link is gone: what is in flight stays in the outbox, for the
        next recovery or the reroute.
        """
        self.stop()
        if self.early_accepts is not None:
            self.early_accepts.flush()
        self.in_flight.clear()
        self.in_flight_bytes = 0
        self.engine.link_down(self.peer, self.channel)


def _build_channel_machine():
    builder = TypeMachineBuilder(ChannelInputs, ChannelCore)
    awaiting_recovery = builder.state("awaiting_recovery")
    replaying = builder.state("replaying")
    assigning = builder.state("assigning")
    ready = builder.state("ready")
    closing = builder.state("closing")
    closed = builder.state("closed")

    @awaiting_recovery.upon(ChannelInputs.recovered).to(replaying)
    def recover(inputs: ChannelInputs, core: ChannelCore, frame: Recovery) -> None:
        core.recover(inputs, frame)

    @ready.upon(ChannelInputs.pump).loop()
    def look_for_backlog(inputs: ChannelInputs, core: ChannelCore, ahead: bool = False) -> None:
        core.look_for_backlog(inputs, ahead)

    # No pump while an assign is in flight (the channel pumps again once
    # it is sent), nor before the replay, nor once closing.
    for waiting in (assigning, replaying, awaiting_recovery, closing, closed):
        waiting.upon(ChannelInputs.pump).loop().returns(None)

    @ready.upon(ChannelInputs.found_backlog).to(assigning)
    def assign(inputs: ChannelInputs, core: ChannelCore, destinations: frozenset, limit: int,
               max_bytes: int) -> None:
        core.assign(inputs, destinations, limit, max_bytes)

    @ready.upon(ChannelInputs.send_early).loop()
    def send_early(inputs: ChannelInputs, core: ChannelCore, messages: list) -> Deferred:
        return core.send_early(messages)

    # A find queued behind another pump's, which assigns.
    for busy in (assigning, closing, closed):
        busy.upon(ChannelInputs.found_backlog).loop().returns(None)

    @replaying.upon(ChannelInputs.handed).loop()
    @assigning.upon(ChannelInputs.handed).loop()
    def send_handed(inputs: ChannelInputs, core: ChannelCore, assigned: list,
                    start: int = 0) -> None:
        core.send_from(inputs, assigned, start)

    @replaying.upon(ChannelInputs.all_sent).to(ready)
    @assigning.upon(ChannelInputs.all_sent).to(ready)
    def sent(inputs: ChannelInputs, core: ChannelCore, took: bool) -> None:
        core.ready = True
        core.look_for_backlog(inputs, ahead=took)

    @ready.upon(ChannelInputs.acknowledged).loop()
    def forget_acknowledged_and_look(inputs: ChannelInputs, core: ChannelCore,
                                     frame: Ack, spared: frozenset = frozenset()) -> None:
        core.forget_acknowledged(inputs, frame, spared)
        core.look_for_backlog(inputs, ahead=False)

    @replaying.upon(ChannelInputs.acknowledged).loop()
    @assigning.upon(ChannelInputs.acknowledged).loop()
    def forget_acknowledged(inputs: ChannelInputs, core: ChannelCore, frame: Ack,
                            spared: frozenset = frozenset()) -> None:
        core.forget_acknowledged(inputs, frame, spared)

    @ready.upon(ChannelInputs.resume).loop()
    def release_waiting_and_look(inputs: ChannelInputs, core: ChannelCore) -> None:
        core.engine.link_resumed(core.peer)
        core.look_for_backlog(inputs, ahead=False)

    @replaying.upon(ChannelInputs.resume).loop()
    @assigning.upon(ChannelInputs.resume).loop()
    def release_waiting(inputs: ChannelInputs, core: ChannelCore) -> None:
        core.engine.link_resumed(core.peer)

    for live in (replaying, assigning, ready):

        @live.upon(ChannelInputs.store_failed).to(closing)
        def fail(inputs: ChannelInputs, core: ChannelCore, failure: Failure,
                 doing: str) -> None:
            core.fail(failure, doing)

    for state in (replaying, assigning, ready, closing):

        @state.upon(ChannelInputs.closed).to(closed)
        def close(inputs: ChannelInputs, core: ChannelCore) -> None:
            core.close()

    # Once closing, what the store or the peer answers changes nothing.
    for ending in (closing, closed):
        for moot in (ChannelInputs.handed, ChannelInputs.all_sent,
                     ChannelInputs.acknowledged, ChannelInputs.resume):
            ending.upon(moot).loop().returns(None)

        @ending.upon(ChannelInputs.store_failed).loop()
        def failed_again(inputs: ChannelInputs, core: ChannelCore, failure: Failure,
                         doing: str) -> None:
            log.warn("link to {peer} (already closing): {doing} failed: {why}",
                     peer=core.peer, doing=doing, why=failure.getErrorMessage())

    return builder.build()


_CHANNEL_MACHINE = _build_channel_machine()


@implementer(ILinkChannel)
class PeerChannel:
    """
    The delivery stage of one link, both directions: what the link feeds
    the peer's frames to, and what the engine sends through.  Thin: each
    call is an input of the sending machine (the module docstring tells
    it), a call of the acknowledgements' state, or the store call or
    write it stands for.

    @ivar peer: the peer's router name.
    @ivar version: the link protocol version the peer speaks.
    @ivar send: writes a frame on the link (the engine's L{Routes} too).
    """

    def __init__(self, peer: str, version: int, send: Callable[[object], None],
                 fail: Callable[[str], None], emit: Callable[..., None],
                 engine: IChannelEngine, store: IMessageStore,
                 clock: IReactorTime, early: EarlyPending | None = None,
                 early_hold_s: float = 0.0, *, flush: Callable[[], None]) -> None:
        """
        @param fail: closes the link because the store failed (reason
            C{store-failed}), with a detail.
        @param emit: writes a link event (C{emit(event, **fields)}).
        @param early: given, this link sends fresh client sends before
            their accept is committed (L{send_early}), and counts them
            there until the store's outbox does; it then keeps a block of
            sequence numbers reserved.
        @param early_hold_s: how long an early send's accept waits for the
            peer's acknowledgement, which spares writing it
            (L{meshroute.router.early_accepts}).
        @param flush: hands what was written on the link to the kernel now
            (L{LinkCore.flush<meshroute.link.core.LinkCore.flush>}).
        """
        self.peer = peer
        self.version = version
        self.send = send
        self._engine = engine
        acks = Acknowledging(send, flush, clock, engine.pump_towards, ACK_EVERY, ACK_DELAY_S)
        self._core = ChannelCore(peer, version, send, fail, emit, engine, store, clock,
                                 channel=self, acks=acks, flush=flush)
        if early is not None:
            self._core.early = EarlyNumbers(peer, store, self.store_failed)
            self._core.early_accepts = EarlyAccepts(peer, store, clock, self.acknowledged,
                                                    self.store_failed, early, early_hold_s)
        self._sending = _CHANNEL_MACHINE(self._core)
        # Transfers that arrived while the disk was low (release_held).
        self._held: deque = deque()

    @property
    def in_flight(self) -> int:
        "Transfers sent and not yet acknowledged."
        return len(self._core.in_flight)

    @property
    def in_flight_bytes(self) -> int:
        "The bytes of their bodies (what L{WINDOW_BYTES} bounds)."
        return self._core.in_flight_bytes

    @property
    def held(self) -> int:
        "Messages that arrived while the disk was low, held unstored (L{release_held})."
        return sum(len(frame.messages) if type(frame) is TransferBatch else 1
                   for frame in self._held)

    @property
    def paused(self) -> bool:
        "The link's transport is full: it takes no more messages until it drains."
        return self._core.paused

    # -- sending ------------------------------------------------------------

    def recovered(self, frame: Recovery) -> None:
        "The peer's recovery point: replay what it lacks, then carry on from the backlog."
        self._sending.recovered(frame)

    def pump(self, ahead: bool = False) -> None:
        """
        Hand the peer more backlog messages, if it is C{ready} and there
        are any for destinations it serves (with C{ahead}, or being accepted
        for them: L{Forwarding.pump_ahead<meshroute.router.forwarding.Forwarding.pump_ahead>}).
        """
        if self._core.ready:
            self._sending.pump(ahead)

    def acknowledged(self, frame: Ack) -> None:
        """
        The peer durably holds every transfer up to C{frame.seq}.  The held
        accepts it makes moot are answered first, outside the sending
        machine (an answer may lead to another send at once), and before
        the machine reports them forwarded.
        """
        accepts = self._core.early_accepts
        if accepts is not None:
            spared = accepts.made_moot(frame)
            if spared:
                self._sending.acknowledged(frame, frozenset(spared))
                return
        self._sending.acknowledged(frame)

    def early_room(self) -> tuple[int, int]:
        """
        C{(messages, bytes)} this link may send now before their accept
        is committed (L{ChannelCore.early_room}): C{(0, 0)} unless it is
        C{ready}.
        """
        return self._core.early_room()

    def send_early(self, messages: list) -> Deferred:
        """
        Send fresh client sends C{messages} (within L{early_room}) now and
        accept them into this link's outbox, after a hold that the peer's
        acknowledgement may make moot (L{EarlyAccepts.accept}).

        @return: Deferred firing with None once they are durable here or
            at the peer (the producers may be answered), or failing with
            the store's error (the link then closes).
        """
        return self._sending.send_early(messages)

    def write_held(self) -> None:
        """
        Submit the accepts of early sends still held, now
        (L{EarlyAccepts.flush}).
        """
        if self._core.early_accepts is not None:
            self._core.early_accepts.flush()

    def store_failed(self, failure: Failure, doing: str) -> None:
        "A store call for this link failed while C{doing} something: the link closes."
        self._sending.store_failed(failure, doing)

    def pause(self) -> None:
        """
        The link's transport is full (the peer reads slower than we write):
        take no more messages, so they wait where they are bounded.
        """
        self._core.paused = True

    def resume(self) -> None:
        "The link's transport has drained: carry on."
        self._core.paused = False
        self._sending.resume()

    def send_transient(self, message: Message) -> None:
        """
        Send a non-persistent message: at version 4, in the
        L{FastTransferBatch} that goes at the end of this reactor turn, or
        as soon as it holds a batch's worth; before, in a L{FastTransfer}
        of its own.  Its C{message.forwarded} record is the caller's to
        write (L{TransientPath.route
        <meshroute.router.transient.TransientPath.route>}); a
        router's own system message has none (L{SystemMessages.send
        <meshroute.router.system_messages.SystemMessages.send>}).
        """
        self._core.send_transient(message)

    # -- receiving ------------------------------------------------------------

    def transferred(self, frame: Transfer) -> None:
        """
        A persistent message arrived: acknowledge it once it is durable;
        held while the disk is low (L{release_held}).
        """
        if self._held or self._engine.arrivals_held():
            self._held.append(frame)
            return
        self._store_transfer(frame)

    def _store_transfer(self, frame: Transfer) -> None:
        core = self._core
        previous = core.previous
        core.previous = max(previous, frame.seq)
        d = self._engine.arrived(self.peer, frame.seq, previous,
                                 message_from_frame(frame, persistent=True))
        d.addCallback(self._durable, frame.seq, 1)
        d.addErrback(self._sending.store_failed, "storing a message")

    def transferred_batch(self, frame: TransferBatch) -> None:
        """
        Persistent messages arrived: stored in one store call, acknowledged
        once durable, as L{transferred} does for one, and held as it is.
        """
        if self._held or self._engine.arrivals_held():
            self._held.append(frame)
            return
        self._store_batch(frame)

    def _store_batch(self, frame: TransferBatch) -> None:
        core = self._core
        previous = core.previous
        last = frame.last_seq
        core.previous = max(previous, last)
        seq = frame.first_seq
        arrivals = []
        for item in frame.messages:
            arrivals.append((seq, message_from_item(*item, True)))
            seq += 1
        d = self._engine.arrived_many(self.peer, previous, arrivals)
        d.addCallback(self._durable, last, len(arrivals))
        d.addErrback(self._sending.store_failed, "storing messages")

    def release_held(self) -> None:
        """
        Store what arrived while the disk was low, in the order it came,
        unless it is low again.  Held, a transfer is neither stored nor
        acknowledged: the peer sends no more than its window meanwhile,
        and a link that closes loses nothing (the peer sends them again
        after the recovery).
        """
        held = self._held
        while held and not self._engine.arrivals_held():
            frame = held.popleft()
            if type(frame) is TransferBatch:
                self._store_batch(frame)
            else:
                self._store_transfer(frame)

    def _durable(self, onward, seq: int, count: int) -> None:
        self._core.acks.durable(onward, seq, count)

    def send_ack(self) -> None:
        """
        Acknowledge now what is durable, if anything (L{IChannelEngine.acknowledge_due
        <meshroute.interfaces.IChannelEngine.acknowledge_due>}).
        """
        self._core.acks.send_due()

    def fast_transferred(self, frame: FastTransfer) -> None:
        self._engine.arrived_transient(message_from_frame(frame, persistent=False))

    def fast_transferred_batch(self, frame: FastTransferBatch) -> None:
        self._engine.arrived_transient_many([message_from_item(*item, False) for item in frame.messages])

    def routes(self, frame: Routes) -> None:
        self._engine.routes_received(self.peer, frame)

    def interest(self, frame: Interest) -> None:
        self._engine.interest_received(self.peer, frame)

    def closed(self) -> None:
        """
        The link is gone: stop sending; what is in flight stays in the
        outbox for the next recovery or the reroute.  What was held is
        forgotten: the peer sends it again.
        """
        self._held.clear()
        self._sending.closed()
