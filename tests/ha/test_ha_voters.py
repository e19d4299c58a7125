"""
The candidate and active side of HA voting, one piece at a time: a
witness's vote connection (L{WitnessConnection}) over L{StringTransport}
with a L{task.Clock}, the test playing the witness; and L{Voters}
feeding an election and a lease from the instance's own voter, its peer
(a callable) and witnesses.
"""

import pytest
from twisted.internet.defer import Deferred, succeed
from twisted.internet.task import Clock
from twisted.logger import LogLevel, globalLogPublisher

from support.fakes import RecordingEngine
from meshroute.events import EventLog, read_events
from meshroute.ha.voters import StartQuestion, Voters, WitnessConnection, asking_witness
from meshroute.harules import quorum
from meshroute.harules.election import NO_MAJORITY, Defeat
from meshroute.harules.lease import LEASE_EXPIRED, SUPERSEDED
from meshroute.link import auth, reasons
from meshroute.link.context import RouterContext
from meshroute.link.registry import LinkRegistry
from meshroute.link.retry import RetrySchedule
from meshroute.link.rotation import EndpointRotation
from meshroute.link.settings import ConnectorSettings
from meshroute.wire.frames import (
    Authenticate,
    Authenticated,
    Heartbeat,
    HeartbeatAnswer,
    Reject,
    StartAnswer,
    StartQuery,
    VoteAnswer,
    VoteHello,
    VoteRequest,
    Welcome,
)
from meshroute.router.witness import Witness
from support.connector_testing import LISTENER_CHALLENGE, Attempt, FakeEndpoint
from support.held_records import HeldRecords

SECRET = b"s3cret-mesh-password"
ROUTER = "router-b"
PRIMARY = "router-b/primary"
BACKUP = "router-b/backup"
GROUP = "router-b"
WITNESS = "router-a"
STAGE_TIMEOUT_MS = 1000
RETRY_MS = 200
LEASE = 3.0
INTERVAL = 0.5


class Harness:
    """
    One instance's context, and witness connections dialled through fake
    endpoints the test answers.
    """

    def __init__(self, tmp_path) -> None:
        self.clock = Clock()
        self.data_dir = str(tmp_path)
        self.events = EventLog(self.data_dir, ROUTER, self.clock)
        self.context = RouterContext(name=ROUTER, clock=self.clock, events=self.events,
                                     registry=LinkRegistry(), engine=RecordingEngine())
        self.endpoints: dict[str, FakeEndpoint] = {}

    def witness(self, name: str = WITNESS) -> WitnessConnection:
        self.endpoints[name] = FakeEndpoint(self.clock)
        settings = ConnectorSettings(secret=SECRET, expected_peer=name,
                                     stage_valid_timeout_ms=STAGE_TIMEOUT_MS)
        return WitnessConnection(
            self.context, settings, EndpointRotation([(f"tcp:{name}", self.endpoints[name])]),
            RetrySchedule(RETRY_MS, 1.0, RETRY_MS, -1), self.clock, GROUP, LEASE)

    def started_witness(self) -> tuple[WitnessConnection, list]:
        """
        A started witness connection, and the list its answers go to.
        """
        witness = self.witness()
        answers = []
        witness.deliver = answers.append
        witness.startService()
        return witness, answers

    def recorded(self, event: str) -> list[dict]:
        self.events.flush()
        return [r for r in read_events(self.data_dir) if r["event"] == event]


@pytest.fixture
def harness(tmp_path, request) -> Harness:
    made = Harness(tmp_path)
    request.addfinalizer(made.events.close)
    return made


