"""
The HA settings of one instance, and the rules that make them usable.

L{HASettings} is what C{[ha]}, C{[ha.replication]} and C{[[ha.witness]]}
load into (docs/ha.md; the keys are the issue's, durations in
milliseconds in attributes ending in C{_ms}, as in every component's
settings).  The TOML loader converts the values (types, ranges,
durations, endpoints, the password file) and then calls L{errors} and
L{warnings} (through L{meshroute.router.settings}), which judge the
combination: an error names its dotted key and stops the router; a
warning is printed by C{meshroute check-config} and logged at start.
"""

import ipaddress
import re
from dataclasses import dataclass, field

from meshroute.errors import Problem
from meshroute.harules.quorum import majority
from meshroute.wire.frames import MAX_LEASE_TIMEOUT_MS

PRIMARY = "primary"
BACKUP = "backup"
ROLES = (PRIMARY, BACKUP)
#: C{[ha] policy}: the instances replicate C{store.db} over the network, or
#: share one data dir and take turns by its lock file (docs/ha.md).
REPLICATION = "replication"
SHARED_STORE = "shared-store"
POLICIES = (REPLICATION, SHARED_STORE)
REPLICA_SYNCS = ("full", "normal")

_NAME = re.compile(r"[A-Za-z0-9._-]{1,64}")


@dataclass(frozen=True)
class ReplicationSettings:
    """
    C{[ha.replication]}: how the two instances of a pair reach each other.

    @ivar listener: this instance's replication listener (server endpoint).
    @ivar peer: the other instance's replication listener (client
        endpoint).
    @ivar password_file: the shared secret, used with the same
        challenge-response as routing links.
    @ivar secret: the contents of C{password_file} without trailing line
        ends, kept out of C{repr} (as a connector's is,
        L{meshroute.link.settings}); empty only where nothing is dialled or
        answered.
    """

    listener: str
    peer: str
    password_file: str
    secret: bytes = field(default=b"", repr=False)


@dataclass(frozen=True)
class WitnessSettings:
    """
    One C{[[ha.witness]]}: another mesh router that votes for the group.

    @ivar router: its router name.
    @ivar endpoint: its routing listener (votes are not routing links).
    """

    router: str
    endpoint: str


@dataclass(frozen=True)
class HASettings:
    """
    C{[ha]}: one instance's part in a primary/backup pair.

    Defaults are the issue's (and Artemis' where it has them).

    @ivar policy: L{REPLICATION} or L{SHARED_STORE}.
    @ivar replication: C{[ha.replication]}; None for a shared-store pair,
        which replicates nothing.
    @ivar lock_poll_interval_ms: how often a shared-store instance that
        waits tries the store's lock (and reads the live's heartbeat).
    @ivar client_endpoints: the client endpoint strings of the pair (the
        primary's client listener, then the backup's; the same list on
        both instances), which clients learn in C{Opened}; empty when not
        configured.
    """

    role: str
    group_name: str
    replication: ReplicationSettings | None = None
    witnesses: tuple[WitnessSettings, ...] = ()
    heartbeat_interval_ms: int = 500
    lease_timeout_ms: int = 3000
    replication_timeout_ms: int = 5000
    replica_sync: str = "full"
    allow_failback: bool = True
    restart_backup: bool = True
    failover_on_shutdown: bool = True
    initial_replication_sync_timeout_ms: int = 30000
    max_saved_replicated_journals_size: int = 2
    client_endpoints: tuple[str, ...] = ()
    policy: str = REPLICATION
    lock_poll_interval_ms: int = 100

    @property
    def voters(self) -> int:
        """
        How many voters the group has: the pair and its witnesses.
        """
        return 2 + len(self.witnesses)


