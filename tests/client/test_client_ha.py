"""
The client of a high-availability pair (docs/ha.md, "Clients";
docs/client-protocol.md, "A router's place in a pair"): C{not-active}
sends it on to the next endpoint, the endpoints an C{OpenedWithTopology}
names join those it tries, an instance with an older epoch than one it
has seen is refused, and a failover to the new active recreates the
session there.

The first part scripts the routers frame by frame (L{scripted_router}):
what the client does with each answer, exactly.  The second runs the
router's real client listener (L{ClientFactory} over a real SQLite store,
behind the HA view an HA instance gives it) for both instances of a
pair, the backup's store a copy of the active's as replication makes it,
to show what a failover means for calls in flight and sends retried with
their duplicate ids.  Everything runs on a C{task.Clock}.
"""

import sqlite3
from dataclasses import replace

import msgpack
import pytest
import pytest_twisted
from twisted.internet.defer import fail
from twisted.internet.error import ConnectionRefusedError

from meshroute.client import (
    FAILOVER,
    SessionError,
    TransactionRolledBack,
    UnblockedError,
    connect_endpoint,
)
from meshroute.wire import client_frames as f
from meshroute.sessions.ha_view import HAView
from meshroute.sessions.native_listener import ClientFactory

from support.client_testing import (  # noqa: F401 (a fixture)
    failure_of,
    kept_clients,
    meshroute_command,
    result_of,
)
from support.fake_router import ROUTER, SESSION, CuttableEndpoint, FakeEngine, ScriptedEndpoint

OTHER_SESSION = "6" * 32
PRIMARY, BACKUP = "tcp:10.0.0.2:6001", "tcp:10.0.1.2:6001"
NOT_ACTIVE = f.Error(0, f.NOT_ACTIVE, "this router instance is not the active one")


class NamedEndpoint(ScriptedEndpoint):
    """
    A scripted endpoint that the client names by the endpoint string it
    stands for, as it names those it made from strings.
    """

    def __init__(self, name: str) -> None:
        super().__init__()
        self.name = name

    def __repr__(self) -> str:
        return self.name


@pytest.fixture
def pair():
    return NamedEndpoint(PRIMARY), NamedEndpoint(BACKUP)


def opened(epoch: int, session_id: str = SESSION, reattached: bool = False,
           endpoints=(PRIMARY, BACKUP)) -> f.OpenedWithTopology:
    return f.OpenedWithTopology(3, session_id, ROUTER, 60000, reattached, 0, epoch,
                                list(endpoints))


def answer(endpoint: ScriptedEndpoint, *frames):
    """
    Accept the latest attempt at C{endpoint}, read the client's Open, and
    answer with C{frames}.

    @return: the router's end.
    """
    end = endpoint.accept()
    end.frames()
    end.send(*frames)
    return end


def connected(clock, pair, epoch: int = 1, configured: int = 2, **options):
    """
    A client given the first C{configured} endpoints of C{pair}, connected
    through the first, whose router answered C{opened(epoch)}.

    @return: the client, its failure events, the router's end.
    """
    options.setdefault("client_id", "app")
    named = {repr(e): e for e in pair}
    d = connect_endpoint(clock, list(pair[:configured]), endpoint_from_string=named.__getitem__,
                         **options)
    router = answer(pair[0], opened(epoch))
    client = result_of(d)
    events = []
    client.add_failure_listener(events.append)
    return client, events, router


def test_the_client_offers_version_3(clock, pair):
    d = connect_endpoint(clock, pair[0], client_id="app")
    (open_,) = pair[0].accept().frames()
    assert open_.versions == [1, 2, 3, 4, 5, 6, 7, 8, 9]
    d.cancel()
    failure_of(d)


def test_not_active_at_the_first_open_moves_on_to_the_next_endpoint(clock, pair):
    primary, backup = pair
    d = connect_endpoint(clock, [primary, backup], client_id="app")
    refusing = answer(primary, NOT_ACTIVE)
    assert refusing.aborted and not d.called
    clock.advance(0)
    active = backup.accept()
    (open_,) = active.frames()
    assert open_.session_id == ""
    active.send(opened(2))
    client = result_of(d)
    assert client.endpoint == BACKUP


def test_not_active_everywhere_fails_connect_with_not_active(clock, pair):
    primary, backup = pair
    d = connect_endpoint(clock, [primary, backup], client_id="app")
    for endpoint in pair:
        clock.advance(0)
        assert answer(endpoint, NOT_ACTIVE).aborted
    error = failure_of(d)
    assert isinstance(error, SessionError) and error.code == f.NOT_ACTIVE
    assert (len(primary.attempts), len(backup.attempts)) == (1, 1)


