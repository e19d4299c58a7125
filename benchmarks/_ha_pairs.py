"""
The HA pairs that benchmarks/ha.py measures, as real processes: two
C{twistd -n meshroute} instances of C{router-b} with C{[ha]} (and the
routers they need) on free 127.0.0.1 ports, replicating
(L{ReplicatedPair}, with a witness) or sharing one data dir
(L{SharedStorePair}); a pair is I{settled} once one instance serves and
the other is its ready backup.  compare.py takes C{HA_CONFIG} for its
pair.
"""

import abc
import os
import signal

from _harness import DEADLINE_S, Router, free_port, poll
from twisted.internet import defer

#: The pair's router name; the witness is another router of the mesh.
PAIR_NAME = "router-b"
WITNESS_NAME = "router-w"
#: A router's own data dir, relative to its directory.
DATA_DIR = "data"

ROUTER_CONFIG = """\
[router]
name = "{router}"
data-dir = "{data_dir}"

[clients.listener]
endpoint = "tcp:{client_port}:interface=127.0.0.1"

[store]
sync = "full"

[admin]
endpoint = "tcp:{admin_port}:interface=127.0.0.1"
"""
WITNESS_CONFIG = ROUTER_CONFIG + """
[routing.listener]
endpoint = "tcp:{routing_port}:interface=127.0.0.1"
password-file = "secret"
"""
#: An instance's [ha] sections (also compare.py's pair).
HA_CONFIG = """
[ha]
role = "{role}"
heartbeat-interval = {heartbeat}
lease-timeout = {lease}
replica-sync = "{replica_sync}"
allow-failback = false
client-endpoints = [{client_endpoints}]

[ha.replication]
listener = "tcp:{replication_port}:interface=127.0.0.1"
peer = "tcp:127.0.0.1:{peer_replication_port}"
password-file = "secret"

[[ha.witness]]
router = "{witness}"
endpoint = "tcp:127.0.0.1:{witness_port}"
"""
INSTANCE_CONFIG = ROUTER_CONFIG + HA_CONFIG
#: A shared-store instance: its data dir is the pair's; allow-failback,
#: restart-backup and failover-on-shutdown keep their defaults (true).
SHARED_STORE_CONFIG = ROUTER_CONFIG + """
[ha]
role = "{role}"
policy = "shared-store"
heartbeat-interval = {heartbeat}
lease-timeout = {lease}
lock-poll-interval = {lock_poll}
client-endpoints = [{client_endpoints}]
"""
ROLES = ("primary", "backup")
REPLICATION, SHARED_STORE = "replication", "shared-store"


class NotSettled(RuntimeError):
    """
    The pair did not reach an active instance with its backup ready.
    """


class Pair(abc.ABC):
    """
    The two instances of C{router-b} (primary and backup, each C{twistd -n
    meshroute} with C{[ha]}) and the routers they need, on free ports: a
    L{ReplicatedPair} or a L{SharedStorePair}.

    @cvar settled_states: the states of C{GET /api/v1/ha}, the active's
        and the backup's, of a settled pair.
    @cvar active_role: the role of a settled pair's active, or None when
        either may be.
    @cvar failover_kinds: the signals to the active that it fails over on.
    """

    policy: str
    settled_states: tuple[str, str]
    active_role: str | None = None
    failover_kinds: tuple[str, ...]

    def __init__(self, reactor, workdir: str, helpers: tuple[Router, ...] = ()) -> None:
        self._reactor = reactor
        self._helpers = helpers
        self.instances = [Router(reactor, workdir, role, "") for role in ROLES]

    @property
    def client_endpoints(self) -> str:
        """
        The instances' client endpoints, as C{[ha] client-endpoints} lists
        them.
        """
        return ", ".join(f'"{i.client_endpoint}"' for i in self.instances)

    @abc.abstractmethod
    def events_dir(self, instance: Router) -> str:
        """
        The directory whose event log is C{instance}'s.
        """

    @staticmethod
    @abc.abstractmethod
    def bounds(options) -> dict[str, float]:
        """
        The issue's bound on the first confirmed send after each kind of
        signal, in seconds.
        """

    async def start(self) -> None:
        for router in (*self._helpers, *self.instances):
            await router.start()
        await self.settled()

    async def settled(self, deadline: float = DEADLINE_S) -> tuple[Router, Router]:
        """
        Wait until one instance is in the active's settled state and
        serving, the other in the backup's; return (active, backup).
        """
        states: list = []
        active_state, backup_state = self.settled_states

        async def roles():
            answers = [await i.get("router") for i in self.instances]
            states[:] = [(a["ha"]["state"], a["serving"]) for a in answers]
            return states

        def settled(states) -> bool:
            return (sorted(states) == sorted([(active_state, True), (backup_state, False)])
                    and (self.active_role is None
                         or states[ROLES.index(self.active_role)][0] == active_state))

        try:
            await poll(self._reactor, "", roles, settled, deadline)
        except RuntimeError:
            shown = [state for state, _ in states] or "unknown"
            raise NotSettled(f"after {deadline:g} s the instances ({', '.join(ROLES)}) are "
                             f"{shown}, not {active_state} (serving) and {backup_state}"
                             + (f", the {self.active_role} active" if self.active_role else "")
                             ) from None
        active = 0 if states[0][0] == active_state else 1
        return self.instances[active], self.instances[1 - active]

    async def stop(self) -> None:
        """
        Stop every router: SIGTERM (after SIGCONT, for a frozen one), and
        SIGKILL if it does not go in time.
        """
        for router in (*self.instances, *self._helpers):
            if router.child is None:
                continue
            if not router.child.ended.called:
                router.child.process.signalProcess(signal.SIGCONT)
            try:
                await router.child.stop(self._reactor)
            except defer.TimeoutError:
                await router.child.kill()