def errors(settings: HASettings, router_name: str) -> list[Problem]:
    """
    The settings that cannot work, each naming its key; empty when the
    settings are usable.

    @param router_name: C{router.name}, which a witness must not carry.
    """
    found: list[Problem] = []

    def fail(key: str, message: str) -> None:
        found.append(Problem(f"ha.{key}", message))

    if settings.role not in ROLES:
        fail("role", f'must be "primary" or "backup", got {settings.role!r}')
    if settings.policy == SHARED_STORE:
        # Nothing is replicated and nothing voted on: the lock decides.
        if settings.replication is not None:
            fail("replication", "a shared-store pair replicates nothing: remove "
                                "[ha.replication] (both instances name one data-dir)")
        if settings.witnesses:
            fail("witness", "a shared-store pair takes no votes (the store's lock decides "
                            "who serves): remove [[ha.witness]]")
    elif settings.replication is None:
        fail("replication", "required section [ha.replication] is missing "
                            '(policy = "replication")')
    if not _NAME.fullmatch(settings.group_name):
        fail("group-name", f"must match [A-Za-z0-9._-]{{1,64}}, got {settings.group_name!r}")
    if settings.replica_sync not in REPLICA_SYNCS:
        fail("replica-sync", f'must be "full" or "normal", got {settings.replica_sync!r}')
    heartbeat = settings.heartbeat_interval_ms
    if heartbeat < 1:
        fail("heartbeat-interval", f"must be at least 1 ms, got {heartbeat} ms")
    # Two heartbeats may be lost or late before the lease is in danger;
    # with less, one slow round trip fences a healthy active.
    for key, value in (("lease-timeout", settings.lease_timeout_ms),
                       ("replication-timeout", settings.replication_timeout_ms)):
        if value <= 2 * heartbeat:
            fail(key, f"must exceed 2 × heartbeat-interval ({2 * heartbeat} ms), got {value} ms")
        elif value > MAX_LEASE_TIMEOUT_MS:
            fail(key, f"must be at most {MAX_LEASE_TIMEOUT_MS} ms (1 h), got {value} ms")
    if settings.initial_replication_sync_timeout_ms < 1:
        fail("initial-replication-sync-timeout", "must be at least 1 ms, got "
             f"{settings.initial_replication_sync_timeout_ms} ms")
    if settings.max_saved_replicated_journals_size < 0:
        fail("max-saved-replicated-journals-size", "must not be negative, got "
             f"{settings.max_saved_replicated_journals_size}")
    seen: set[str] = set()
    for index, witness in enumerate(settings.witnesses):
        key = f"witness[{index}].router"
        if witness.router == router_name:
            fail(key, f"{witness.router!r} is this router: an instance of the pair "
                      "cannot also be its witness")
        elif witness.router in seen:
            fail(key, f"{witness.router!r} is listed twice: each witness has one vote")
        seen.add(witness.router)
    return found


def warnings(settings: HASettings) -> list[Problem]:
    """
    Settings that work but probably not as the operator hopes.
    """
    found: list[Problem] = []
    if settings.policy == SHARED_STORE:
        return found
    if not settings.witnesses:
        found.append(Problem(
            "ha.witness",
            "no witnesses: a majority of 2 voters is both instances, so neither can "
            "take over from the other when it is lost (no automatic failover), and "
            "the active stops when its peer is lost",
        ))
    elif settings.voters % 2 == 0:
        found.append(Problem(
            "ha.witness",
            f"{settings.voters} voters need a majority of {majority(settings.voters)}, "
            f"which tolerates no more lost voters than {settings.voters - 1} would: "
            "add or remove a witness",
        ))
    if settings.replica_sync == "normal":
        found.append(Problem(
            "ha.replica-sync",
            '"normal": the backup answers before it fsyncs, so a confirmed send is '
            "lost if the active dies and the backup's host crashes before its disk "
            "caught up",
        ))
    return found


@dataclass(frozen=True)
class InstanceSettings:
    """
    One instance's configuration as the pair check reads it.

    @ivar path: its configuration file, named in what is reported.
    @ivar router: its C{router.name}.
    @ivar data_dir: its C{router.data-dir}, as an absolute path (the
        instances of a shared-store pair name the same one).
    """

    path: str
    router: str
    ha: HASettings
    data_dir: str = ""