def test_not_active_while_reconnecting_moves_on(clock, pair):
    primary, backup = pair
    client, events, router = connected(clock, pair, reconnect_attempts=-1)
    router.lose()
    clock.advance(2)
    answer(backup, NOT_ACTIVE)
    clock.advance(0)
    primary.refuse()
    assert events == []
    clock.advance(2)
    answer(backup, opened(2, OTHER_SESSION))
    assert events == [FAILOVER]
    assert (client.endpoint, client.session_id) == (BACKUP, OTHER_SESSION)


def test_opened_endpoints_join_the_rotation_after_the_configured_ones(clock, pair):
    primary, backup = pair
    client, events, router = connected(clock, pair, configured=1, reconnect_attempts=-1)
    assert client.endpoints == (PRIMARY, BACKUP)
    router.lose()
    clock.advance(2)
    assert len(backup.attempts) == 1
    answer(backup, opened(2, OTHER_SESSION, endpoints=(BACKUP, PRIMARY)))
    assert client.endpoints == (PRIMARY, BACKUP)
    assert events == [FAILOVER]


def test_an_older_router_adds_no_endpoints(clock, pair):
    primary, backup = pair
    named = {PRIMARY: primary, BACKUP: backup}
    d = connect_endpoint(clock, primary, client_id="app", endpoint_from_string=named.__getitem__)
    answer(primary, f.Opened(2, SESSION, ROUTER, 60000, False, 0))
    assert result_of(d).endpoints == (PRIMARY,)


def test_an_instance_with_an_older_epoch_is_refused(clock, pair):
    """
    The backup answers with an epoch below the one the client saw (a
    stale instance that still thinks it serves): the client closes that
    connection before writing anything there and moves on.
    """
    primary, backup = pair
    client, events, router = connected(clock, pair, epoch=5, reconnect_attempts=-1,
                                       confirmation_window_size=1 << 20)
    router.lose()
    clock.advance(2)
    stale = backup.accept()
    stale.frames()
    queued = client.send("q", b"x")
    stale.send(opened(4, OTHER_SESSION))
    assert stale.aborted and stale.frames() == []
    assert events == []
    clock.advance(0)
    again = answer(primary, opened(6, OTHER_SESSION))
    assert events == [FAILOVER]
    assert [frame.address for frame in again.of(f.Send)] == ["q"]
    assert not queued.called


def test_the_highest_epoch_seen_is_remembered(clock, pair):
    primary, backup = pair
    client, events, router = connected(clock, pair, reconnect_attempts=-1)
    router.lose()
    clock.advance(2)
    newer = answer(backup, opened(3, OTHER_SESSION))
    assert events == [FAILOVER]
    newer.lose()
    clock.advance(2)
    stale = answer(primary, opened(2, OTHER_SESSION))
    assert stale.aborted and events == [FAILOVER]


def attempt_times(clock, endpoint: ScriptedEndpoint) -> list[float]:
    """
    Record the clock's time of each attempt at C{endpoint} from now on.
    """
    times = []
    connect = endpoint.connect

    def timed(factory):
        times.append(clock.seconds())
        return connect(factory)

    endpoint.connect = timed
    return times


def test_a_closed_connection_fails_over_at_once_then_waits_per_round(clock, pair):
    """
    The active instance's connection closes (its process was killed): the
    first attempt goes to the next endpoint at once (Artemis' failover
    "straight away"); the backup, not active yet, refuses it, the primary
    is refused too, and the refused Open does not make the next round
    immediate: retry-interval, then retry-interval times the multiplier,
    before each round after it, as before.
    """
    primary, backup = pair
    client, events, router = connected(clock, pair, reconnect_attempts=-1,
                                       retry_interval_ms=1000, retry_interval_multiplier=2.0,
                                       max_retry_interval_ms=10000)
    to_backup, to_primary = attempt_times(clock, backup), attempt_times(clock, primary)
    clock.advance(5)  # the session served for longer than retry-interval
    router.lose()
    clock.advance(0)  # the next turn: no time at all
    assert to_backup == [5.0] and to_primary == []
    for _ in range(4):
        answer(backup, NOT_ACTIVE)
        clock.advance(0)
        primary.refuse()
        clock.advance(clock.getDelayedCalls()[0].getTime() - clock.seconds())
    assert to_backup == [5.0, 6.0, 8.0, 12.0, 20.0]
    assert to_primary == [5.0, 6.0, 8.0, 12.0]
    answer(backup, opened(2, OTHER_SESSION))
    assert events == [FAILOVER] and client.endpoint == BACKUP


