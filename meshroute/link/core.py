"""
One link's data, and the I/O its machine's behaviours perform
(L{meshroute.link.machine}): sending frames and counting them, the
events it emits, its timers, entering each stage, closing.

The stage timer (stage-valid-timeout) runs in every stage where we wait
for the peer: it starts again on each stage entered
(L{LinkCore.begin_stage}), and stops in delivery and replication, where
the keepalive (L{meshroute.link.keepalive}) watches the peer instead.
After a refusal only the reject timer runs (reject-disconnect-delay),
so that a refused peer can read our C{Reject} before we hang up.

What the handshake checks is L{meshroute.link.handshake}; what a vote
connection does once authenticated, L{meshroute.link.votes}; both work
on this core.
"""

from dataclasses import dataclass, field
from typing import Callable

from twisted.internet.interfaces import IDelayedCall, ITransport
from twisted.logger import Logger

from meshroute import events
from meshroute.link import auth, reasons
from meshroute.link.context import RouterContext, VoteSide
from meshroute.link.inputs import LinkInputs
from meshroute.link.keepalive import Keepalive
from meshroute.link.settings import ConnectorSettings, ListenerSettings
from meshroute.link.stages import CONNECT, DELIVERY, REPLICATION, ROUTING
from meshroute.link.traffic import Traffic
from meshroute.wire.codec import encode
from meshroute.wire.frames import Keepalive as KeepaliveFrame, Recovery
from meshroute.wire.transport import flush_now

log = Logger()


