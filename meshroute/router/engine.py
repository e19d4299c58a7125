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
   the backlog behind them (L{Forwarding.assignable
   <meshroute.router.forwarding.Forwarding.assignable>}).

Flow control: at most L{WINDOW<meshroute.router.peer_channel.WINDOW>}
unacknowledged messages per link, and at most
L{WINDOW_BYTES<meshroute.router.peer_channel.WINDOW_BYTES>} of their bodies (one
message more when a single one is larger); the rest wait in the store,
not in memory, however large the backlog.  A link whose transport is full
(L{PeerChannel.pause<meshroute.router.peer_channel.PeerChannel.pause>}) takes no
more messages until it drains: persistent ones wait in the store,
non-persistent ones in memory (L{meshroute.router.transient}).

The engine is made of parts, each a module of this package with one job:

    part                               its job
    ---------------------------------  ------------------------------------------
    acceptance.Acceptance              clients' sends and transactions: duplicate
                                       ids, durable before answered
    admission.Admission                whether a send is refused now: unknown
                                       router, backlog at its bound
    prepared.PreparedTransactions      clients' two-phase transactions: prepared,
                                       decided by xid, after any restart
    destinations.Destinations          routing decisions: an address's
                                       destinations, where an arrival goes
    forwarding.Forwarding              the links' channels, routes flooded,
                                       reroutes, which backlog a link may take
    arrivals.Arrivals                  what links deliver, stored then acked
    transient.TransientPath            the non-persistent path, waiting in memory
    queues.QueueManager                local queues and their consumers
    expired.ExpiredMessages            expired messages and their notices
    system_messages.SystemMessages     routers' own messages to system queues
    message_events.MessageEvents       the message records of the event log
    topic_interest.TopicInterest       topic interest: ours, and the mesh's
                                       as the links flood it
    topic_subscriptions.               local topic subscriptions, durable
      TopicSubscriptions               ones recorded in the store
    topic_fan_out.TopicFanOut          a publication's copies: per matching
                                       subscription, per link toward interest
    mesh_wide.MeshWide                 when our interest reached every router
    retained.RetainedMessages          retained topic messages: kept, flooded,
                                       given to new subscriptions

