"""
One router: a C{MultiService} of its routing listener, its connectors, its
client listener and its admin API, sharing one store, one message engine,
one event log, one link registry and one clock.

Start-up order matters for exactly-once delivery: ports are bound early
(so a port in use stops twistd with a clear error), but no connection is
served and no connector dials until the store is open, because the first
thing a link does is ask the store for its recovery point.  A connection
made meanwhile waits in its port's listen backlog and is served once the
store is open (L{meshroute.router.listening}); only the admin API answers at
once, saying whether the router serves yet.
"""

import os
from collections.abc import Callable
from dataclasses import dataclass

from twisted.application.service import MultiService, Service
from twisted.internet import defer
from twisted.internet.endpoints import clientFromString, serverFromString
from twisted.internet.interfaces import IReactorTime
from twisted.web.server import Site
from twisted.logger import Logger

from meshroute import __version__, events
from meshroute.router.remote_views import MeshViews
from meshroute.router.views import describe_mesh, describe_topics, describe_topology
from meshroute.sessions.ha_view import WITHOUT_HA, HAView
from meshroute.router.engine import MessageEngine
from meshroute.data_dir_lock import DataDirInUse, hold_data_dir
from meshroute.errors import ConfigError
from meshroute.link.connector import ConnectorService
from meshroute.link.context import RouterContext
from meshroute.link.epochs import PeerEpochs
from meshroute.link.link import ListenerFactory
from meshroute.link.registry import LinkRegistry
from meshroute.link.retry import RetrySchedule
from meshroute.link.rotation import EndpointRotation
from meshroute.link.settings import ConnectorSettings, ListenerSettings
from meshroute.router.client_listeners import ClientListeners
from meshroute.router.listening import Listening, listening
from meshroute.router.settings import RouterConfig
from meshroute.routing.known import KnownRouters
from meshroute.routing.table import RouteTable
from meshroute.security.load import load_policy
from meshroute.security.policy import Security
from meshroute.security.reload import reload_security
from meshroute.store import SQLiteStore
from meshroute.store.disk_space import DiskSpace
from meshroute.store.pruning import IdPruner
from meshroute.store.writers import store_executor
from meshroute.router.witness import Witness

log = Logger()

#: The read-only views of a router (L{RouterService.describe_view}): what
#: its admin API answers at C{/api/v1/VIEW}, and another router's for it
#: through the mesh (L{meshroute.router.remote_views}).
VIEWS = ("router", "links", "routes", "routers", "queues", "topics", "sessions", "ha")

#: How long shutdown waits for links to flush and close before aborting them.
SHUTDOWN_GRACE_S = 5.0


#: The mode of a C{unix:} listener's socket when its endpoint string sets
#: none: owner and group may connect.  Twisted's default, 0666, would let
#: every local user talk to the router.
UNIX_SOCKET_MODE = "660"


class StringEndpoints:
    """
    Endpoint strings to endpoints on a real reactor.  Tests substitute an
    in-memory network with the same two methods.
    """

    def __init__(self, reactor) -> None:
        self._reactor = reactor

    def server(self, description: str):
        if description.startswith("unix:") and ":mode=" not in description:
            description += f":mode={UNIX_SOCKET_MODE}"
        return serverFromString(self._reactor, description)

    def client(self, description: str):
        return clientFromString(self._reactor, description)