def reach_voting(attempt: Attempt, witness: str = WITNESS, held=()) -> None:
    """
    Play the witness's side of a vote connection's handshake; the
    connection then sends the frames C{held} for it, and nothing else.
    """
    attempt.connect()
    assert attempt.sent() == [VoteHello([3], ROUTER)]
    attempt.write(Welcome(3, witness, 1000, LISTENER_CHALLENGE))
    [authenticate] = attempt.sent()
    assert isinstance(authenticate, Authenticate)
    assert authenticate.proof == auth.proof(SECRET, "connector", ROUTER, witness,
                                            authenticate.challenge, LISTENER_CHALLENGE)
    attempt.write(Authenticated(auth.proof(SECRET, "listener", ROUTER, witness,
                                           authenticate.challenge, LISTENER_CHALLENGE)))
    assert attempt.sent() == list(held)  # no Recovery: a vote connection is not a link


def request(epoch: int = 1, candidate: str = PRIMARY) -> quorum.VoteRequest:
    return quorum.VoteRequest(candidate, candidate, epoch, quorum.ORIGIN, alone=True)


# -- the vote connection -----------------------------------------------------


def test_requests_and_answers_cross_a_vote_connection(harness):
    witness, answers = harness.started_witness()
    attempt = harness.endpoints[WITNESS].last
    reach_voting(attempt)
    assert attempt.protocol.link.core.stage == "voting"
    assert harness.context.registry.links() == []  # not a link, claims no name

    witness.ask(request())
    beat = quorum.Heartbeat(PRIMARY, 1, quorum.LogPosition(1, 7), quorum.LogPosition(1, 6), 2.5)
    witness.ask(beat)
    assert attempt.sent() == [
        VoteRequest(GROUP, PRIMARY, PRIMARY, 1, 0, 0, True, 3000),
        Heartbeat(GROUP, PRIMARY, 1, 1, 7, 1, 6, 2.5, 3000),
    ]
    attempt.write(VoteAnswer(GROUP, WITNESS, 1, True, "", 1))
    attempt.write(VoteAnswer("another-group", WITNESS, 1, True, "", 1))  # not ours
    attempt.write(HeartbeatAnswer(GROUP, WITNESS, True, 2.5, 1))
    assert answers == [quorum.Vote(WITNESS, 1, True, None, 1),
                       quorum.HeartbeatAnswer(WITNESS, True, 2.5, 1)]
    # Answered: no timer runs, however long nothing is asked.
    harness.clock.advance(10 * STAGE_TIMEOUT_MS / 1000)
    assert attempt.transport.connected and not attempt.transport.disconnecting
    witness.stopService()


def test_a_silent_witness_is_dialled_again_and_what_is_asked_meanwhile_waits(harness):
    witness, answers = harness.started_witness()
    first = harness.endpoints[WITNESS].last
    reach_voting(first)
    witness.ask(request())
    harness.clock.advance(STAGE_TIMEOUT_MS / 1000 - 0.01)
    witness.ask(request(2))  # the oldest unanswered one sets the deadline
    assert [frame.epoch for frame in first.sent()] == [1, 2]
    assert not first.transport.disconnected
    harness.clock.advance(0.01)
    assert first.transport.disconnected  # aborted: the witness may be a half-open socket
    witness.ask(request(3))
    first.drop()
    assert first.sent() == []
    (closed,) = harness.recorded("link.closed")
    assert (closed["reason"], closed["stage"]) == (reasons.STAGE_TIMEOUT, "voting")

    # Asked while closing or down: held, the newest of each kind, and sent
    # once up.
    beat = quorum.Heartbeat(PRIMARY, 1, quorum.ORIGIN, quorum.ORIGIN, 1.5)
    witness.ask(beat)
    witness.ask(request(4))
    harness.clock.advance(RETRY_MS / 1000)
    second = harness.endpoints[WITNESS].last
    assert second is not first
    second.connect()
    assert second.sent() == [VoteHello([3], ROUTER)]  # nothing before voting
    second.drop()
    harness.clock.advance(RETRY_MS / 1000)
    third = harness.endpoints[WITNESS].last
    reach_voting(third, held=[VoteRequest(GROUP, PRIMARY, PRIMARY, 4, 0, 0, True, 3000),
                              Heartbeat(GROUP, PRIMARY, 1, 0, 0, 0, 0, 1.5, 3000)])
    witness.ask(request(5))
    assert [frame.epoch for frame in third.sent()] == [5]
    assert answers == []
    witness.stopService()


