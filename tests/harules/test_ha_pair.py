"""
The pure HA pieces working together: a pair and a witness, simulated.

Each instance runs the real L{meshroute.harules.role} machine,
elections (L{meshroute.harules.election}), a lease
(L{meshroute.harules.lease}) and its own L{Voter}; the witness is a L{Voter}.  This harness stands in for what the
router will do once wired (docs/ha.md, "Status"): messages are function
calls delivered on the receiver's clock, replication is a flag that
catches up at once, and an instance's position moves only with epochs.

Every process has its own L{task.Clock}, all advanced together, so that
freezing one (SIGSTOP) stops its timers while time goes on, and thawing
it runs its overdue timers as a real reactor would.  After every step the
harness checks the safety invariant: never two instances that serve and
hold a lease at the same moment.
"""

import pytest
from twisted.internet.task import Clock

from meshroute.harules.election import start_election
from meshroute.harules.lease import SUPERSEDED, LeaseCore, hold_lease
from meshroute.harules.quorum import (
    ORIGIN,
    Heartbeat,
    LogPosition,
    StartDecision,
    Tally,
    Voter,
    VoteRequest,
    VoterRecord,
    decide_start,
)
from meshroute.harules.role import (
    ACTIVE_ALONE,
    ACTIVE_REPLICATED,
    BACKUP_IN_SYNC,
    FENCED,
    STARTING,
    start_role,
)
from meshroute.harules.settings import HASettings, ReplicationSettings, WitnessSettings

REPLICATION = ReplicationSettings("tcp:0", "tcp:127.0.0.1:1", "secrets/mesh")
WITNESS = WitnessSettings("w", "tcp:127.0.0.1:7001")
LEASE = 3.0
HEARTBEAT = 0.5
STEP = 0.05
ELECTION_TIMEOUT = 2 * HEARTBEAT
VOTERS = frozenset({"p", "b", "w"})
#: The issue's failover bound at the defaults.
FAILOVER_BOUND = LEASE + 2 * HEARTBEAT + 1.0


class Process:
    """
    A process with its own clock, which may be frozen or killed.
    """

    def __init__(self, net: "Net", name: str) -> None:
        self.net = net
        self.name = name
        self.clock = Clock()
        self.frozen = False
        self.alive = True

    def deliver(self, call, *args) -> None:
        """
        A message for this process arrives (and is handled when its clock
        next runs).
        """
        if self.alive:
            self.clock.callLater(0, call, *args)


class Witness(Process):
    def __init__(self, net: "Net", name: str) -> None:
        super().__init__(net, name)
        self.voter = Voter(name, LEASE, VoterRecord(), 0.0)