def test_a_connection_closed_soon_after_open_waits_retry_interval(clock, pair):
    """
    A connection that served for less than retry-interval is followed by
    retry-interval, not an attempt at once: a router that drops sessions
    as soon as it opens them is not hammered.
    """
    primary, backup = pair
    client, events, router = connected(clock, pair, reconnect_attempts=-1,
                                       retry_interval_ms=1000)
    to_backup = attempt_times(clock, backup)
    clock.advance(0.5)
    router.lose()
    clock.advance(0.75)
    assert to_backup == []
    clock.advance(0.25)
    assert to_backup == [1.5]


def test_a_router_that_says_why_it_closes_is_not_retried_at_once(clock, pair):
    """
    The active instance steps down (or refuses the session for any other
    reason): it says why (Error with id 0) and closes; what it refused may
    be refused again, so the client waits retry-interval.
    """
    primary, backup = pair
    client, events, router = connected(clock, pair, reconnect_attempts=-1,
                                       retry_interval_ms=1000)
    to_backup = attempt_times(clock, backup)
    clock.advance(5)
    router.send(NOT_ACTIVE)
    router.lose()
    clock.advance(0.999)
    assert to_backup == []
    clock.advance(0.001)
    assert to_backup == [6.0]


def test_a_version_3_opened_must_tell_the_topology(clock, pair):
    d = connect_endpoint(clock, pair[0], client_id="app")
    router = pair[0].accept()
    router.frames()
    # Six fields and version 3: no router may send it (f.Opened refuses it).
    body = msgpack.packb([f.Opened.TYPE, 3, SESSION, ROUTER, 60000, False, 0])
    router.protocol.dataReceived(len(body).to_bytes(4, "big") + body)
    assert router.aborted
    assert failure_of(d).code == "protocol-error"


# -- a pair's real client listeners ----------------------------------------------------


class InstanceEndpoint(CuttableEndpoint):
    """
    The client endpoint of one instance, named by its endpoint string.
    """

    def __init__(self, server_factory, clock, name: str) -> None:
        super().__init__(server_factory, clock)
        self.name = name

    def __repr__(self) -> str:
        return self.name


class Instance:
    """
    One instance of a pair as its clients see it: the router's client
    listener over the instance's own store, behind the HA view the HA
    instance gives it.

    @ivar view: what the view answers now; a test changes it.
    """

    def __init__(self, path: str, clock, name: str, view: HAView) -> None:
        self.path = path
        self.view = view
        self.engine = FakeEngine(path, clock, auto=True)
        self.factory = ClientFactory(self.engine, clock, ha_view=lambda: self.view)
        self.net = InstanceEndpoint(self.factory, clock, name)

    def dies(self) -> None:
        """
        The process is gone: its connections cut, nobody listens.
        """
        self.net.cut()
        self.net.refusing = True

    def stored(self) -> list[str]:
        "The ids of the messages in its store."
        with sqlite3.connect(self.path) as db:
            return [row[0] for row in db.execute("SELECT msg_id FROM messages")]


class Address:
    """
    An endpoint string's place on the network: it reaches whichever
    instance runs there now, and refuses while none does.
    """

    def __init__(self, name: str) -> None:
        self.name = name
        self.instance: Instance | None = None

    def connect(self, factory):
        if self.instance is None:
            return fail(ConnectionRefusedError(f"nobody at {self.name}"))
        return self.instance.net.connect(factory)

    def __repr__(self) -> str:
        return self.name


def replicate(source: Instance, path: str) -> None:
    """
    Make C{path} a copy of C{source}'s store, as the backup holds it
    (SQLite's online backup: what is committed, WAL included).
    """
    with sqlite3.connect(source.path) as src, sqlite3.connect(path) as dst:
        src.backup(dst)


@pytest.fixture
def instances(tmp_path, clock):
    made = []

    def make(name: str, view: HAView, path: str | None = None) -> Instance:
        instance = Instance(path or str(tmp_path / f"{len(made)}.sqlite"), clock, name, view)
        made.append(instance)
        return instance

    yield make
    for instance in made:
        instance.engine.close()


def failing_over(clock, endpoint, endpoint_from_string, flush, **options):
    """
    Connect a client that reconnects forever, every 500 ms, through
    C{endpoint}; C{flush} lets the connection happen.

    @return: the client and the list of its failure events.
    """
    d = connect_endpoint(clock, endpoint, client_id="app", reconnect_attempts=-1,
                         retry_interval_ms=500, endpoint_from_string=endpoint_from_string,
                         **options)
    flush()
    client = result_of(d)
    events = []
    client.add_failure_listener(events.append)
    return client, events