@dataclass
class LinkCore:
    """
    The data of one link and the I/O its machine's behaviours perform.

    @ivar on_delivery: called when the link reaches delivery (connectors use
        it to reset their retry schedule).
    @ivar link: the L{meshroute.link.link.Link} this is the core of: what
        the registry holds, and what takes the peer's frames.
    @ivar endpoint: the configured endpoint a connector's link was made
        through (one of the connector's list); None for a listener's link.
    @ivar own_challenge: the challenge we send in the handshake
        (L{meshroute.link.handshake}); C{peer_challenge} the peer's.
    @ivar peer_group: on a replication listener, the HA group the pair's
        other instance said it is in (checked once its proof is).
    @ivar unanswered: on a connector's vote connection, how many of its
        requests await the witness's answer (L{meshroute.link.votes}).
    @ivar held_frames: while a verdict on the peer's proof is being made
        (its epoch saved), the frames it sent since, in order; else None.
    @ivar delivering: the machine is in delivery (set on entering it,
        cleared on leaving it): the data frames go straight to the channel.
    @ivar traffic: what the link sent and received (L{Traffic}).
    """

    context: RouterContext
    direction: str
    settings: ListenerSettings | ConnectorSettings
    transport: ITransport
    link_id: str
    on_delivery: Callable[[], None] = lambda: None
    link: object = None
    endpoint: str | None = None
    peer: str | None = None
    stage: str = CONNECT
    since: float = 0.0
    last_heard: float | None = None
    keepalive_interval_ms: int | None = None
    keepalive: Keepalive | None = None
    close_reason: str | None = None
    close_detail: str = ""
    own_challenge: bytes = field(default_factory=auth.new_challenge)
    peer_challenge: bytes = b""
    peer_last_received: int | None = None
    version: int | None = None
    peer_epoch: int = 0
    peer_group: str = ""
    channel: object = None
    purpose: str = ROUTING
    vote_side: VoteSide | None = None
    replica_side: object = None
    unanswered: int = 0
    held_frames: list | None = None
    delivering: bool = False
    traffic: Traffic = field(default_factory=Traffic)
    _stage_timer: IDelayedCall | None = None
    _reject_timer: IDelayedCall | None = None

    # -- what it sends, hears and tells -----------------------------------

    def send(self, frame) -> None:
        """
        Write C{frame} to the peer, counted in the link's traffic.
        """
        data = encode(frame)
        self.traffic.sent(frame, len(data))
        self.transport.write(data)

    def flush(self) -> None:
        """
        Hand the frames written so far to the kernel now
        (L{flush_now}): the channel does, once it has written the batch
        its turn gathered.
        """
        if self.close_reason is None:
            flush_now(self.transport)

    def send_while_open(self, frame) -> None:
        """
        Send C{frame} unless the connection is closing (a channel's frame
        that comes after the close decision is moot).
        """
        if self.close_reason is None:
            self.send(frame)

    def heard(self) -> None:
        """
        Note the peer's latest sign of life (any valid frame).
        """
        self.last_heard = self.context.clock.seconds()

    def emit(self, event: str, **fields) -> None:
        """
        Write an event about this link to the router's event log.
        """
        self.context.events.emit(
            event, link=self.link_id, peer=self.peer, direction=self.direction, **fields
        )

    # -- the stage timer --------------------------------------------------

    def begin_stage(self, inputs: LinkInputs, stage: str) -> None:
        """
        Enter a stage in which we wait for the peer, under the stage timer.
        """
        self.cancel_stage_timer()
        self.stage = stage
        self.since = self.context.clock.seconds()
        if stage == CONNECT and self.endpoint is not None:
            self.emit(events.LINK_STAGE, stage=stage, endpoint=self.endpoint)
        else:
            self.emit(events.LINK_STAGE, stage=stage)
        self.restart_stage_timer(inputs)

    def restart_stage_timer(self, inputs: LinkInputs) -> None:
        """
        Wait stage-valid-timeout (again) for the peer's next frame.
        """
        self.cancel_stage_timer()
        self._stage_timer = self.context.clock.callLater(
            self.settings.stage_valid_timeout_ms / 1000, inputs.stage_timer_expired
        )

    def cancel_stage_timer(self) -> None:
        """
        Stop waiting for the peer under stage-valid-timeout.
        """
        if self._stage_timer is not None and self._stage_timer.active():
            self._stage_timer.cancel()
        self._stage_timer = None

    # -- recovery, then delivery or replication ---------------------------

    def send_recovery(self) -> None:
        """
        Tell the peer the last sequence we received from it (the engine's
        L{meshroute.wire.frames.Recovery} for its name).
        """
        self.send(self.context.engine.recovery(self.peer))

    def begin_delivery(self, inputs: LinkInputs, frame: Recovery) -> None:
        """
        Both sides have exchanged recovery points: start keepalives.
        """
        self.cancel_stage_timer()
        self.heard()
        self.peer_last_received = frame.last_received
        self.stage = DELIVERY
        self.since = self.context.clock.seconds()
        self.emit(
            events.LINK_STAGE,
            stage=DELIVERY,
            keepalive_interval_ms=self.keepalive_interval_ms,
        )
        self._start_keepalive(inputs)
        self.channel = self.context.engine.link_up(
            self.peer, self.send, fail=inputs.store_failed, emit=self.emit,
            version=self.version, flush=self.flush)
        self.channel.recovered(frame)
        self.delivering = True
        log.info(
            "link {link} to {peer} ({direction}{through}) in delivery, keepalive {interval} ms",
            link=self.link_id,
            peer=self.peer,
            direction=self.direction,
            through="" if self.endpoint is None else f" through {self.endpoint}",
            endpoint=self.endpoint,
            interval=self.keepalive_interval_ms,
        )
        self.on_delivery()

    def begin_replication(self, inputs: LinkInputs) -> None:
        """
        A replication connection is authenticated (both sides): keepalives
        start, and the stage's frames go to the channel from now on: the
        active's feed (listener) or the follower's stream (connector).
        """
        self.cancel_stage_timer()
        self.heard()
        self.stage = REPLICATION
        self.since = self.context.clock.seconds()
        through = {} if self.endpoint is None else {"endpoint": self.endpoint}
        self.emit(events.LINK_STAGE, stage=REPLICATION,
                  keepalive_interval_ms=self.keepalive_interval_ms, **through)
        self._start_keepalive(inputs)
        self.paired()
        if self.replica_side is None:
            self.channel = self.context.replication.feed(self, inputs.store_failed)
        else:
            self.on_delivery()
            self.channel = self.replica_side.following(self, inputs.store_failed)
        log.info("replication connection {link} {direction} {peer} authenticated",
                 link=self.link_id, direction="from" if self.replica_side is None else "to",
                 peer=self.peer)

    def _start_keepalive(self, inputs: LinkInputs) -> None:
        self.keepalive = Keepalive(
            self.context.clock,
            self.keepalive_interval_ms / 1000,
            send=lambda: self.send(KeepaliveFrame()),
            expired=inputs.keepalive_expired,
        )
        self.keepalive.start()

    def paired(self) -> None:
        """
        A connection between the two instances of a pair is authenticated:
        they are of one group (the listener checked it).
        """
        if self.context.pairing is not None:
            self.context.pairing.matched()

    # -- the end ----------------------------------------------------------

    def wait_to_disconnect(self, inputs: LinkInputs) -> None:
        """
        Give a refused peer reject-disconnect-delay to read our Reject.
        """
        self._reject_timer = self.context.clock.callLater(
            self.settings.reject_disconnect_delay_ms / 1000, inputs.reject_delay_elapsed
        )

    def superseded(self, epoch: int) -> None:
        """
        A link from epoch C{epoch} of our peer's name was admitted: close,
        and give way to it.
        """
        detail = f"{self.peer} serves in epoch {epoch} now, this link in epoch {self.peer_epoch}"
        log.info("link {link} to {peer} ({direction}) superseded: {detail}",
                 link=self.link_id, peer=self.peer, direction=self.direction, detail=detail)
        self.close(reasons.SUPERSEDED, detail)
        self.give_way()

    def give_way(self) -> None:
        """
        Give up the peer's name and the delivery channel at once, before
        the connection is gone, so that the link from a newer epoch alone
        uses them (the store's outbox for the name above all).
        """
        self.context.registry.release(self.peer, self.link)
        channel, self.channel = self.channel, None
        if channel is not None:
            channel.closed()

    def close(self, reason: str, detail: str = "") -> None:
        """
        Close the connection for C{reason}.

        Refusals and shutdowns flush what we wrote (the peer should read
        our Reject); every other close is abortive, because the peer is
        silent, broken or hostile and its socket may never drain.
        """
        self.delivering = False
        if self.close_reason is None:
            self.close_reason = reason
            self.close_detail = detail
        self._stop_timers()
        if reason in (reasons.REJECTED, reasons.SHUTDOWN):
            # A TLS transport holds a clean close until its producer (the
            # LinkProtocol) is unregistered.
            self.transport.unregisterProducer()
            self.transport.loseConnection()
        else:
            self.transport.abortConnection()

    def finish(self, truncated: bool, why: str) -> None:
        """
        The connection is gone: record why and release the peer's name.
        """
        self.delivering = False
        self._stop_timers()
        if self.channel is not None:
            self.channel.closed()
        if self.close_reason is None:
            self.close_reason = reasons.PROTOCOL_ERROR if truncated else reasons.PEER_CLOSED
            self.close_detail = "truncated frame" if truncated else why
        self.emit(
            events.LINK_CLOSED,
            reason=self.close_reason,
            detail=self.close_detail,
            stage=self.stage,
            last_heard=self.last_heard,
            keepalive_interval_ms=self.keepalive_interval_ms,
        )
        self.context.registry.remember_close(self.link, {
            "link": self.link_id, "direction": self.direction, "reason": self.close_reason,
            "detail": self.close_detail, "stage": self.stage,
            "closed_at": self.context.clock.seconds()})
        log.info(
            "link {link} to {peer} ({direction}) closed in {stage}: {reason} {detail}",
            link=self.link_id,
            peer=self.peer,
            direction=self.direction,
            stage=self.stage,
            reason=self.close_reason,
            detail=self.close_detail,
        )
        if self.vote_side is not None:
            self.vote_side.closed(self)

    def _stop_timers(self) -> None:
        self.cancel_stage_timer()
        if self._reject_timer is not None and self._reject_timer.active():
            self._reject_timer.cancel()
        if self.keepalive is not None:
            self.keepalive.stop()
