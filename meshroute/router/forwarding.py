"""
Forwarding to peers: the router's live links in their delivery stage,
each a L{PeerChannel<meshroute.router.peer_channel.PeerChannel>}, and what
binds them to the route table.

 - A link that reaches delivery gets a channel and the whole route table
   (L{Forwarding.link_up}); routes that arrive are taken at once and
   flooded once per reactor turn (L{TurnFlood}), and at the end of that
   turn what the new routes let move moves (C{routes_changed}).
 - Which backlog each channel may take: the destinations it is the next
   hop of, except those still held in another peer's outbox
   (L{Forwarding.assignable}: order through a reroute).
 - A link that stays down for C{reroute-delay} gives its unacknowledged
   messages back to the backlog (L{Forwarding.link_down}), as do the
   outboxes a previous run left for peers that do not come back
   (L{Forwarding.start}).
"""

from collections import defaultdict
from typing import Callable

from twisted.internet.interfaces import IDelayedCall, IReactorTime
from twisted.logger import Logger

from meshroute.interfaces import IChannelEngine
from meshroute.router.early_accepts import EarlyPending
from meshroute.router.peer_channel import PeerChannel
from meshroute.routing.flood import TurnFlood
from meshroute.routing.table import Advertisement
from meshroute.wire.frames import EPOCH_VERSION, Recovery, Routes

log = Logger()


def routes_frame(advertisements, version: int) -> Routes:
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


