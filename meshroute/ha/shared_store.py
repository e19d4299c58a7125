"""
One instance of a shared-store pair: what C{twistd meshroute} runs for a
configuration with C{[ha] policy = "shared-store"} (docs/ha.md, "Shared
store").

Both instances name one data dir.  The one holding the live lock of its
C{shared-store.lock} (L{StoreLock}) serves from C{store.db} with a
L{RouterService}, built afresh for each active period; the other waits,
trying the lock every C{lock-poll-interval}, and reads the live's
heartbeat from the lock file's record.  The rules are
L{meshroute.harules.shared_store}'s; this class carries them out, in
this order:

  - waiting (C{backup-waiting}, or C{live-unresponsive} when the live's
    heartbeat stopped): try the lock; a primary that cannot take it holds
    the failback request meanwhile;
  - activating: the lock taken and the record allowing it, write the new
    epoch into the record (fsynced) and into C{store.db}'s epoch start,
    take the data dir's C{router.lock}, start the router, its store's
    every commit batch checking the lock first;
  - active: every C{heartbeat-interval} raise the record's heartbeat,
    check the lock, and hand the store back to a requesting primary when
    C{allow-failback} says so;
  - handing back: stop the router (its in-flight commits finish, the
    store closes), release the lock, then wait again (C{restart-backup})
    or end the process.

Each instance keeps its own event log, in C{DATA-DIR/instance-ROLE/}
(both write under the router's name, as a replicated pair's do), and
holds its router's TCP ports bound from its start (L{HeldPorts}).
"""

import dataclasses
import os
import sqlite3
from collections.abc import Callable

from twisted.application.service import MultiService
from twisted.internet import defer
from twisted.internet.interfaces import IReactorTime
from twisted.logger import Logger
from twisted.web.server import Site
from zope.interface import implementer

from meshroute import __version__, events
from meshroute.errors import ConfigError
from meshroute.ha.epoch_starts import READ_EPOCH_STARTS, start_epoch
from meshroute.ha.held_ports import HeldPorts
from meshroute.ha.reporting import HANDOVER, TAKEOVER, HAEventLog
from meshroute.ha.status import LiveStatus, SharedStoreStatus
from meshroute.ha.store_lock import StoreLock
from meshroute.harules import shared_store as rules
from meshroute.harules.quorum import instance_name
from meshroute.harules.settings import BACKUP, PRIMARY, HASettings
from meshroute.interfaces import IHAInstanceView
from meshroute.router.listening import listening
from meshroute.router.service import HostedParts, RouterService, lock_data_dir
from meshroute.router.settings import RouterConfig
from meshroute.sessions.ha_view import HAView
from meshroute.store.writers import store_executor

log = Logger()

#: The name of the store in the data dir (as a router's).
STORE_FILE = "store.db"
#: Why an instance stops serving: its lock file was removed or replaced.
LOCK_LOST = "lock-lost"
#: ... a primary asked for the store back (allow-failback).
FAILBACK = "failback"


def instance_dir(config: RouterConfig) -> str:
    """
    The directory of the shared data dir that is this instance's own: its
    event log.
    """
    return os.path.join(config.data_dir, f"instance-{config.ha.role}")


def stored_epoch(path: str) -> int:
    """
    The newest epoch start C{store.db} at C{path} holds (0 for a store not
    created yet, or one created before epochs were kept there).
    """
    if not os.path.exists(path):
        return 0
    connection = sqlite3.connect(path)
    try:
        row = connection.execute(READ_EPOCH_STARTS).fetchone()
    except sqlite3.OperationalError:
        return 0  # no replication_state yet: the router creates it
    finally:
        connection.close()
    return max(row[0] or 0, row[1] or 0) if row else 0


def _write_epoch_start(connection, epoch: int, instance: str) -> None:
    start_epoch(connection, epoch, instance, alone=True)