@pytest.fixture
def no_votes_warnings():
    """
    The warnings that a witness takes no vote connections, as logged.
    """
    warnings = []

    def observe(event):
        if event.get("log_level") == LogLevel.warn and "vote connections" in event.get(
                "log_format", ""):
            warnings.append(event)

    globalLogPublisher.addObserver(observe)
    yield warnings
    globalLogPublisher.removeObserver(observe)


def test_a_witness_that_fails_the_mesh_secret_gets_no_request(harness):
    witness, answers = harness.started_witness()
    attempt = harness.endpoints[WITNESS].last
    attempt.connect()
    attempt.write(Welcome(3, WITNESS, 1000, LISTENER_CHALLENGE))
    hello, authenticate = attempt.sent()
    attempt.write(Authenticated(b"\0" * len(authenticate.proof)))
    witness.ask(request())
    assert [type(frame) for frame in attempt.sent()] == [Reject]
    assert attempt.transport.disconnecting
    (rejected,) = harness.recorded("link.rejected")
    assert (rejected["code"], rejected["by"]) == (reasons.AUTH_FAILED, "local")
    witness.stopService()


def test_a_version_2_witness_counts_as_silent_and_is_named_once(harness, no_votes_warnings):
    witness = harness.witness()
    witness.startService()
    for _ in range(3):
        attempt = harness.endpoints[WITNESS].last
        attempt.connect()
        assert attempt.sent() == [VoteHello([3], ROUTER)]
        witness.ask(request())  # not in voting: held
        assert attempt.sent() == []
        attempt.drop()  # a version-2 router closes at the unknown frame
        harness.clock.advance(RETRY_MS / 1000)
    # A router without vote connections refuses with "version": the same.
    attempt = harness.endpoints[WITNESS].last
    attempt.connect()
    attempt.write(Reject(reasons.VERSION, "this router takes no vote connections"))
    attempt.drop()
    assert len(harness.endpoints[WITNESS].attempts) == 4
    (warning,) = no_votes_warnings
    assert (warning["witness"], warning["endpoint"]) == (WITNESS, f"tcp:{WITNESS}")
    witness.stopService()


def test_a_witness_that_votes_again_is_named_again_when_it_stops(harness, no_votes_warnings):
    witness = harness.witness()
    witness.startService()
    harness.endpoints[WITNESS].last.connect()
    harness.endpoints[WITNESS].last.drop()
    harness.clock.advance(RETRY_MS / 1000)
    reach_voting(harness.endpoints[WITNESS].last)  # upgraded to version 3
    harness.endpoints[WITNESS].last.drop()
    harness.clock.advance(RETRY_MS / 1000)
    harness.endpoints[WITNESS].last.connect()  # downgraded again
    harness.endpoints[WITNESS].last.drop()
    assert len(no_votes_warnings) == 2
    witness.stopService()


# -- the voters together -----------------------------------------------------


class LocalPeer:
    """
    The peer instance as a callable that answers at once from its voter,
    or never (C{silent}).
    """

    def __init__(self, voter: quorum.Voter, clock: Clock) -> None:
        self.voter = voter
        self.clock = clock
        self.asked = []
        self.silent = False
        self.position = quorum.ORIGIN

    def __call__(self, question) -> Deferred:
        self.asked.append(question)
        if self.silent:
            return Deferred()
        if isinstance(question, StartQuestion):
            return succeed(self.voter.start_answer(self.clock.seconds(), self.position))
        if isinstance(question, quorum.VoteRequest):
            return succeed(self.voter.request(question, self.clock.seconds()))
        return succeed(self.voter.heartbeat(question, self.clock.seconds()))