L{MessageEngine} builds them, wires them to each other, and is the one
face the rest of the router sees: the client sessions (C{submit},
C{submit_many}, C{commit}, C{prepared}, C{queues}), the links
(L{IChannelEngine<meshroute.interfaces.IChannelEngine>}), the router's
service (C{start}, C{stop}) and the admin views.  Its methods are its
parts' own, bound here, so that a caller needs to know one object and a
reader finds each behaviour in the one module that does it.
"""

from typing import Callable

from twisted.internet.interfaces import IReactorTime
from twisted.logger import Logger
from zope.interface import implementer

from meshroute import events
from meshroute.expiry import ExpirySweep
from meshroute.interfaces import IChannelEngine
from meshroute.messages import DEAD_LETTER_QUEUE, TOPIC_QUEUE, Message, MessageIds
from meshroute.router.acceptance import Acceptance
from meshroute.router.early_accepts import DEFAULT_EARLY_ACCEPT_HOLD_MS
from meshroute.router.admission import Admission
from meshroute.router.arrivals import Arrivals
from meshroute.router.destinations import Destinations
from meshroute.router.expired import ExpiredMessages
from meshroute.router.forwarding import Forwarding
from meshroute.router.mesh_wide import MeshWide
from meshroute.router.message_events import MessageEvents
from meshroute.store import ExecutorStopped
from meshroute.router.prepared import PreparedTransactions
from meshroute.router.queues import QueueManager
from meshroute.router.retained import RetainedMessages
from meshroute.router.system_messages import SystemMessages
from meshroute.router.topic_fan_out import TopicFanOut, publishers_held
from meshroute.router.topic_interest import TopicInterest
from meshroute.router.topic_subscriptions import TopicSubscriptions
from meshroute.router.transient import TransientPath
from meshroute.topics.backlog import DEFAULT_HOLD_AT, TopicBacklog

log = Logger()


@implementer(IChannelEngine)
class MessageEngine:
    """
    Accepts, forwards and enqueues messages for one router.

    @param max_hops: links a message may cross; past it, it is
        dead-lettered where that happens.
    @param max_backlog: persistent messages that may wait (in the store)
        for one destination router; past it, producers get
        L{BacklogFull<meshroute.router.admission.BacklogFull>}.
    @param max_transient_backlog: non-persistent messages that may wait (in
        memory) for one destination router; past it, producers get
        L{BacklogFull<meshroute.router.admission.BacklogFull>}, and the oldest of those arriving over links are
        dropped.
    @param reroute_delay: seconds a closed link keeps its unacknowledged
        messages for its own recovery before they go back to the backlog.
    @param early_accept_hold: seconds an early send's accept waits for the
        peer's acknowledgement that spares writing it
        (L{meshroute.router.early_accepts}).
    @param epoch_heard: called C{(origin, epoch)} for every route
        advertisement taken from an epoch above 0
        (L{meshroute.link.epochs.PeerEpochs.heard}).
    @param routers_heard: called with the set of router names the route
        table heard of first, after a link came up or advertisements
        arrived (L{meshroute.routing.known.KnownRouters.heard}).
    @param max_retained: retained topic messages this router keeps, and
        C{max_retained_bytes} of their bodies in all.
    @param hold_publishers_at: publications waiting in C{$topic} at which
        topic publishers are held (L{meshroute.topics.backlog}).
    @param disk: the L{meshroute.store.disk_space.DiskSpace} of the
        store's disk: while it is C{low}, clients' sends are refused and
        the links hold what arrives (None: never low); call
        L{disk_has_room} when it has room again.

    @ivar expiry_notices: who hands expiry notices to this router's client
        sessions (L{ExpiredMessages.sessions
        <meshroute.router.expired.ExpiredMessages.sessions>}).
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
        early_accept_hold: float = DEFAULT_EARLY_ACCEPT_HOLD_MS / 1000,
        epoch_heard: Callable[[str, int], None] = lambda origin, epoch: None,
        routers_heard: Callable[[set[str]], None] = lambda routers: None,
        max_retained: int = 10_000,
        max_retained_bytes: int = 64 * 1024 * 1024,
        hold_publishers_at: int = DEFAULT_HOLD_AT,
        disk=None,
    ) -> None:
        self.name = name
        self.routes = routes
        ids = MessageIds(name)
        self.destinations = Destinations(name, routes, clock, max_hops)
        self.forwarding = Forwarding(name, store, routes, clock, self, reroute_delay,
                                     epoch_heard, routers_heard,
                                     lambda: self.transient.release_all(),
                                     early_accept_hold)
        self.system = SystemMessages(name, self.destinations, self.forwarding)
        self.queues = QueueManager(store, event_log, clock,
                                   expired=lambda message, where: self.expired_messages.expired(
                                       message, where))
        self.message_events = MessageEvents(name, event_log, self.queues.rates)
        self.expired_messages = ExpiredMessages(name, ids, clock, event_log, self.queues,
                                                self.system)
        #: Sets aside expired messages nobody is about to take (started
        #: with the router, L{start}).
        self.expiry_sweep = ExpirySweep(clock, store, self.queues,
                                         self.expired_messages.swept,
                                         store_stopped=(ExecutorStopped,))
        self.transient = TransientPath(name, clock, self.destinations, self.forwarding,
                                       self.queues, self.message_events, self.expired_messages,
                                       max_transient_backlog)
        #: Whether a client's send is refused now (the disk low, its router
        #: unknown, its backlog at its bound).
        self.admission = Admission(name, routes, store, self.transient, max_backlog, disk)
        self.acceptance = Acceptance(name, store, self.admission, ids, clock, self.destinations,
                                     self.forwarding, self.transient, self.queues,
                                     self.message_events)
        self.arrivals = Arrivals(name, store, self.queues, self.destinations,
                                 self.message_events, self.expired_messages, self.dead_lettered,
                                 self.system, self.transient)
        self.expiry_notices = self.expired_messages.sessions
        #: Topics: the mesh's interest, this router's subscriptions, and
        #: the fan-out of publications.
        self.interest = TopicInterest(name, store, clock,
                                      changed=lambda origins: self.mesh_wide.taken(origins))
        self.mesh_wide = MeshWide(name, self.interest, routes, self.system, clock)
        self.retained = RetainedMessages(name, store, self.system, clock, event_log,
                                         max_retained, max_retained_bytes)
        self.topics = TopicSubscriptions(store, self.queues, self.interest, self.mesh_wide,
                                         self.message_events, self.retained)
        #: Whether topic publishers are held now (the sessions ask it).
        self.topic_backlog = TopicBacklog(hold_publishers_at,
                                          lambda: self.queues.depth(TOPIC_QUEUE),
                                          publishers_held)
        self.fan_out = TopicFanOut(name, store, self.queues, self.topics, self.interest, routes,
                                   self.forwarding, self.transient, self.message_events,
                                   self.retained, self.topic_backlog, clock, max_backlog)
        #: Clients' prepared (two-phase) transactions.
        self.prepared = PreparedTransactions(store, self.acceptance, self.queues, event_log,
                                             clock)

        # Clients' sends and transactions.
        self.submit = self.acceptance.submit
        self.submit_many = self.acceptance.submit_many
        self.commit = self.acceptance.commit
        # The links (IChannelEngine) and the routes.
        self.recovery = self.forwarding.recovery
        self.routes_received = self.forwarding.routes_received
        self.interest_received = self.interest.received
        self.assignable = self.forwarding.assignable
        self.serving = self.forwarding.serving
        self.outbox_resolved = self.forwarding.outbox_resolved
        self.acknowledge_due = self.forwarding.acknowledge_due
        self.pump_towards = self.forwarding.pump_towards
        self.describe_routes = self.forwarding.describe_routes
        self.arrived = self.arrivals.arrived
        self.arrived_many = self.arrivals.arrived_many
        self.arrived_transient_many = self.arrivals.arrived_transient_many
        self.link_resumed = self.transient.link_resumed
        self.transient_depths = self.transient.depths
        self.emit_forwarded_many = self.message_events.forwarded
        self.moved_to_expired = self.expired_messages.moved
        # Routers' own messages (admin views through the mesh).
        self.serve_system = self.system.serve
        self.send_system = self.system.send

    def accepting(self, router: str) -> int:
        """
        Persistent messages for C{router} submitted to the store and not
        yet in its backlog: clients' sends being accepted, and the topic
        fan-out's copies being placed
        (L{IChannelEngine.accepting<meshroute.interfaces.IChannelEngine.accepting>}).
        """
        return self.admission.accepting(router) + self.fan_out.placing(router)

    def link_up(self, peer: str, send, fail, emit, version: int, flush):
        """
        A link to C{peer} reached delivery: its channel
        (L{Forwarding.link_up<meshroute.router.forwarding.Forwarding.link_up>}),
        and the interest it is to hear.
        """
        channel = self.forwarding.link_up(peer, send, fail, emit, version, flush)
        self.interest.link_up(peer, send, version)
        self.retained.link_up(peer, channel, version)
        return channel

    def link_down(self, peer: str, channel) -> None:
        """
        The delivery-stage link to C{peer} is gone.
        """
        current = self.forwarding.channel(peer) is channel
        self.forwarding.link_down(peer, channel)
        if current:
            self.interest.link_down(peer)
            self.retained.link_down(peer)

    def arrivals_held(self) -> bool:
        """
        See L{IChannelEngine.arrivals_held<meshroute.interfaces.IChannelEngine.arrivals_held>}.
        """
        return self.admission.disk.low

    def disk_has_room(self) -> None:
        """
        The disk has room again: the links store what they held.
        """
        self.forwarding.release_held()

    def arrived_transient(self, message: Message) -> None:
        """
        A non-persistent message arrived from a peer.
        """
        self.arrivals.arrived_transient_many((message,))

    def dead_lettered(self, message: Message, reason: str) -> None:
        """
        C{message} is now in this router's dead-letter queue, for C{reason}.
        """
        self.message_events.dead_lettered(message, reason)
        self.queues.notify(DEAD_LETTER_QUEUE)

    def start(self) -> None:
        """
        The store is open: reroute what a previous run left in outboxes
        and start the expiry sweep.
        """
        self.forwarding.start()
        self.expiry_sweep.start()
        # The publications a previous run left in $topic wait for the
        # interest, the retained messages and the durable subscriptions
        # they may be for.
        d = self.interest.load()
        d.addCallback(lambda _: self.retained.load())
        d.addCallback(lambda _: self.topics.start())
        d.addCallback(lambda _: self.fan_out.start())
        d.addErrback(lambda failure: log.failure(
            "topic interest, retained messages or durable subscriptions could not be read: "
            "no publication "
            "is fanned out", failure))

    def stop(self) -> None:
        """
        The router is stopping: no more reroutes (outboxes wait in the
        store for the next start), floods or sweeps.
        """
        self.forwarding.stop()
        self.expiry_sweep.stop()
        self.fan_out.stop()
        self.interest.stop()
        self.mesh_wide.stop()
        self.retained.stop()