class Instance(Process):
    """
    One instance of the pair: its role machine, and the L{RoleActions}
    the router will one day provide, done here by hand.
    """

    def __init__(self, net: "Net", name: str, role: str,
                 record: VoterRecord = VoterRecord(), position: LogPosition = ORIGIN) -> None:
        """
        @param record: the voter's durable record and C{position} the
            store's, as a restarted instance finds them.
        """
        super().__init__(net, name)
        self.clock.advance(net.now)
        self.is_primary = role == "primary"
        self.voter = Voter(name, LEASE, record, net.now)
        self.position = position
        self.serving: int | None = None
        self.following = False
        self.in_sync = False
        self.lease_core: LeaseCore | None = None
        self.lease = None
        self.states: list[tuple[float, str]] = []
        settings = HASettings(role, "router-b", REPLICATION, (WITNESS,))
        self.role, self.core = start_role(self.clock, settings, self)

    @property
    def peer(self) -> "Instance":
        return self.net.instances["b" if self.name == "p" else "p"]

    def holds_lease(self) -> bool:
        return self.serving is not None and self.lease_core is not None and self.lease_core.holds()

    # -- RoleActions ------------------------------------------------------------

    def state_changed(self, state: str) -> None:
        self.states.append((self.net.now, state))

    def ask_voters(self) -> None:
        self.clock.callLater(0, self._ask_voters)

    def _ask_voters(self) -> None:
        now = self.net.now
        answers = [
            process.voter.start_answer(now, getattr(process, "position", None)
                                       if process is not self else None)
            for process in self.net.reachable_from(self)
        ]
        decision = decide_start(self.name, self.is_primary, self.position, VOTERS, answers)
        if decision is StartDecision.FOLLOW:
            self.role.active_found()
        elif decision is StartDecision.RESUME:
            self.role.holds_newest_data()
        else:
            self.role.must_wait()

    def follow(self) -> None:
        self.following = True
        self.clock.callLater(0, self._caught_up)

    def _caught_up(self) -> None:
        active = self.peer
        if not self.following:
            return
        if not (self.net.reaches(self, active) and active.serving):
            # Replication connects once the active is there.
            self.clock.callLater(STEP, self._caught_up)
            return
        self.in_sync = True
        self.position = LogPosition(self.position.epoch, active.position.position)
        self.role.caught_up()
        if active.core.state == ACTIVE_ALONE:
            active.deliver(active.role.peer_caught_up)

    def stop_following(self) -> None:
        self.following = self.in_sync = False

    def request_votes(self, alone: bool) -> None:
        epoch = self.voter.record.granted_epoch + 1
        request = VoteRequest(self.name, self.name, epoch, self.position, alone)
        requested_at = self.clock.seconds()
        tally = Tally(VOTERS, epoch)

        def won(epoch: int) -> None:
            self.position = LogPosition(epoch, self.position.position + 1)
            if not alone and self.peer.in_sync:
                self.peer.position = self.position
            granted_by = [v for v, vote in tally.votes.items() if vote.granted]
            self.role.epoch_granted(epoch)
            if self.core.state in (ACTIVE_ALONE, ACTIVE_REPLICATED):
                self._hold_lease(epoch, requested_at, granted_by)

        election = start_election(
            self.clock, tally, ELECTION_TIMEOUT, won, lambda defeat: self.role.election_lost()
        )
        for process in self.net.reachable_from(self):
            process.deliver(self._vote_on, process, request, election)

    def _vote_on(self, process: Process, request: VoteRequest, election) -> None:
        vote = process.voter.request(request, self.net.now)
        if self.net.reaches(process, self):
            self.deliver(election.got_vote, vote)

    def start_serving(self, epoch: int) -> None:
        self.serving = epoch

    def serve_in(self, epoch: int) -> None:
        self.serving = epoch

    def stop_serving(self, reason: str) -> None:
        self.serving = None
        if self.lease is not None:
            self.lease.release()

    def hold_acknowledgements(self) -> None:
        pass

    def release_acknowledgements(self) -> None:
        pass

    # -- the lease ----------------------------------------------------------------

    def _hold_lease(self, epoch: int, requested_at: float, granted_by: list[str]) -> None:
        if self.lease is not None:
            self.lease.release()

        def lost(reason: str) -> None:
            if reason == SUPERSEDED:
                self.role.superseded(0)
            else:
                self.role.lease_lost()

        def send(sent_at: float) -> None:
            beat = Heartbeat(self.name, epoch, self.position, self.position, sent_at)
            for process in self.net.reachable_from(self):
                process.deliver(self._heartbeat_to, process, beat, lease)

        self.lease_core = LeaseCore(self.clock, self.name, VOTERS, HEARTBEAT, LEASE, send, lost)
        lease = self.lease = hold_lease(self.lease_core, requested_at, granted_by)

    def _heartbeat_to(self, process: Process, beat: Heartbeat, lease) -> None:
        answer = process.voter.heartbeat(beat, self.net.now)
        if answer.accepted and process is self.peer:
            # The backup hears the active; the active hears its backup's
            # acknowledgement.
            process.role.peer_heard()
            if self.net.reaches(process, self):
                self.deliver(self.role.peer_heard)
        if self.net.reaches(process, self) and process is not self:
            self.deliver(lease.got_answer, answer)


class Net:
    def __init__(self) -> None:
        self.now = 0.0
        self.cut: set[frozenset[str]] = set()
        self.instances: dict[str, Instance] = {}
        self.witness = Witness(self, "w")
        self.instances["p"] = Instance(self, "p", "primary")
        self.instances["b"] = Instance(self, "b", "backup")

    def restart(self, name: str) -> Instance:
        """
        Start a killed instance again, with what it had stored.
        """
        old = self.instances[name]
        assert not old.alive
        role = "primary" if old.is_primary else "backup"
        new = self.instances[name] = Instance(self, name, role, old.voter.record, old.position)
        return new

    @property
    def processes(self) -> list[Process]:
        return [*self.instances.values(), self.witness]

    def reaches(self, a: Process, b: Process) -> bool:
        return a is b or (a.alive and b.alive and frozenset({a.name, b.name}) not in self.cut)

    def reachable_from(self, sender: Process) -> list[Process]:
        return [p for p in self.processes if self.reaches(sender, p)]

    def run(self, seconds: float) -> None:
        """
        Advance every running process's clock together, checking the
        safety invariant after each step.
        """
        for _ in range(round(seconds / STEP)):
            self.now += STEP
            for process in self.processes:
                if process.alive and not process.frozen:
                    process.clock.advance(self.now - process.clock.seconds())
            holders = [i.name for i in self.instances.values()
                       if i.alive and not i.frozen and i.holds_lease()]
            assert len(holders) <= 1, (self.now, holders)

    def run_until(self, predicate, limit: float) -> float:
        """
        Run until C{predicate()} holds; return how long it took.
        """
        start = self.now
        while not predicate():
            assert self.now - start < limit, f"not within {limit} s"
            self.run(STEP)
        return self.now - start