def answer_witness(attempt: Attempt, voter: quorum.Voter, clock: Clock) -> None:
    """
    Play a witness that answers everything sent to it by C{voter}'s rules.
    """
    for frame in attempt.sent():
        if isinstance(frame, VoteRequest):
            vote = voter.request(quorum.VoteRequest(
                frame.candidate, frame.requester, frame.epoch,
                quorum.LogPosition(frame.position_epoch, frame.position), frame.alone),
                clock.seconds())
            attempt.write(VoteAnswer(frame.group, voter.name, vote.epoch, vote.granted,
                                     vote.reason or "", vote.granted_epoch))
        else:
            heard = voter.heartbeat(quorum.Heartbeat(
                frame.instance, frame.epoch,
                quorum.LogPosition(frame.position_epoch, frame.position),
                quorum.LogPosition(frame.confirmed_epoch, frame.confirmed_position),
                frame.sent_at), clock.seconds())
            attempt.write(HeartbeatAnswer(frame.group, voter.name, heard.accepted,
                                          heard.sent_at, heard.granted_epoch))


class Pair:
    """
    The primary's L{Voters}: its own voter, the backup's voter behind a
    callable, and one witness played by the test.
    """

    def __init__(self, harness: Harness, peer=None) -> None:
        """
        @param peer: makes the backup's callable from its voter and the
            clock (L{LocalPeer} by default).
        """
        clock = self.clock = harness.clock
        self.own = quorum.Voter(PRIMARY, LEASE, quorum.VoterRecord(), clock.seconds())
        self.backup = quorum.Voter(BACKUP, LEASE, quorum.VoterRecord(), clock.seconds())
        self.witness = quorum.Voter(WITNESS, LEASE, quorum.VoterRecord(), clock.seconds())
        self.peer = (peer or LocalPeer)(self.backup, clock)
        self.voters = Voters(clock, PRIMARY, {PRIMARY: LocalPeer(self.own, clock),
                                              BACKUP: self.peer}, [harness.witness()])
        self.voters.startService()
        self.attempt = harness.endpoints[WITNESS].last
        reach_voting(self.attempt)
        self.outcomes = []

    def elect(self, epoch: int = 1):
        return self.voters.elect(request(epoch), 2.0, self.outcomes.append, self.outcomes.append)

    def lease(self):
        return self.voters.hold_lease(
            lambda: (quorum.LogPosition(1, 3), quorum.LogPosition(1, 2)),
            INTERVAL, LEASE, self.outcomes.append)


def test_an_election_asks_every_voter_and_counts_their_answers(harness):
    pair = Pair(harness)
    assert pair.voters.names == {PRIMARY, BACKUP, WITNESS}
    pair.elect()
    # Own grant and the peer's grant: a majority of three at once.
    assert pair.outcomes == [1]
    assert [type(q) for q in pair.peer.asked] == [quorum.VoteRequest]
    assert pair.own.record.granted_to == PRIMARY
    # The witness was asked too; its late grant changes nothing.
    answer_witness(pair.attempt, pair.witness, pair.clock)
    assert pair.witness.record.granted_to == PRIMARY
    assert pair.outcomes == [1]
    pair.voters.stopService()


def test_the_start_up_question_is_asked_of_every_voter_for_decide_start(harness):
    pair = Pair(harness)
    pair.peer.position = quorum.LogPosition(0, 4)  # the backup holds more
    decided = []
    pair.voters.ask_start(2.0, decided.append)
    assert pair.attempt.sent() == [StartQuery(GROUP)]
    assert [type(q) for q in pair.peer.asked] == [StartQuestion]
    assert decided == []  # the witness has not answered yet
    # Counted as the witness the connection is for, as its votes are.
    pair.attempt.write(StartAnswer(GROUP, "another-name", "", 0, "", 0, 0, 0, 0, []))
    [answers] = decided
    assert {a.voter for a in answers} == {PRIMARY, BACKUP, WITNESS}
    assert quorum.decide_start(PRIMARY, True, quorum.ORIGIN, pair.voters.names,
                               answers) == quorum.StartDecision.DEFER
    pair.clock.advance(5.0)
    assert len(decided) == 1  # once
    pair.voters.stopService()