class ReplicatedPair(Pair):
    """
    A pair replicating over the network (each instance its own data
    dir), with a witness router, C{allow-failback = false}: an instance
    that comes back stays the backup.
    """

    policy = REPLICATION
    settled_states = ("active-replicated", "backup-in-sync")
    failover_kinds = ("KILL", "STOP", "TERM")

    def __init__(self, reactor, workdir: str, options) -> None:
        witness_port = free_port()
        witness = Router(reactor, workdir, "witness", WITNESS_CONFIG, router=WITNESS_NAME,
                         data_dir=DATA_DIR, routing_port=witness_port)
        super().__init__(reactor, workdir, (witness,))
        replication = [free_port(), free_port()]
        for i, (instance, role) in enumerate(zip(self.instances, ROLES)):
            instance.configure(
                INSTANCE_CONFIG, router=PAIR_NAME, data_dir=DATA_DIR, role=role,
                heartbeat=options["heartbeat-interval"], lease=options["lease-timeout"],
                replica_sync=options["replica-sync"], client_endpoints=self.client_endpoints,
                replication_port=replication[i], peer_replication_port=replication[1 - i],
                witness=WITNESS_NAME, witness_port=witness_port)

    def events_dir(self, instance: Router) -> str:
        return os.path.join(instance.workdir, DATA_DIR)

    @staticmethod
    def bounds(options) -> dict[str, float]:
        # Issue 9's: the lease runs out, an election, a second.
        lost = (options["lease-timeout"] + 2 * options["heartbeat-interval"]) / 1000 + 1
        return {"KILL": lost, "STOP": lost, "TERM": 1.0}


class SharedStorePair(Pair):
    """
    A shared-store pair: both instances on one data dir (C{shared} in
    the pair's directory), each with its own client listener and admin
    endpoint, nothing else; the primary takes the store back when it
    returns (C{allow-failback}).
    """

    policy = SHARED_STORE
    settled_states = ("active", "backup-waiting")
    active_role = "primary"
    #: A frozen live keeps its lock: no failover on SIGSTOP (as in Artemis).
    failover_kinds = ("KILL", "TERM")

    def __init__(self, reactor, workdir: str, options) -> None:
        super().__init__(reactor, workdir)
        self.data_dir = os.path.join(workdir, "shared")
        for instance, role in zip(self.instances, ROLES):
            instance.configure(
                SHARED_STORE_CONFIG, router=PAIR_NAME, data_dir=self.data_dir, role=role,
                heartbeat=options["heartbeat-interval"], lease=options["lease-timeout"],
                lock_poll=options["lock-poll-interval"], client_endpoints=self.client_endpoints)

    def events_dir(self, instance: Router) -> str:
        # Each instance's own event log, in the shared data dir.
        return os.path.join(self.data_dir, f"instance-{instance.name}")

    @staticmethod
    def bounds(options) -> dict[str, float]:
        # Issue 28's: the first confirmed send at the client's defaults,
        # and failover-on-shutdown.
        return {"KILL": 2.0, "TERM": 1.0}


PAIRS = {REPLICATION: ReplicatedPair, SHARED_STORE: SharedStorePair}