@pytest.fixture
def net() -> Net:
    """
    A pair that started together: p active and replicated, b in sync.
    """
    made = Net()
    p, b = made.instances["p"], made.instances["b"]
    made.run_until(lambda: p.core.state == ACTIVE_REPLICATED and b.core.state == BACKUP_IN_SYNC,
                   limit=10)
    made.run(5)
    assert (p.core.state, b.core.state) == (ACTIVE_REPLICATED, BACKUP_IN_SYNC)
    return made


def test_a_pair_starting_together_settles_with_the_primary_active(net):
    p, b = net.instances["p"], net.instances["b"]
    assert p.serving == p.core.epoch and b.serving is None
    # Epoch 1 to resume alone, epoch 2 once b caught up.
    assert p.core.epoch == 2 and b.position == p.position == LogPosition(2, 2)


def test_a_killed_active_is_replaced_within_the_bound(net):
    p, b = net.instances["p"], net.instances["b"]
    p.alive = False
    took = net.run_until(lambda: b.serving is not None, limit=FAILOVER_BOUND)
    assert b.core.state == ACTIVE_ALONE and b.serving == 3
    # A lease-timeout after p's last heartbeat, sent up to one interval
    # before it died.
    assert LEASE - HEARTBEAT <= took <= FAILOVER_BOUND


def test_an_isolated_backup_never_activates_and_the_primary_runs_alone(net):
    p, b = net.instances["p"], net.instances["b"]
    net.cut |= {frozenset("pb"), frozenset("bw")}
    net.run(60)
    assert b.serving is None
    assert p.core.state == ACTIVE_ALONE and p.serving == 3


def test_a_backup_cut_off_from_the_primary_only_never_activates(net):
    p, b = net.instances["p"], net.instances["b"]
    net.cut.add(frozenset("pb"))
    net.run(60)
    assert b.serving is None
    assert p.core.state == ACTIVE_ALONE


def test_a_frozen_active_is_replaced_fences_itself_on_waking_and_rejoins(net):
    p, b = net.instances["p"], net.instances["b"]
    p.frozen = True
    net.run_until(lambda: b.serving is not None, limit=FAILOVER_BOUND)
    net.run(5)
    p.frozen = False
    net.run(STEP)
    assert p.serving is None
    net.run_until(lambda: p.core.state == BACKUP_IN_SYNC, limit=5)
    assert b.core.state == ACTIVE_ALONE
    net.run_until(lambda: b.core.state == ACTIVE_REPLICATED, limit=5)


def test_an_active_cut_off_from_everyone_fences_itself_before_the_backup_serves(net):
    p, b = net.instances["p"], net.instances["b"]
    net.cut |= {frozenset("pb"), frozenset("pw")}
    net.run_until(lambda: b.serving is not None, limit=FAILOVER_BOUND + 2)
    assert p.serving is None and p.core.state == FENCED


def primary_ran_alone(net: Net) -> None:
    """
    Cut p from b until p runs alone in epoch 3, then kill both: p holds
    changes confirmed in epoch 3 that b lacks.
    """
    p, b = net.instances["p"], net.instances["b"]
    net.cut.add(frozenset("pb"))
    net.run_until(lambda: p.core.state == ACTIVE_ALONE, limit=10)
    net.run(1)
    p.alive = b.alive = False
    net.cut.clear()
    net.run(10)


def test_the_stale_backup_never_activates_after_the_primary_ran_alone(net):
    primary_ran_alone(net)
    b = net.restart("b")
    net.run(60)
    assert b.serving is None and b.core.state == STARTING


@pytest.mark.parametrize("first", ["p", "b"])
def test_both_restarted_in_either_order_the_newest_resumes(net, first):
    primary_ran_alone(net)
    net.restart(first)
    net.run(5)
    net.restart("b" if first == "p" else "p")
    p, b = net.instances["p"], net.instances["b"]
    net.run_until(lambda: p.core.state == ACTIVE_REPLICATED and b.core.state == BACKUP_IN_SYNC,
                  limit=20)
    assert [state for _, state in b.states if state.startswith("active")] == []