def send_retrying(client, body: bytes, duplicate_id: str):
    """
    Send C{body} to C{q} with C{duplicate_id}, and send it again with the
    same id if the send fails with L{UnblockedError} (as an application
    does after a failover).

    @return: the send's Deferred (with the retry's result, if retried),
        and the list of retries made.
    """
    retried = []

    def retry(failure):
        failure.trap(UnblockedError)
        retried.append(client.send("q", body, duplicate_id=duplicate_id))
        return retried[-1]

    return client.send("q", body, duplicate_id=duplicate_id).addErrback(retry), retried


def flush(*instances: Instance) -> None:
    for instance in instances:
        instance.net.flush()


def test_a_send_retried_after_failover_is_enqueued_once(clock, tmp_path, instances):
    """
    The client knows only the primary; the primary's Opened names the
    backup.  The primary stores a send (with a duplicate id) and dies
    before its Confirm gets out; the backup holds the replicated copy.
    While the backup is not yet active it refuses (not-active); once it
    is, the client recreates its session there (FAILOVER), the send in
    flight fails with UnblockedError, and its retry with the same
    duplicate id is confirmed with the stored message's id, not enqueued
    again.  Then the old primary comes back still believing it serves
    epoch 1: the client refuses it, and nothing reaches it.
    """
    topology = (PRIMARY, BACKUP)
    addresses = {name: Address(name) for name in topology}
    primary = addresses[PRIMARY].instance = instances(PRIMARY, HAView(True, 1, topology))
    client, events = failing_over(clock, addresses[PRIMARY], addresses.__getitem__,
                                  primary.net.flush)
    assert client.endpoints == topology
    sent, retried = send_retrying(client, b"order 1", "order-1")
    clock.advance(0)  # the end of the turn: the send is written
    # The primary reads the Send and stores it; its Confirm never leaves.
    pump = primary.net.pumps[-1]
    pump.serverIO.bufferReceived(pump.clientIO.getOutBuffer())
    clock.advance(0)
    (stored,) = primary.stored()
    backup_path = str(tmp_path / "backup.sqlite")
    replicate(primary, backup_path)
    primary.dies()

    backup = addresses[BACKUP].instance = instances(BACKUP, HAView(False, 1, topology),
                                                    backup_path)
    clock.advance(0.5)  # the round after the primary: the backup, not active yet ...
    flush(backup)
    clock.advance(0)  # ... then the primary, refused
    assert (backup.net.attempts, primary.net.attempts) == (1, 2)
    assert events == [] and retried == []
    backup.view = HAView(True, 2, topology)  # it won the election
    clock.advance(0.5)
    flush(backup)
    assert events == [FAILOVER] and client.last_failover == "recreated"
    assert client.endpoint == BACKUP
    assert len(retried) == 1
    assert result_of(sent) == stored
    assert backup.stored() == [stored]
    assert backup.engine.store.queue_depths() == {"q": 1}

    # The backup dies too; the old primary is back, still at epoch 1.
    backup.dies()
    primary.net.refusing = False
    later = client.send("q", b"order 2", duplicate_id="order-2")
    clock.advance(0.5)
    flush(primary)
    assert primary.net.attempts == 3
    assert primary.stored() == [stored] and not later.called
    assert events == [FAILOVER]
    backup.net.refusing = False  # the backup is back, still active
    for _ in range(2):
        clock.advance(0.5)
        flush(primary, backup)
    assert events == [FAILOVER, FAILOVER]
    assert client.endpoint == BACKUP
    assert result_of(later) in backup.stored() and primary.stored() == [stored]


def test_a_transaction_with_work_at_failover_can_only_roll_back(clock, tmp_path, instances):
    """
    A transaction holding work when the client fails over to the other
    instance is rollback-only: its send fails with TransactionRolledBack,
    and so does commit(); nothing of it reaches the new active instance.
    """
    topology = (PRIMARY, BACKUP)
    primary = instances(PRIMARY, HAView(True, 1, topology))
    backup = instances(BACKUP, HAView(False, 1, topology))
    named = {PRIMARY: primary.net, BACKUP: backup.net}
    client, events = failing_over(clock, [primary.net, backup.net], named.__getitem__,
                                  primary.net.flush, transacted=True)
    sent = client.send("q", b"in the transaction")
    flush(primary)
    primary.dies()
    backup.view = HAView(True, 2, topology)
    clock.advance(0.5)
    flush(backup)
    assert events == [FAILOVER]
    assert isinstance(failure_of(sent), TransactionRolledBack)
    committed = client.commit()
    flush(backup)
    assert isinstance(failure_of(committed), TransactionRolledBack)
    assert backup.engine.store.queue_depths() == {}