def test_start_answers_are_collected_until_the_timeout(harness):
    pair = Pair(harness)
    decided = []
    pair.voters.ask_start(2.0, decided.append)
    pair.clock.advance(1.9)
    assert decided == []
    pair.clock.advance(0.1)
    [answers] = decided
    assert {a.voter for a in answers} == {PRIMARY, BACKUP}  # the witness is silent
    # A late answer belongs to no round.
    pair.attempt.write(StartAnswer(GROUP, WITNESS, PRIMARY, 1, PRIMARY, 0, 0, 0, 0, []))
    assert len(decided) == 1
    pair.voters.stopService()


def test_an_election_without_enough_answers_is_lost_at_its_timeout(harness):
    pair = Pair(harness)
    pair.backup.heard_at = pair.clock.seconds()  # the peer hears another active
    pair.backup.record = quorum.VoterRecord(granted_to=BACKUP)
    pair.elect()
    assert pair.outcomes == []
    pair.clock.advance(2.0)  # the witness stays silent
    (defeat,) = pair.outcomes
    assert defeat.reason == NO_MAJORITY
    assert defeat.refusals == {BACKUP: quorum.ACTIVE_ALIVE}
    pair.voters.stopService()


def test_the_active_heartbeats_its_own_voter_and_holds_its_lease_while_answered(harness):
    pair = Pair(harness)
    pair.elect()
    answer_witness(pair.attempt, pair.witness, pair.clock)
    lease = pair.lease()
    for _ in range(20):  # ten seconds, well past lease-timeout
        pair.clock.advance(INTERVAL)
        answer_witness(pair.attempt, pair.witness, pair.clock)
    assert pair.outcomes == [1]
    beats = [q for q in pair.peer.asked if isinstance(q, quorum.Heartbeat)]
    assert len(beats) == 20
    assert beats[-1] == quorum.Heartbeat(PRIMARY, 1, quorum.LogPosition(1, 3),
                                         quorum.LogPosition(1, 2), pair.clock.seconds())
    # The safety duty: its own voter heard every heartbeat, and so refuses
    # the backup while the active serves (docs/ha.md, "The lease").
    assert pair.own.heard_at == pair.clock.seconds()
    assert pair.own.record.confirmed == quorum.LogPosition(1, 2)
    refused = pair.own.request(request(2, candidate=BACKUP), pair.clock.seconds())
    assert refused.reason == quorum.ACTIVE_ALIVE
    lease.release()
    pair.voters.stopService()


def test_a_heartbeat_refused_for_a_newer_epoch_fences_the_active(harness):
    pair = Pair(harness)
    pair.elect()
    pair.backup.record = quorum.VoterRecord(granted_epoch=2, granted_to=BACKUP)
    pair.lease()
    pair.clock.advance(INTERVAL)  # the backup refuses: it granted epoch 2
    assert pair.outcomes == [1, SUPERSEDED]
    pair.voters.stopService()


def test_the_lease_runs_out_when_the_voters_fall_silent(harness):
    pair = Pair(harness)
    pair.elect()
    pair.peer.silent = True
    pair.lease()
    for _ in range(int(LEASE / INTERVAL) - 1):
        pair.clock.advance(INTERVAL)
        assert pair.outcomes == [1]
    pair.clock.advance(INTERVAL)
    assert pair.outcomes == [1, LEASE_EXPIRED]
    pair.voters.stopService()


def test_an_earlier_lease_s_refused_heartbeat_does_not_fence_the_next(harness):
    pair = Pair(harness)
    pair.elect()
    pair.lease().release()  # e.g. handed over, then won again
    pair.clock.advance(INTERVAL)
    pair.elect(2)
    pair.voters.hold_lease(lambda: (quorum.ORIGIN, quorum.ORIGIN), INTERVAL, LEASE,
                           pair.outcomes.append)
    # The witness answers, late, a heartbeat of the first lease: refused.
    pair.attempt.write(HeartbeatAnswer(GROUP, WITNESS, False, 0.0, 2))
    pair.clock.advance(INTERVAL)
    assert pair.outcomes == [1, 2]
    pair.voters.stopService()