@dataclass(frozen=True)
class PairProblem:
    """
    A key on which two configurations of one pair disagree (or a router
    name with more than two instances).
    """

    paths: tuple[str, ...]
    key: str
    message: str


def pair_problems(instances: list[InstanceSettings]) -> list[PairProblem]:
    """
    What the configurations of one pair must agree on, checked across the
    given files before anything starts (C{meshroute check-config FILE
    FILE}): a mistyped C{group-name} makes two groups of one router, which
    the instances then refuse (C{group-mismatch}) rather than pair.

    Two files are of one pair when they carry one router name, or when
    one's C{ha.replication.peer} reaches the other's listener, or when
    both are shared-store instances of one data dir (then the router
    names are what disagrees).
    """
    found: list[PairProblem] = []
    by_router: dict[str, list[InstanceSettings]] = {}
    for instance in instances:
        by_router.setdefault(instance.router, []).append(instance)
    for router, group in by_router.items():
        if len(group) > 2:
            found.append(PairProblem(
                tuple(i.path for i in group), "router.name",
                f"{len(group)} HA instances of router {router!r}: a pair has two"))
    for index, a in enumerate(instances):
        for b in instances[index + 1:]:
            if (a.router == b.router or _replicates_to(a, b) or _replicates_to(b, a)
                    or _share_store(a, b)):
                found.extend(_disagreements(a, b))
    return found


def _replicates_to(one: InstanceSettings, other: InstanceSettings) -> bool:
    """
    Whether C{one}'s replication peer reaches C{other}'s replication
    listener (both of the replication policy).
    """
    return (one.ha.replication is not None and other.ha.replication is not None
            and endpoint_reaches(one.ha.replication.peer, other.ha.replication.listener))


def _share_store(a: InstanceSettings, b: InstanceSettings) -> bool:
    """
    Whether C{a} and C{b} are shared-store instances of one data dir.
    """
    return a.ha.policy == b.ha.policy == SHARED_STORE and a.data_dir == b.data_dir != ""


def _disagreements(a: InstanceSettings, b: InstanceSettings) -> list[PairProblem]:
    found: list[PairProblem] = []

    def differ(key: str, one, other, why: str) -> None:
        if one != other:
            found.append(PairProblem((a.path, b.path), key,
                                     f"{one!r} in {a.path}, {other!r} in {b.path}: {why}"))

    differ("router.name", a.router, b.router,
           "both instances of a pair carry the router's name")
    differ("ha.group-name", a.ha.group_name, b.ha.group_name,
           "the instances would refuse each other (group-mismatch)")
    if a.ha.role == b.ha.role:
        found.append(PairProblem((a.path, b.path), "ha.role",
                                 f"both are {a.ha.role!r}: one is the primary, the other "
                                 "the backup"))
    differ("ha.policy", a.ha.policy, b.ha.policy,
           "one instance would wait for a lock the other never takes, or the reverse")
    if a.ha.policy == b.ha.policy == SHARED_STORE:
        differ("router.data-dir", a.data_dir, b.data_dir,
               "the instances of a shared-store pair share one data-dir")
    else:
        found.extend(_replication_disagreements(a, b))
    differ("ha.lease-timeout", a.ha.lease_timeout_ms, b.ha.lease_timeout_ms,
           "the voters wait out one lease for the group" if a.ha.policy == REPLICATION
           else "the waiting instance calls the live unresponsive after one lease")
    differ("ha.client-endpoints", list(a.ha.client_endpoints), list(b.ha.client_endpoints),
           "clients learn the list from whichever instance serves")
    return found