# -- a pair of whole routers ----------------------------------------------------------


class Named:
    """
    A client endpoint named by the endpoint string it stands for.
    """

    def __init__(self, name: str, endpoint) -> None:
        self.name = name
        self.connect = endpoint.connect

    def __repr__(self) -> str:
        return self.name


def test_a_pair_of_routers_fails_its_client_over(tmp_path):
    """
    Two whole routers of one name (the in-memory mesh's), built with the
    HA view an HA instance gives them, stand for a pair's instances: the
    primary stores a send and dies before confirming it, the backup starts
    on a copy of its store (as replication leaves it) and refuses clients
    until it is active.  The client, given only the primary, learns the
    backup from the primary's Opened, fails over to it, and its retried
    send is confirmed with the stored message's id, enqueued once.
    """
    from meshroute.testing.memory_mesh import MemoryMesh
    from meshroute.sessions.settings import ClientListenerConfig
    from meshroute.router.service import RouterService

    mesh = MemoryMesh(tmp_path)
    topology = ("clients-primary", "clients-backup")
    views = {"primary": HAView(True, 1, topology), "backup": HAView(False, 1, topology)}

    def instance(role: str) -> RouterService:
        config = replace(mesh.config("router-b", listen=False), data_dir=str(tmp_path / role),
                         clients=ClientListenerConfig((f"clients-{role}",)))
        router = mesh.routers[role] = RouterService(
            config, mesh.clock, mesh.network.endpoints(role), executor=mesh.executor(role),
            ha_view=lambda: views[role])
        router.startService()
        mesh.network.flush()
        return router

    instance("primary")
    app = mesh.network.endpoints("app")
    primary = Named("clients-primary", app.client("clients-primary"))
    client, events = failing_over(mesh.clock, primary, lambda s: Named(s, app.client(s)),
                                  mesh.network.flush)
    assert client.endpoints == topology
    sent, retried = send_retrying(client, b"order 1", "order-1")
    mesh.clock.advance(0)  # the end of the turn: the send is written
    # The primary reads the Send and stores it; it dies before its
    # Confirm leaves.
    (connection,) = mesh.network.connections_of("app")
    connection.server_io.bufferReceived(connection.client_io.getOutBuffer())
    mesh.clock.advance(0)
    mesh.crash("primary")
    with sqlite3.connect(str(tmp_path / "primary" / "store.db")) as db:
        (stored,) = [row[0] for row in db.execute("SELECT msg_id FROM messages")]
        (tmp_path / "backup").mkdir()
        with sqlite3.connect(str(tmp_path / "backup" / "store.db")) as copy:
            db.backup(copy)

    backup = instance("backup")
    mesh.run(1.2)  # not active: each attempt there is refused, the session not made
    assert events == [] and retried == [] and backup.describe_sessions() == []
    views["backup"] = HAView(True, 2, topology)
    mesh.run(1)
    assert events == [FAILOVER] and client.endpoint == "clients-backup"
    assert len(retried) == 1 and result_of(sent) == stored
    with sqlite3.connect(str(tmp_path / "backup" / "store.db")) as db:
        assert [row[0] for row in db.execute("SELECT msg_id FROM messages")] == [stored]
    mesh.stop("backup")


# -- the command ------------------------------------------------------------------------


@pytest_twisted.ensureDeferred
async def test_send_command_finds_the_active_instance(tmp_path):
    """
    C{meshroute send -c E1 -c E2} where E1 is the instance that is not
    active: it moves on to E2 and sends there, instead of failing on E1's
    refusal.
    """
    from twisted.internet import reactor
    from twisted.internet.endpoints import serverFromString

    ports, engines = [], []
    try:
        for n, active in enumerate((False, True)):
            engine = FakeEngine(str(tmp_path / f"{n}.sqlite"), reactor, auto=True)
            engines.append(engine)
            factory = ClientFactory(engine, reactor,
                                    ha_view=lambda active=active: HAView(active, 1, ()))
            ports.append(await serverFromString(
                reactor, "tcp:0:interface=127.0.0.1").listen(factory))
        inactive, active = (f"tcp:127.0.0.1:{port.getHost().port}" for port in ports)
        out, err, status = await meshroute_command(
            "send", "-c", inactive, "-c", active, "--to", "orders", "--count", "10")
        assert (status, err) == (0, b"")
        assert out == b"10 messages to orders accepted\n"
        assert [e.store.queue_depths() for e in engines] == [{}, {"orders": 10}]
    finally:
        for port in ports:
            await port.stopListening()
        for engine in engines:
            engine.close()