def test_the_own_voter_s_grant_counts_only_once_its_record_is_durable(harness):
    records = HeldRecords()
    records.hold = True
    own = Witness(PRIMARY, records, harness.clock, harness.events)
    own.load()
    backup = quorum.Voter(BACKUP, LEASE, quorum.VoterRecord(), harness.clock.seconds())
    voters = Voters(harness.clock, PRIMARY,
                    {PRIMARY: asking_witness(own, PRIMARY, GROUP, LEASE),
                     BACKUP: LocalPeer(backup, harness.clock)}, [harness.witness()])
    voters.startService()
    outcomes = []
    voters.elect(request(1), 2.0, outcomes.append, outcomes.append)
    # The backup granted; the own voter granted too, but not durably yet.
    assert outcomes == []
    assert own.records()[GROUP].granted_to == PRIMARY
    records.flush()
    assert outcomes == [1]
    assert records.durable[GROUP] == (own.records()[GROUP], round(LEASE * 1000))
    voters.stopService()


def test_a_new_election_abandons_the_one_under_way(harness):
    pair = Pair(harness)
    pair.peer.silent = True
    pair.elect(1)  # own grant only: undecided
    pair.elect(2)
    pair.clock.advance(2.0)  # both would time out; only the second reports
    assert [defeat.newest_epoch for defeat in pair.outcomes] == [2]
    pair.voters.stopService()


def test_a_refusal_because_the_next_epoch_went_to_this_instance_does_not_fence_it(harness):
    pair = Pair(harness)
    pair.elect(1)
    pair.lease()
    pair.peer.silent = True
    pair.elect(2)  # to run alone: the own voter grants 2 at once
    answer_witness(pair.attempt, pair.witness, pair.clock)  # and the witness
    assert pair.outcomes == [1, 2]
    pair.clock.advance(INTERVAL)  # epoch-1 heartbeats: refused, for epoch 2
    answer_witness(pair.attempt, pair.witness, pair.clock)
    assert pair.outcomes == [1, 2]
    pair.voters.stopService()


def test_a_refusal_naming_the_lease_s_own_epoch_does_not_fence_it(harness):
    """
    The active asks for epoch 2 (to run replicated again) while its
    epoch-1 lease goes on beating, and wins it before the witness's grant
    arrives.  The witness, having granted epoch 2, refuses an epoch-1
    heartbeat sent during the election; its answer reaches the epoch-2
    lease: it names no newer epoch than the lease's own, and must not
    fence it (a process test saw an active fence itself so, superseded by
    its own epoch).
    """
    pair = Pair(harness)
    pair.elect(1)
    answer_witness(pair.attempt, pair.witness, pair.clock)
    first = pair.lease()
    pair.elect(2)  # its own voter and the backup grant at once
    assert pair.outcomes == [1, 2]
    first.release()
    pair.voters.hold_lease(lambda: (quorum.ORIGIN, quorum.ORIGIN), INTERVAL, LEASE,
                           pair.outcomes.append)
    pair.attempt.write(HeartbeatAnswer(GROUP, WITNESS, False, pair.clock.seconds(), 2))
    pair.clock.advance(INTERVAL)
    assert pair.outcomes == [1, 2]
    pair.voters.stopService()


class HoldingPeer(LocalPeer):
    """
    The peer instance answering by its voter's rules, but only when the
    test says (L{answer_held}), in the order asked.
    """

    def __init__(self, voter: quorum.Voter, clock: Clock) -> None:
        super().__init__(voter, clock)
        self.holding = False
        self.held: list[tuple[object, Deferred]] = []

    def __call__(self, question) -> Deferred:
        if not self.holding:
            return super().__call__(question)
        self.asked.append(question)
        answer = Deferred()
        self.held.append((question, answer))
        return answer

    def answer_held(self) -> None:
        held, self.held, self.holding = self.held, [], False
        for question, answer in held:
            LocalPeer.__call__(self, question).chainDeferred(answer)


