"""
An HA instance built from L{meshroute.ha.voters} against real witness
routers in the in-memory mesh: it wins an epoch, its peer is refused,
its lease holds while the witnesses answer and runs out when they are
partitioned away; with one witness down, three voters of four still
elect.
"""

from twisted.internet.defer import Deferred, succeed

from meshroute.testing.memory_mesh import SECRET, MemoryMesh
from meshroute import events
from meshroute.harules import quorum
from meshroute.harules.election import Defeat
from meshroute.harules.lease import LEASE_EXPIRED
from meshroute.ha.voters import Voters, WitnessConnection
from meshroute.link.context import RouterContext
from meshroute.link.registry import LinkRegistry
from meshroute.link.retry import RetrySchedule
from meshroute.link.rotation import EndpointRotation
from meshroute.link.settings import ConnectorSettings
from support.mesh_testing import events_of, mesh  # noqa: F401 (mesh: a fixture)

ROUTER = "router-b"
GROUP = "router-b"
PRIMARY = "router-b/primary"
BACKUP = "router-b/backup"
WITNESSES = ("router-a", "router-c")
LEASE = 3.0
INTERVAL = 0.5
ELECTION_TIMEOUT = 2.0


class Instance:
    """
    One instance of the pair C{router-b}: its own voter, its peer's voter
    asked through a callable (no replication connection exists), and a
    vote connection to each witness router of the mesh.
    """

    def __init__(self, mesh: MemoryMesh, tmp_path, own: quorum.Voter, peer: quorum.Voter):
        self.clock = mesh.clock
        role = own.name.split("/")[-1]
        self.event_log = events.EventLog(str(tmp_path / role), ROUTER, self.clock)
        context = RouterContext(name=ROUTER, clock=self.clock, events=self.event_log,
                                registry=LinkRegistry(), engine=None)
        client = mesh.network.endpoints(ROUTER).client
        witnesses = [
            WitnessConnection(
                context,
                ConnectorSettings(SECRET, witness, stage_valid_timeout_ms=1000),
                EndpointRotation([(witness, client(witness))]),
                RetrySchedule(200, 1.0, 200, -1), self.clock, GROUP, LEASE)
            for witness in WITNESSES
        ]
        self.name = own.name
        self.own = own
        self.peer = peer
        self.peer_answers = True
        self.voters = Voters(self.clock, own.name, {own.name: self.ask_own,
                                                    peer.name: self.ask_peer}, witnesses)
        self.outcomes = []
        self.voters.startService()

    def ask_own(self, question) -> Deferred:
        return succeed(answer(self.own, question, self.clock.seconds()))

    def ask_peer(self, question) -> Deferred:
        if not self.peer_answers:
            return Deferred()
        return succeed(answer(self.peer, question, self.clock.seconds()))

    def elect(self, epoch: int) -> None:
        """
        Ask for C{epoch}, as an instance whose peer is in sync (neither
        has data yet).
        """
        request = quorum.VoteRequest(self.name, self.name, epoch, quorum.ORIGIN, alone=False)
        self.voters.elect(request, ELECTION_TIMEOUT, self.outcomes.append,
                          self.outcomes.append)

    def hold_lease(self, epoch: int) -> None:
        self.voters.hold_lease(
            lambda: (quorum.LogPosition(epoch, 0), quorum.LogPosition(epoch, 0)),
            INTERVAL, LEASE, self.outcomes.append)

    def stop(self) -> None:
        self.voters.stopService()
        self.event_log.close()


def answer(voter: quorum.Voter, question, now: float):
    """
    C{voter}'s answer to a vote request or heartbeat.
    """
    if isinstance(question, quorum.VoteRequest):
        return voter.request(question, now)
    return voter.heartbeat(question, now)


def pair(mesh: MemoryMesh, tmp_path) -> tuple[Instance, Instance]:
    """
    Both instances of router-b, each asking the other's voter directly.
    """
    now = mesh.clock.seconds()
    primary_voter = quorum.Voter(PRIMARY, LEASE, quorum.VoterRecord(), now)
    backup_voter = quorum.Voter(BACKUP, LEASE, quorum.VoterRecord(), now)
    return (Instance(mesh, tmp_path, primary_voter, backup_voter),
            Instance(mesh, tmp_path, backup_voter, primary_voter))


def test_an_instance_wins_an_epoch_holds_its_lease_and_loses_it_cut_off(mesh, tmp_path):  # noqa: F811
    for witness in WITNESSES:
        mesh.add(witness)
    primary, backup = pair(mesh, tmp_path)
    mesh.run(0.1)  # both vote connections of both instances in voting
    assert primary.voters.names == {PRIMARY, BACKUP, *WITNESSES}

    primary.elect(1)
    mesh.network.flush()
    assert primary.outcomes == [1]
    for witness in WITNESSES:
        (vote,) = events_of(mesh.routers[witness], "ha.vote")
        assert (vote["candidate"], vote["epoch"], vote["granted"]) == (PRIMARY, 1, True)
    primary.hold_lease(1)

    # The pair loses each other (the callables stop answering), the
    # witnesses still hear the active: its lease holds, and the backup,
    # which stopped hearing it, is refused the next epoch by both.
    primary.peer_answers = backup.peer_answers = False
    mesh.run(LEASE + 1.0)
    backup.elect(2)
    mesh.network.flush()
    (defeat,) = backup.outcomes  # its own voter granted, the primary's was silent
    assert defeat == Defeat("refused", {"router-a": quorum.ACTIVE_ALIVE,
                                        "router-c": quorum.ACTIVE_ALIVE}, 2)
    assert backup.voters.names == primary.voters.names
    assert primary.outcomes == [1]

    # Ten more seconds of heartbeats, each answered: the lease holds.
    mesh.run(10.0)
    assert primary.outcomes == [1]
    for witness in WITNESSES:
        assert events_of(mesh.routers[witness], "ha.heartbeat-refused") == []

    # Both witnesses cut off too (the pair still is; the backup's voter,
    # which granted itself epoch 2, would refuse the active anyway): only
    # the active's own voter answers, no majority of four; the lease runs
    # out at most lease-timeout after the cut, when the last heartbeat the
    # witnesses answered was sent.
    for witness in WITNESSES:
        mesh.partition(witness)
    mesh.run(LEASE - INTERVAL)
    assert primary.outcomes == [1]
    mesh.run(INTERVAL)
    assert primary.outcomes == [1, LEASE_EXPIRED]
    primary.stop()
    backup.stop()


def test_with_one_witness_down_three_voters_of_four_elect(mesh, tmp_path):  # noqa: F811
    mesh.add("router-a")  # router-c never starts
    primary, backup = pair(mesh, tmp_path)
    mesh.run(1.0)  # router-c refused, and dialled again, all along
    # The idle vote connection to router-a closed just now (stage-valid-
    # timeout): the request waits for the next one.
    primary.elect(1)
    mesh.network.flush()
    assert primary.outcomes == []
    mesh.run(0.5)
    assert primary.outcomes == [1]
    (vote,) = events_of(mesh.routers["router-a"], "ha.vote")
    assert vote["granted"]
    assert backup.peer.record.granted_to == PRIMARY  # the peer's grant came through the callable
    primary.stop()
    backup.stop()