class RouterService(MultiService):
    """
    A meshroute router.

    @param clock: the reactor (or, in tests, a clock with the same face).
    @param endpoints: turns endpoint strings into endpoints
        (L{StringEndpoints} on a real reactor).
    @param executor: runs the store's SQL; by default the one C{[store]
        writer} names, on C{clock} (L{store_executor}).
    @param host: for the router an HA instance runs while it is active
        (L{meshroute.ha.instance}), the instance's L{HostedParts}: the
        instance owns the data-dir's lock, the event log and the witness
        (its own group's record in its C{ha.db}, other groups' in this
        router's store), which outlive each active period; None for a
        router on its own.
    @param epoch: the epoch this instance serves in, when it is the active
        instance of an HA pair (docs/ha.md); 0, a router without HA.  Its
        links and route advertisements carry it, so the mesh takes this
        instance over an older one of the same name.
    @param ha_view: for an HA instance, returns its L{HAView} (whether it
        is active, its epoch, the pair's client endpoints), which the
        client listener answers C{Open} by; default: a router without HA.
    @param read_config: reads C{config}'s file again, for
        L{reload_security}: the TOML loader, given by the composition
        layer that loaded C{config} (L{meshroute.process}); None for a router
        built without a file (the in-memory mesh), which has nothing to
        reload.
    @param admin_site: makes the site of the router's admin endpoint from
        the router (L{meshroute.admin.api.admin_site}), handed down by the
        composition layer (L{meshroute.process}), which sits above both; with
        None, C{[admin]} is not served (an HA instance serves its own).
    @param stop_process: ends this router's part of the process, when its
        store cannot be opened: the composition layer's, which ends the
        process with its last instance (L{meshroute.process}); an HA
        instance's router ends its instance (L{HostedParts}); by default
        the reactor (C{clock}) stops.

    @ivar registry: the L{LinkRegistry} of its live links.
    @ivar witness: the L{Witness} answering HA votes on its routing
        listener.
    @ivar peer_epochs: the L{PeerEpochs}: the highest epoch seen per peer
        router name.
    @ivar known_routers: the L{KnownRouters}: the router names heard of,
        saved in the store and loaded when it opens.
    @ivar engine: the L{MessageEngine}.
    @ivar mesh_views: the L{MeshViews} asking other routers for their
        views through the mesh, and answering them.
    @ivar security: the L{Security} holding the users and permissions in
        force, or None without C{[security]} (the client listener is open).
    @ivar clients: the L{ClientListeners}: the native, STOMP and MQTT
        listeners' factories, sharing one session registry.
    """

    def __init__(self, config: RouterConfig, clock: IReactorTime, endpoints,
                 executor=None, host: "HostedParts | None" = None, epoch: int = 0,
                 ha_view: Callable[[], HAView] = lambda: WITHOUT_HA,
                 read_config: Callable[[], RouterConfig] | None = None,
                 admin_site: Callable[..., Site] | None = None,
                 stop_process: Callable[[], None] | None = None) -> None:
        super().__init__()
        self.config = config
        self._clock = clock
        self._stop_process = host.stop_process if host is not None else stop_process
        self._read_config = read_config
        self._started_at: float | None = None
        self._open = False
        self._host = host
        self.registry = LinkRegistry()
        # Before the data-dir is locked: a users file that stops the
        # router leaves nothing half-open.
        self.security = (Security(load_policy(config)) if config.security is not None
                         else None)
        self._lock_file = None
        if host is not None:
            self.events = host.events
        else:
            self.events = open_data_dir(config, clock, self._lock_data_dir,
                                        self._unlock_data_dir)
        clients = config.clients
        self.store = SQLiteStore(
            os.path.join(config.data_dir, "store.db"),
            sync=config.store.sync,
            executor=executor if executor is not None else store_executor(config.store, clock),
            router=config.name,
            clock=clock,
            duplicate_id_window_s=(
                clients.duplicate_id_window_ms / 1000 if clients is not None else 3600.0
            ),
        )
        self._pruner = IdPruner(self.store, clock)
        # No new message is taken while the data-dir's disk is low.
        self.disk = DiskSpace(config.data_dir, config.store.min_free_disk, clock,
                              reusable=self.store.reusable_bytes, squeeze=self.store.squeeze_wal,
                              room=lambda: self.engine.disk_has_room())
        # The highest epoch seen per peer name, so that an HA instance that
        # lost its place is refused, across restarts too.
        self.peer_epochs = PeerEpochs(self.store, self.registry)
        routes = RouteTable(config.name, clock, epoch)
        # The routers heard of, so that sends to them are taken after a
        # restart, or by an HA backup that took over, before links are up.
        self.known_routers = KnownRouters(self.store, routes)
        self.engine = MessageEngine(
            config.name,
            self.store,
            routes,
            self.events,
            clock,
            max_hops=config.routing.max_hops,
            max_backlog=config.routing.max_backlog,
            max_transient_backlog=config.routing.max_transient_backlog,
            reroute_delay=config.routing.reroute_delay_ms / 1000,
            early_accept_hold=config.routing.early_accept_hold_ms / 1000,
            epoch_heard=self.peer_epochs.heard,
            routers_heard=self.known_routers.heard,
            max_retained=config.routing.max_retained,
            max_retained_bytes=config.routing.max_retained_bytes,
            hold_publishers_at=config.routing.hold_publishers_at,
            disk=self.disk,
        )
        # Other routers' read-only views through the mesh, and ours for them.
        self.mesh_views = MeshViews(config.name, self.engine, clock, self.describe_view, VIEWS)
        # Every router with a routing listener is a witness: it answers HA
        # votes and heartbeats there (docs/ha.md), from its durable records.
        self.witness = (host.witness if host is not None and host.witness is not None
                        else Witness(config.name, self.store, clock, self.events))
        self.context = RouterContext(
            name=config.name,
            clock=clock,
            events=self.events,
            registry=self.registry,
            engine=self.engine,
            witness=self.witness,
            epoch=epoch,
            peer_epochs=self.peer_epochs,
        )
        if config.listener is not None:
            listener = config.listener
            settings = ListenerSettings(
                secret=listener.secret,
                keepalive_interval_ms=listener.keepalive_interval_ms,
                stage_valid_timeout_ms=listener.stage_valid_timeout_ms,
                reject_disconnect_delay_ms=listener.reject_disconnect_delay_ms,
                allowed_routers=(
                    frozenset(listener.allowed_routers)
                    if listener.allowed_routers is not None
                    else None
                ),
            )
            listening(endpoints, config, "routing.listener.endpoint", listener.endpoint,
                      ListenerFactory(self.context, settings)).setServiceParent(self)
        #: The listeners for clients (native, STOMP, MQTT), sharing one
        #: session registry.
        self.clients = ClientListeners(config, self.engine, clock, endpoints, self.events,
                                       ha_view, self.security, self)
        for connector in config.connectors:
            ConnectorService(
                self.context,
                ConnectorSettings(
                    secret=connector.secret,
                    expected_peer=connector.router,
                    stage_valid_timeout_ms=connector.stage_valid_timeout_ms,
                ),
                EndpointRotation([(description, endpoints.client(description))
                                  for description in connector.endpoint]),
                RetrySchedule(
                    connector.retry_interval_ms,
                    connector.retry_interval_multiplier,
                    connector.max_retry_interval_ms,
                    connector.reconnect_attempts,
                ),
                clock,
            ).setServiceParent(self)
        # The admin API answers from the start (saying whether the router
        # serves yet); the other listeners once the store is open.
        self._admin: Listening | None = None
        if config.admin is not None and admin_site is not None:
            self._admin = listening(endpoints, config, "admin.endpoint", config.admin.endpoint,
                                    admin_site(self, token=config.admin.token, reactor=clock))
            self._admin.setServiceParent(self)

    def startService(self) -> None:
        """
        Serve the admin API, open the store, then start serving: the other
        listeners accept (connections that waited in their backlogs
        first), connectors dial.  (Ports were bound by
        C{privilegedStartService}: L{meshroute.router.listening}.)
        """
        self._started_at = self._clock.seconds()
        if self._host is None:
            if self._lock_file is None:
                self._lock_data_dir()
            self.events.emit(events.ROUTER_STARTED, version=__version__, pid=os.getpid())
            log.info("router {name} starting (meshroute {version})", name=self.config.name,
                     version=__version__)
        Service.startService(self)
        if self._admin is not None:
            self._admin.startService()
        self._opening = self.store.open()
        # A hosted router's witness (the HA instance's) loads again: the
        # other groups' records are in this store (docs/ha.md).
        self._opening.addCallback(lambda _: self.witness.load())
        self._opening.addCallback(lambda _: self.peer_epochs.load())
        self._opening.addCallback(lambda _: self.known_routers.load())
        self._opening.addCallback(self._store_opened)
        self._opening.addErrback(self._store_failed)

    def _store_opened(self, _) -> None:
        if not self.running:
            return
        self._open = True
        self._pruner.start()
        self.disk.start()
        self.engine.queues.rates.start()
        self.engine.start()
        for service in self:
            if not service.running:
                service.startService()

    def _store_failed(self, failure) -> None:
        log.failure("router {name}: cannot open its store; stopping", failure,
                    name=self.config.name)
        (self._stop_process or self._clock.stop)()

    @defer.inlineCallbacks
    def stopService(self):
        """
        Close every client connection and every link (reason shutdown),
        stop listening and reconnecting, then close the event log.  The
        router of an HA instance's active period sends its clients away
        (C{not-active}: the other instance takes them); a router on its own
        drops them as a crash would, while its event log is still open.
        """
        self.clients.stop(hosted=self._host is not None)
        closing = self.registry.close_all()
        stopping = defer.maybeDeferred(super().stopService)
        abort = self._clock.callLater(SHUTDOWN_GRACE_S, self._abort_links)
        yield defer.gatherResults([closing, stopping])
        if abort.active():
            abort.cancel()
        self._open = False
        self.engine.stop()
        self.engine.queues.rates.stop()
        self.mesh_views.stop()
        self._pruner.stop()
        self.disk.stop()
        yield self.store.close()
        if self._host is None:
            self.events.emit(events.ROUTER_STOPPED)
            self.events.close()
            self._unlock_data_dir()

    def reload_security(self) -> bool:
        """
        Read C{[security]} and the users file again (SIGHUP,
        L{meshroute.security.reload}); whether a new policy is in force.
        """
        return (self._read_config is not None
                and reload_security(self.security, self.config, self._read_config))

    def describe(self) -> dict:
        """
        C{GET /api/v1/router}.
        """
        return {
            "name": self.config.name,
            "version": __version__,
            "uptime_s": (
                self._clock.seconds() - self._started_at if self._started_at is not None else 0.0
            ),
            "backlog": self.store.backlog_depths() if self._open else {},
            "serving": self._open,
            "listeners": [service.describe() for service in self
                          if isinstance(service, Listening)],
        }

    def describe_links(self) -> list[dict]:
        """
        C{GET /api/v1/links}: each live link, with how the previous link
        to its peer ended (C{last_close_reason}, C{last_close_detail},
        C{last_closed_at}; None when there was none).
        """
        closed = self.registry.last_closed()
        links = []
        for link in self.registry.links():
            row = link.describe()
            last = closed.get(row["peer"]) if row["peer"] is not None else None
            row["last_close_reason"] = last["reason"] if last else None
            row["last_close_detail"] = last["detail"] if last else None
            row["last_closed_at"] = last["closed_at"] if last else None
            links.append(row)
        return links

    def describe_routers(self) -> list[dict]:
        """
        C{GET /api/v1/routers}: every router this one has heard of, itself
        first (L{describe_mesh}).
        """
        return describe_mesh(self.config.name, self.engine.routes, self.registry)

    def describe_routes(self) -> dict:
        """
        C{GET /api/v1/routes}.
        """
        return self.engine.describe_routes()

    def describe_queues(self) -> list[dict]:
        """
        C{GET /api/v1/queues}.
        """
        return self.engine.queues.describe()

    def describe_topics(self) -> dict:
        """
        C{GET /api/v1/topics} (L{describe_topics}).
        """
        return describe_topics(self.engine)

    def describe_sessions(self) -> list[dict]:
        """
        C{GET /api/v1/sessions}.
        """
        return self.clients.describe_sessions()

    def describe_topology(self) -> dict:
        """
        C{GET /api/v1/topology}.
        """
        return describe_topology(self)

    def describe_view(self, view: str):
        """
        The read-only view C{view} (one of L{VIEWS}) as the admin API
        answers it at C{/api/v1/VIEW}.

        @raise KeyError: no such view (C{ha} of a router without HA).
        """
        ha_status = self._host.ha_status if self._host is not None else None
        if view == "ha":
            if ha_status is None:
                raise KeyError(view)
            return ha_status().describe()
        if view not in VIEWS:
            raise KeyError(view)
        if view == "router":
            answer = self.describe()
            if ha_status is not None:
                answer["ha"] = ha_status().describe()
            return answer
        return getattr(self, f"describe_{view}")()

    def _abort_links(self) -> None:
        for link in self.registry.connections():
            log.warn("link {link} did not close in time; aborting", link=link.core.link_id)
            link.core.transport.abortConnection()

    def _lock_data_dir(self) -> None:
        self._lock_file = lock_data_dir(self.config)

    def _unlock_data_dir(self) -> None:
        if self._lock_file is not None:
            self._lock_file.close()
            self._lock_file = None