def test_a_late_grant_s_refusal_of_the_last_epoch_s_heartbeat_does_not_fence(harness):
    """
    The active won its next epoch (to run replicated again) with its own
    voter and the witness; the peer's grant came after the count, and so
    did its refusal of a heartbeat the active sent in its last epoch
    meanwhile (C{granted_epoch} is the active's own epoch): no voter
    knows a newer epoch, and the new lease holds.
    """
    pair = Pair(harness, HoldingPeer)
    pair.elect(1)
    old = pair.lease()
    answer_witness(pair.attempt, pair.witness, pair.clock)
    pair.peer.holding = True
    pair.elect(2)
    pair.clock.advance(INTERVAL)  # the epoch-1 lease beats meanwhile
    answer_witness(pair.attempt, pair.witness, pair.clock)  # grants 2: won
    assert pair.outcomes == [1, 2]
    old.release()
    pair.lease()
    pair.peer.answer_held()  # grants 2 (too late to count), refuses the epoch-1 heartbeat
    pair.clock.advance(INTERVAL)
    answer_witness(pair.attempt, pair.witness, pair.clock)
    assert pair.outcomes == [1, 2]
    pair.voters.stopService()


def test_a_request_the_witness_closed_on_unanswered_is_asked_again_once_up(harness):
    """
    The witness closed an idle vote connection just as a request crossed
    it: the request was never answered, and goes out again on the next
    connection (unless a newer one of its kind was asked meanwhile), so
    an election or start-up question does not wait out its timeout for a
    witness that is there.
    """
    witness, answers = harness.started_witness()
    first = harness.endpoints[WITNESS].last
    reach_voting(first)
    witness.ask(StartQuestion())
    witness.ask(request(3))
    first.write(StartAnswer(GROUP, WITNESS, "", 0, "", 0, 0, 0, 0, []))
    first.drop()  # closed before it answered the request
    harness.clock.advance(RETRY_MS / 1000)
    second = harness.endpoints[WITNESS].last
    reach_voting(second, held=[VoteRequest(GROUP, PRIMARY, PRIMARY, 3, 0, 0, True, 3000)])
    witness.stopService()


def test_a_question_is_asked_again_unless_its_election_was_lost_or_its_round_ended(harness):
    """
    A vote request or start-up question that a closing vote connection
    left unanswered goes out again on the next one while its election is
    undecided or won (the witness learns the grant counted on; a
    hand-over's request is how the peer learns of it) and its start-up
    round open; a lost election's is not (a witness asked late would
    record a grant no one counts, one that could fence a healthy active
    whose heartbeats it has not heard yet), nor an ended round's, whether
    the decision came while the connection was up or down.
    """
    pair = Pair(harness)
    pair.elect(1)  # its own voter and the peer grant at once: won
    decided = []
    pair.voters.ask_start(2.0, decided.append)
    won = VoteRequest(GROUP, PRIMARY, PRIMARY, 1, 0, 0, True, 3000)
    assert pair.attempt.sent() == [won, StartQuery(GROUP)]
    pair.attempt.drop()  # the witness closed it (idle) just as they crossed
    harness.clock.advance(RETRY_MS / 1000)
    second = harness.endpoints[WITNESS].last
    reach_voting(second, held=[StartQuery(GROUP), won])
    pair.peer.silent = True
    pair.elect(2)  # its own grant only: undecided
    assert second.sent() == [VoteRequest(GROUP, PRIMARY, PRIMARY, 2, 0, 0, True, 3000)]
    second.drop()
    harness.clock.advance(RETRY_MS / 1000)
    third = harness.endpoints[WITNESS].last
    reach_voting(third, held=[VoteRequest(GROUP, PRIMARY, PRIMARY, 2, 0, 0, True, 3000),
                              StartQuery(GROUP)])
    third.drop()
    harness.clock.advance(2.0)  # meanwhile the round and the election time out
    assert len(decided) == 1 and [type(o) for o in pair.outcomes] == [int, Defeat]
    fourth = harness.endpoints[WITNESS].last
    reach_voting(fourth)  # nothing asked again
    pair.voters.stopService()