def _replication_disagreements(a: InstanceSettings, b: InstanceSettings) -> list[PairProblem]:
    """
    What the two instances of a replicated pair must agree on besides
    what every pair must.
    """
    found: list[PairProblem] = []
    if a.ha.replication is None or b.ha.replication is None:
        return found
    for one, other in ((a, b), (b, a)):
        if not endpoint_reaches(one.ha.replication.peer, other.ha.replication.listener):
            found.append(PairProblem(
                (one.path, other.path), "ha.replication.peer",
                f"{one.ha.replication.peer!r} does not reach the other instance's "
                f"listener {other.ha.replication.listener!r}"))
    if a.ha.replication.secret != b.ha.replication.secret:
        found.append(PairProblem((a.path, b.path), "ha.replication.password-file",
                                 "the two files hold different secrets: each instance "
                                 "would refuse the other's proof (auth-failed)"))
    witnesses = (sorted(w.router for w in a.ha.witnesses),
                 sorted(w.router for w in b.ha.witnesses))
    if witnesses[0] != witnesses[1]:
        found.append(PairProblem(
            (a.path, b.path), "ha.witness",
            f"{witnesses[0]!r} in {a.path}, {witnesses[1]!r} in {b.path}: the voters must "
            "be the same set, or two majorities need not share a voter"))
    return found


#: Endpoint arguments that name a host or an interface.
_WILDCARDS = ("", "0.0.0.0", "::")
#: Where an endpoint string's arguments end (a colon may be escaped: "\\:").
_UNESCAPED_COLON = re.compile(r"(?<!\\):")


def endpoint_reaches(client: str, server: str) -> bool:
    """
    Whether client endpoint C{client} plausibly reaches server endpoint
    C{server}: the same kind, the same port (or UNIX path), and the same
    address where the server listens on one literal address and the
    client names one.  Names are not resolved: a host name is taken to
    reach any interface.
    """
    client_kind, client_host, client_port = _address(client, server=False)
    server_kind, server_host, server_port = _address(server, server=True)
    if client_kind is None or server_kind is None:
        return True  # a kind this check does not read: not reported
    if (client_kind == "unix") != (server_kind == "unix") or client_port != server_port:
        return False
    literal = _is_literal(client_host) and _is_literal(server_host)
    return not literal or server_host in _WILDCARDS or client_host == server_host


def listeners_clash(one: str, other: str) -> bool:
    """
    Whether server endpoints C{one} and C{other} would listen on one
    address, so that the second to bind fails: the same kind, the same
    port (never 0, any free port) or UNIX path, and interfaces that
    overlap (either listens on every interface, or both on one literal
    address).  Names are not resolved: two different names never clash.
    """
    one_kind, one_host, one_port = _address(one, server=True)
    other_kind, other_host, other_port = _address(other, server=True)
    if one_kind is None or one_kind != other_kind or one_port != other_port:
        return False
    if one_kind == "unix":
        return True
    return one_port != "0" and (one_host in _WILDCARDS or other_host in _WILDCARDS
                                or one_host == other_host)


def _address(endpoint: str, server: bool) -> tuple[str | None, str, str]:
    """
    (kind, host, port) of a tcp/ssl/tls/unix endpoint string; kind None
    for another kind.
    """
    parts = [part.replace("\\:", ":") for part in _UNESCAPED_COLON.split(endpoint)]
    kind = {"tcp": "tcp", "tcp6": "tcp", "ssl": "tcp", "tls": "tcp", "unix": "unix"}.get(
        parts[0])
    if kind is None:
        return None, "", ""
    positional = [part for part in parts[1:] if "=" not in part]
    named = dict(part.split("=", 1) for part in parts[1:] if "=" in part)
    if kind == "unix":
        return kind, "", named.get("address", named.get("path", ":".join(parts[1:2])))
    if server:
        port = named.get("port", positional[0] if positional else "")
        return kind, named.get("interface", ""), port
    host = named.get("host", positional[0] if positional else "")
    port = named.get("port", positional[1] if len(positional) > 1 else "")
    return kind, host, port


def _is_literal(host: str) -> bool:
    """
    Whether C{host} is an IP address (or a wildcard), not a name.
    """
    if host in _WILDCARDS:
        return True
    try:
        ipaddress.ip_address(host.strip("[]"))
    except ValueError:
        return False
    return True