@implementer(IHAInstanceView)
class SharedStoreInstance(MultiService):
    """
    One instance of a shared-store pair.

    @param stop_process: ends the instance's part of the process (the
        process ends with its last instance, L{meshroute.process}): a
        backup that handed the store back with C{restart-backup = false}
        stops, and so does an instance whose store cannot be opened.
    @param executor_factory: makes each active period's store executor
        given the guard to check before each commit batch; by default the
        one C{[store] writer} names (L{store_executor}).
    @param read_config: reads C{config}'s file again, for each active
        period's router (L{RouterService}'s C{read_config}).
    @param admin_site: makes the site of the instance's admin endpoint
        (C{[admin]}) given C{ha}, C{token} and C{reactor}, handed down by
        the composition layer (as for L{meshroute.ha.instance.HAInstance}).

    @ivar router: the L{RouterService} while serving, else None.
    """

    def __init__(self, config: RouterConfig, clock: IReactorTime, endpoints,
                 stop_process: Callable[[], None],
                 read_config: Callable[[], RouterConfig] | None = None,
                 admin_site: Callable[..., Site] | None = None,
                 executor_factory: Callable[[Callable[[], None]], object] | None = None) -> None:
        super().__init__()
        ha = config.ha
        self._executor_factory = executor_factory or (
            lambda guard: store_executor(config.store, clock, guard=guard))
        self.config = config
        self.ha: HASettings = ha
        self.name = config.name
        self.instance = instance_name(config.name, ha.role)
        self._peer_role = BACKUP if ha.role == PRIMARY else PRIMARY
        self._clock = clock
        # Its router's TCP ports are bound while it waits: a client that
        # fails over waits in the backlog instead of being refused.
        self._ports = HeldPorts(endpoints, clock, config)
        self._stop_process = stop_process
        self._read_config = read_config
        own = instance_dir(config)
        try:
            os.makedirs(own, exist_ok=True)
            self.lock = StoreLock(config.data_dir)
        except OSError as e:
            raise ConfigError(config.path, "router.data-dir",
                              f"cannot use {config.data_dir!r} as a shared-store data-dir: "
                              f"{e.strerror or e}") from None
        self.events = events.EventLog(own, config.name, clock, config.events,
                                      close_in_thread=True)
        self.ha_events = HAEventLog(self.events, clock, ha.group_name, ha.role)
        if config.admin is not None and admin_site is not None:
            listening(endpoints, config, "admin.endpoint", config.admin.endpoint,
                      admin_site(ha=self, token=config.admin.token,
                                 reactor=clock)).setServiceParent(self)
        self.router: RouterService | None = None
        self._router_lock = None
        self._watch = rules.HeartbeatWatch(ha.lease_timeout_ms / 1000)
        self._record = rules.LockRecord()
        self._state = rules.STARTING
        self._epoch = 0
        self._served_epoch = 0
        self._started_at: float | None = None
        self._next: object | None = None
        self._handing_back: defer.Deferred | None = None
        self._stopping = False

    # -- IHAInstanceView --------------------------------------------------------

    def ha_status(self) -> SharedStoreStatus:
        serving = self._state in (rules.ACTIVE, rules.HANDING_BACK)
        live = None
        if not serving:
            held = self._state == rules.LIVE_UNRESPONSIVE or self.lock.live_held_elsewhere()
            live = LiveStatus(held, self._record.owner, self._record.epoch,
                              self._watch.silent_for(self._clock.seconds()))
        return SharedStoreStatus(
            instance=self.instance, role=self.ha.role, state=self._state,
            epoch=self._epoch if serving else self._record.epoch,
            served_epoch=self._served_epoch, lock=self.lock.path,
            failback_requested=(self.lock.requesting if not serving
                                else self.lock.failback_requested()),
            live=live)

    def uptime_s(self) -> float:
        return 0.0 if self._started_at is None else self._clock.seconds() - self._started_at

    def reload_security(self) -> bool:
        return self.router is not None and self.router.reload_security()

    # -- the service ------------------------------------------------------------

    def privilegedStartService(self) -> None:
        self._ports.bind()
        super().privilegedStartService()

    def startService(self) -> None:
        self._ports.bind()
        self._started_at = self._clock.seconds()
        self.events.emit(events.ROUTER_STARTED, version=__version__, pid=os.getpid())
        log.info("shared-store instance {instance} starting (meshroute {version})",
                 instance=self.instance, version=__version__)
        super().startService()
        self._wait()

    @defer.inlineCallbacks
    def stopService(self):
        """
        Stop serving (the router's in-flight commits finish and the store
        closes), then release the lock: with C{failover-on-shutdown} the
        record still says live, so the waiting backup takes over at its
        next poll; without, it says paused, and the backup waits for the
        primary (rule 3).
        """
        self._stopping = True
        self._cancel_next()
        if self._handing_back is not None:
            yield self._handing_back
        if self.lock.live:
            yield self._stop_router()
            if not self.ha.failover_on_shutdown:
                self._write(dataclasses.replace(self._record, state=rules.PAUSED))
            self._release()
        yield defer.maybeDeferred(super().stopService)
        self._ports.close()
        self.lock.close()
        self.events.emit(events.ROUTER_STOPPED)
        self.events.close()

    def _cancel_next(self) -> None:
        if self._next is not None and self._next.active():
            self._next.cancel()
        self._next = None

    def _later(self, delay_ms: int, step: Callable[[], None]) -> None:
        self._next = self._clock.callLater(delay_ms / 1000, step)

    def _enter(self, state: str, reason: str | None = None) -> None:
        if state == self._state:
            return
        self._state = state
        epoch = self._epoch if state == rules.ACTIVE else self._record.epoch
        log.info("shared-store instance {instance}: {state} (epoch {epoch})",
                 instance=self.instance, state=state, epoch=epoch)
        if state == rules.LIVE_UNRESPONSIVE:
            log.warn("shared-store instance {instance}: the live holds the store's lock but "
                     "wrote no heartbeat for {seconds:.1f} s (lease-timeout): frozen or its "
                     "disk hangs; no failover while it holds the lock (docs/ha.md)",
                     instance=self.instance, seconds=self.ha.lease_timeout_ms / 1000)
        self.ha_events.state(state, epoch, reason)

    # -- waiting ----------------------------------------------------------------

    def _wait(self) -> None:
        """
        One poll: take the store if the rules allow, else note the live's
        heartbeat and poll again after C{lock-poll-interval}.
        """
        self._next = None
        if self._stopping:
            return
        now = self._clock.seconds()
        try:
            self._poll(now)
        except rules.BadLockRecord as e:
            log.error("shared-store instance {instance}: {path}: {error}; it stops (is the "
                      "data-dir another program's?)", instance=self.instance,
                      path=self.lock.path, error=e)
            self._stop_process()

    def _poll(self, now: float) -> None:
        if self.lock.try_live():
            self._record = self.lock.read()
            if rules.may_take(self.ha.role, self._record, self.lock.failback_requested()):
                self._activate()
                return
            self.lock.release_live()
            self._watch.forget()
            self._enter(rules.BACKUP_WAITING,
                        "paused" if self._record.state == rules.PAUSED else "failback-requested")
        else:
            if self.ha.role == PRIMARY:
                self.lock.request_failback()
            self._record = self.lock.read()
            self._watch.saw(self._record.heartbeat, now)
            self._enter(rules.LIVE_UNRESPONSIVE if self._watch.unresponsive(now)
                        else rules.BACKUP_WAITING)
        self._later(self.ha.lock_poll_interval_ms, self._wait)

    # -- activating -------------------------------------------------------------

    def _activate(self) -> None:
        """
        The live lock is this instance's: take the next epoch and serve.
        """
        try:
            self._router_lock = lock_data_dir(self.config)
        except ConfigError as e:
            log.error("shared-store instance {instance}: holds the store's lock but {error}; "
                      "waiting", instance=self.instance, error=e)
            self.lock.release_live()
            self._later(self.ha.lock_poll_interval_ms, self._wait)
            return
        was_watching = self._watch.silent_for(self._clock.seconds()) is not None
        last_heard = self._watch.changed_at
        handed_back = self.lock.requesting and self._record.owner == self._peer_role
        self.lock.withdraw_failback()
        store = os.path.join(self.config.data_dir, STORE_FILE)
        epoch = rules.next_epoch(self._record, stored_epoch(store))
        self._write(rules.LockRecord(rules.LIVE, self.ha.role, epoch,
                                     self._record.heartbeat + 1))
        self._watch.forget()
        self._epoch = self._served_epoch = epoch
        self._enter(rules.ACTIVE)
        self.ha_events.epoch(epoch, alone=True)
        if was_watching:
            # It waited for the other instance, which served: a failover,
            # handed over (the backup gave the store back at this primary's
            # request) or taken over (the live died or stopped).
            self.ha_events.failover(
                from_instance=self._peer_role, to_instance=self.ha.role, epoch=epoch,
                kind=HANDOVER if handed_back else TAKEOVER,
                last_heard=last_heard)
        self.router = RouterService(
            dataclasses.replace(self.config, admin=None), self._clock, self._ports,
            executor=self._executor_factory(self.lock.held),
            host=HostedParts(self.events, None, self.ha_status, self._stop_process), epoch=epoch,
            ha_view=self._client_view, read_config=self._read_config)
        self.router.setServiceParent(self)
        # The store carries the epoch too, for a lock file lost or replaced.
        self.router.store.executor.submit(_write_epoch_start, epoch, self.instance)
        self._later(self.ha.heartbeat_interval_ms, self._beat)

    def _client_view(self) -> HAView:
        return HAView(active=self._state == rules.ACTIVE and self.router is not None,
                      epoch=self._epoch, endpoints=self.ha.client_endpoints)

    def _write(self, record: rules.LockRecord, durable: bool = True) -> None:
        self._record = record
        self.lock.write(record, durable)

    # -- active -----------------------------------------------------------------

    def _beat(self) -> None:
        """
        Raise the heartbeat; stop serving if the lock is lost, hand the
        store back if a failback is due.
        """
        self._next = None
        try:
            self.lock.held()
        except Exception as e:
            log.error("shared-store instance {instance}: {error}; it stops serving",
                      instance=self.instance, error=e)
            self._hand_back(LOCK_LOST)
            return
        self._write(dataclasses.replace(self._record, heartbeat=self._record.heartbeat + 1),
                    durable=False)
        if rules.hands_back(self.ha.role, self.ha.allow_failback,
                            self.lock.failback_requested()):
            log.info("shared-store instance {instance}: the primary asks for the store back: "
                     "handing it back (allow-failback)", instance=self.instance)
            self._hand_back(FAILBACK)
            return
        self._later(self.ha.heartbeat_interval_ms, self._beat)

    def _hand_back(self, reason: str) -> None:
        """
        Stop serving: the router finishes its in-flight commits and closes
        the store; then release the lock and wait again, or, after a
        failback with C{restart-backup = false}, end the process.
        """
        self._enter(rules.HANDING_BACK, reason)
        self._handing_back = self._stop_router()
        self._handing_back.addCallback(lambda _: self._handed_back(reason))

    def _handed_back(self, reason: str) -> None:
        self._handing_back = None
        self._release()
        if reason == LOCK_LOST:
            # Its lock is on a file no longer at the lock's path: from now
            # on, the file that is.
            self.lock.close()
            self.lock = StoreLock(self.config.data_dir)
        if self._stopping:
            return
        if reason == FAILBACK and not self.ha.restart_backup:
            log.info("shared-store instance {instance}: handed the store back; it stops "
                     "(restart-backup = false)", instance=self.instance)
            self._clock.callLater(0, self._stop_process)
            return
        self._wait()

    def _stop_router(self) -> defer.Deferred:
        router, self.router = self.router, None
        if router is None:
            return defer.succeed(None)
        return defer.maybeDeferred(router.disownServiceParent)

    def _release(self) -> None:
        """
        The store is closed: let the other instance have it.
        """
        if self._router_lock is not None:
            self._router_lock.close()
            self._router_lock = None
        self.lock.release_live()