class Forwarding:
    """
    The delivery-stage links of router C{name}.

    @param engine: what each channel asks of the engine
        (L{IChannelEngine}).
    @param reroute_delay: seconds a closed link keeps its unacknowledged
        messages for its own recovery before they go back to the backlog.
    @param early_accept_hold: seconds an early send's accept waits for
        the peer's acknowledgement that makes it moot
        (L{meshroute.router.early_accepts}).
    @param epoch_heard: called C{(origin, epoch)} for every route
        advertisement taken from an epoch above 0.
    @param routers_heard: called with the set of router names the route
        table heard of first, after a link came up or advertisements
        arrived.
    @param routes_changed: called at the end of a turn in which routes
        changed, once their news is flooded: the non-persistent messages
        waiting for a route may move (before the backlog does,
        L{routes_changed}).
    """

    def __init__(self, name: str, store, routes, clock: IReactorTime, engine: IChannelEngine,
                 reroute_delay: float, epoch_heard: Callable[[str, int], None],
                 routers_heard: Callable[[set[str]], None],
                 routes_changed: Callable[[], None], early_accept_hold: float = 0.0) -> None:
        self.name = name
        self._store = store
        self._routes = routes
        self._clock = clock
        self._engine = engine
        self._reroute_delay = reroute_delay
        self._epoch_heard = epoch_heard
        self._routers_heard = routers_heard
        self._transient_may_move = routes_changed
        self._channels: dict[str, PeerChannel] = {}
        self._serving: dict[str, frozenset] | None = {}
        self._flood = TurnFlood(clock, self._turn_ended)
        self._reroutes: dict[str, IDelayedCall] = {}
        self._early_accept_hold = early_accept_hold
        self._early_pending = EarlyPending()

    # -- the links ----------------------------------------------------------

    def recovery(self, peer: str) -> Recovery:
        """
        For the recovery stage: the last sequence durably received from
        C{peer}, our store id, and the store of C{peer}'s it belongs to.
        """
        store = self._store
        return Recovery(store.last_received(peer), store.store_id, store.peer_store_id(peer))

    def link_up(self, peer: str, send, fail, emit, version: int, flush) -> PeerChannel:
        """
        A link to C{peer} reached delivery; C{send(frame)} writes to it,
        C{fail(detail)} closes it because the store failed, and
        C{emit(event, **fields)} writes a link event; C{version} is the
        link protocol version it speaks; C{flush()} hands what was written
        to the kernel at once.

        @return: the channel the link feeds its delivery-stage frames to.
        """
        pending = self._reroutes.pop(peer, None)
        if pending is not None and pending.active():
            pending.cancel()
        early = None if self._store.replicated else self._early_pending
        channel = PeerChannel(peer, version, send, fail, emit, self._engine, self._store,
                              self._clock, early, self._early_accept_hold, flush=flush)
        self._channels[peer] = channel
        for advertisement in self._routes.link_up(peer):
            self._flood.news(advertisement)
        channel.send(routes_frame(self._routes.advertisements(), version))
        self._flood.sent_everything(peer)
        self._serving = None
        return channel

    def release_held(self) -> None:
        """
        Every link stores what it held while the disk was low
        (L{PeerChannel.release_held}).
        """
        for channel in list(self._channels.values()):
            channel.release_held()

    def link_down(self, peer: str, channel: PeerChannel) -> None:
        """
        The delivery-stage link to C{peer} is gone.
        """
        if self._channels.get(peer) is not channel:
            return
        del self._channels[peer]
        for advertisement in self._routes.link_down(peer):
            self._flood.news(advertisement)
        self._serving = None
        self._reroutes[peer] = self._clock.callLater(self._reroute_delay, self._reroute, peer)

    def channel(self, peer: str) -> PeerChannel | None:
        """
        The channel of the delivery-stage link to C{peer}, if one is up
        (what tests look at; the engine asks L{channel_towards}).
        """
        return self._channels.get(peer)

    def channel_towards(self, router: str) -> PeerChannel | None:
        """
        The channel of the link to C{router}'s next hop, if it is up.
        """
        hop = self._routes.next_hop(router)
        return self._channels.get(hop) if hop is not None else None

    # -- reroutes -----------------------------------------------------------

    def start(self) -> None:
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
        store for the next start), no more floods.
        """
        for call in self._reroutes.values():
            if call.active():
                call.cancel()
        self._reroutes.clear()
        self._flood.stop()

    def _reroute(self, peer: str) -> None:
        del self._reroutes[peer]
        if peer in self._channels:
            return
        d = self._store.return_outbox(peer)

        def returned(count: int) -> None:
            if count:
                log.info("{count} unacknowledged messages for {peer} returned to the "
                         "backlog", count=count, peer=peer)
                self.pump_all()

        d.addCallback(returned)
        d.addErrback(lambda f: log.failure("returning the outbox of {peer}", f, peer=peer))

    # -- routes -------------------------------------------------------------

    def routes_received(self, peer: str, frame: Routes) -> None:
        """
        Advertisements arrived from C{peer}: what is news is taken now
        (every question about routes sees it) and flooded, and the routes
        acted on, once at the end of the turn (L{TurnFlood}).
        """
        for origin, seq, neighbors, *epoch in frame.advertisements:
            advertisement = Advertisement(origin, seq, tuple(neighbors), *epoch)
            news = self._routes.received(advertisement)
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
                channel.send(routes_frame(news, channel.version))
        heard = self._routes.newly_heard()
        if heard:
            self._routers_heard(heard)
        self.routes_changed()

    def routes_changed(self) -> None:
        """
        Move what the new routes let move: the non-persistent messages
        that wait, and the backlog.  With nothing waiting, routes are not
        computed: the table computes them on the next question (a message
        to forward), so a router that forwards nothing does no route
        computation while the mesh changes.
        """
        self._transient_may_move()
        if any(self._store.backlog_depths().values()):
            self.pump_all()

    def serving(self, peer: str) -> frozenset:
        """
        The destination routers whose next hop is C{peer}.
        """
        if self._serving is None:
            serving = defaultdict(set)
            for router, (next_hop, _hops) in self._routes.routes().items():
                serving[next_hop].add(router)
            self._serving = {peer: frozenset(routers) for peer, routers in serving.items()}
        return self._serving.get(peer, frozenset())

    def assignable(self, peer: str) -> frozenset:
        """
        The destination routers whose backlog C{peer} may take now: those
        it is the next hop of, except any with messages still in another
        peer's outbox, or sent early on another link and not in its
        outbox yet (L{EarlyPending}).

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
        held |= self._early_pending.destinations(peer)
        return serving - held if held else serving

    def write_held(self, router: str) -> None:
        """
        A send for C{router} is about to be accepted into the backlog: the
        held accepts of every link that holds early sends for it are
        written first (all of that link's, whatever their destination), so
        that their entry ids stay below its own (the order a returned
        outbox takes its place in the backlog by,
        L{meshroute.router.early_accepts}).
        """
        for peer in self._early_pending.peers_for(router):
            channel = self._channels.get(peer)
            if channel is not None:
                channel.write_held()

    def early_channel(self, router: str) -> PeerChannel | None:
        """
        The link a fresh send for C{router} may leave on before its accept
        is committed (L{meshroute.router.early_sends}): its next hop's, if
        that may take C{router}'s messages now (none of them is held in
        another peer's outbox, L{assignable}).  On a replicated store (an
        HA pair's active) no link sends early (L{link_up}): nothing
        unconfirmed may leave it, so every send waits for the gate, and
        its link takes it from the backlog.
        """
        channel = self.channel_towards(router)
        if channel is None or router not in self.assignable(channel.peer):
            return None
        return channel

    # -- moving the backlog -------------------------------------------------

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

    def pump_ahead(self, routers) -> None:
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
                channel = self.channel_towards(router)
                if channel is not None:
                    channel.pump(ahead=True)

    def pump_towards(self, router: str) -> None:
        """
        The backlog for C{router} grew: its next hop's link may take it.
        """
        channel = self.channel_towards(router)
        if channel is not None:
            channel.pump()

    def pump_all(self) -> None:
        for channel in list(self._channels.values()):
            channel.pump()

    def describe_routes(self) -> dict:
        """
        C{GET /api/v1/routes}.
        """
        return {router: {"next_hop": hop, "hops": hops}
                for router, (hop, hops) in sorted(self._routes.routes().items())}