@dataclass(frozen=True)
class HostedParts:
    """
    What an HA instance lends the router it runs while active
    (L{RouterService}'s C{host}).
    """

    events: events.EventLog
    #: The instance's witness (a replicated pair's: its own group's record
    #: in its C{ha.db}); None: the router's own, over its store (a
    #: shared-store instance's, whose records are all in the shared store).
    witness: Witness | None
    #: The instance's L{meshroute.ha.status.HAStatus} now: the router's
    #: C{router} and C{ha} views carry it, as the instance's admin API's do.
    ha_status: Callable[[], object] | None = None
    #: Ends the instance (its C{stop_process}), when the router's store
    #: cannot be opened; None: the reactor stops.
    stop_process: Callable[[], None] | None = None


def lock_data_dir(config: RouterConfig):
    """
    Refuse to start when another router process uses the same data-dir.

    @return: the open lock file; closing it releases the lock.
    """
    try:
        return hold_data_dir(config.data_dir)
    except DataDirInUse as e:
        raise ConfigError(config.path, "router.data-dir", str(e)) from None


def open_data_dir(config: RouterConfig, clock: IReactorTime, lock, unlock) -> events.EventLog:
    """
    Create and lock the data-dir (C{lock()}), and open its event log.

    @raise ConfigError: naming C{router.data-dir} when it cannot be used
        (after C{unlock()}).
    """
    try:
        os.makedirs(config.data_dir, exist_ok=True)
        lock()
        return events.EventLog(config.data_dir, config.name, clock, config.events,
                               close_in_thread=True)
    except OSError as e:
        unlock()
        raise ConfigError(config.path, "router.data-dir",
                          f"cannot use {config.data_dir!r} as the data-dir: "
                          f"{e.strerror or e}") from None
