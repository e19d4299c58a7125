"""
The witness side of HA voting: the vote connection on the routing
listener (StringTransport, task.Clock) and L{Witness} over a store whose
saves the test makes durable when it wants.
"""

import pytest
from twisted.logger import LogLevel, capturedLogs

from meshroute import events
from meshroute.errors import StoreFull
from meshroute.harules.quorum import (ACTIVE_ALIVE, NOT_IN_SYNC, STALE_EPOCH, LogPosition,
                                      VoterRecord)
from meshroute.link import reasons, stages
from meshroute.link.context import RouterContext
from meshroute.link.link import ListenerFactory
from meshroute.link.settings import ListenerSettings
from meshroute.store import ExecutorStopped
from meshroute.wire.frames import (
    Authenticated,
    Heartbeat,
    HeartbeatAnswer,
    Hello,
    Recovery,
    Reject,
    StartAnswer,
    StartQuery,
    VoteAnswer,
    VoteHello,
    VoteRequest,
)
from meshroute.router.witness import Witness
from support.link_peer import (  # noqa: F401 (router: a fixture)
    KEEPALIVE_MS,
    LOCAL,
    REJECT_DELAY_MS,
    REMOTE,
    SECRET,
    STAGE_TIMEOUT,
    STAGE_TIMEOUT_MS,
    ConnectorPeer,
    Router,
    router,
)
from support.held_records import HeldRecords

GROUP = "router-b"
BACKUP = "router-b/backup"
PRIMARY = "router-b/primary"
LEASE_MS = 3000


@pytest.fixture
def records():
    return HeldRecords()


@pytest.fixture
def witness(router, records):  # noqa: F811
    witness = Witness(LOCAL, records, router.clock, router.context.events)
    witness.load()
    router.context = RouterContext(
        name=LOCAL, clock=router.clock, events=router.context.events,
        registry=router.registry, engine=router.engine, witness=witness,
    )
    return witness


class Candidate(ConnectorPeer):
    """
    The test is an HA instance (of router C{REMOTE}) opening a vote
    connection to the listener under test.
    """

    def hello(self, versions=(3,), router: str | None = None) -> None:
        self.send(VoteHello(list(versions), self.name if router is None else router))

    def to_voting(self) -> None:
        welcome = self.hello_welcomed()
        assert welcome.version == 3
        self.authenticate()
        (authenticated,) = self.expect(Authenticated)
        assert authenticated.proof == self.expected_listener_proof()
        assert self.core.stage == stages.VOTING

    def ask(self, epoch: int, candidate: str = BACKUP, requester: str | None = None,
            position=(0, 0), alone: bool = True, lease_ms: int = LEASE_MS) -> None:
        self.send(VoteRequest(GROUP, candidate, requester or candidate, epoch, *position,
                              alone, lease_ms))

    def beat(self, epoch: int, instance: str = PRIMARY, sent_at: float = 1.0) -> None:
        self.send(Heartbeat(GROUP, instance, epoch, epoch, 10, epoch, 10, sent_at, LEASE_MS))


def candidate(router: Router) -> Candidate:  # noqa: F811
    """
    Accept one inbound connection on C{router}'s listener; the test plays
    a candidate.
    """
    settings = ListenerSettings(secret=SECRET, keepalive_interval_ms=KEEPALIVE_MS,
                                stage_valid_timeout_ms=STAGE_TIMEOUT_MS,
                                reject_disconnect_delay_ms=REJECT_DELAY_MS)
    return Candidate(router, ListenerFactory(router.context, settings).buildProtocol(None), SECRET)


# -- the exchange ------------------------------------------------------------


def test_a_vote_connection_authenticates_then_votes(router, witness):  # noqa: F811
    peer = candidate(router)
    peer.to_voting()
    assert peer.stages() == ["connect", "authentication", "voting"]
    peer.ask(1)
    (answer,) = peer.expect(VoteAnswer)
    assert answer == VoteAnswer(GROUP, LOCAL, 1, True, "", 1)
    peer.ask(1, candidate=PRIMARY)
    (answer,) = peer.expect(VoteAnswer)
    assert answer == VoteAnswer(GROUP, LOCAL, 1, False, STALE_EPOCH, 1)
    (granted, refused) = router.events(events.HA_VOTE)
    assert (granted["granted"], granted["candidate"], granted["peer"]) == (True, BACKUP, REMOTE)
    assert (refused["granted"], refused["reason"]) == (False, STALE_EPOCH)


def test_a_vote_connection_is_not_a_link_and_claims_no_name(router, witness):  # noqa: F811
    link = router.listener()
    link.to_delivery()
    assert router.holds(REMOTE)
    peer = candidate(router)
    peer.to_voting()  # not name-in-use: the routing link of REMOTE is up
    assert router.registry.links() == [link.link]
    assert peer.link in router.registry.connections()
    peer.protocol.connectionLost(None)
    assert router.holds(REMOTE)  # the link keeps its name
    assert link.core.stage == stages.DELIVERY


def test_a_routing_link_forms_while_a_vote_connection_is_open(router, witness):  # noqa: F811
    peer = candidate(router)
    peer.to_voting()
    assert not router.holds(REMOTE)
    link = router.listener()
    link.to_delivery()
    assert router.holds(REMOTE)


def test_an_answer_waits_until_the_record_is_durable(router, witness, records):  # noqa: F811
    peer = candidate(router)
    peer.to_voting()
    records.hold = True
    peer.ask(1)
    peer.ask(1)  # the same request again: nothing new to save, same wait
    assert peer.written() == []
    records.flush()
    assert [a.granted for a in peer.expect(VoteAnswer, VoteAnswer)] == [True, True]
    assert records.durable[GROUP] == (witness.records()[GROUP], LEASE_MS)


def test_a_grant_that_cannot_be_saved_is_not_answered(router, witness, records,  # noqa: F811
                                                      observe_errors):
    peer = candidate(router)
    peer.to_voting()
    records.fail_next = True
    peer.ask(1)
    assert peer.written() == []
    assert observe_errors.take(lambda e: "voter record" in e.get("log_format", ""))
    peer.assert_closed(reasons.STORE_FAILED, "abort")
    # The next request saves the grant again before it is answered.
    again = candidate(router)
    again.to_voting()
    again.ask(1)
    (answer,) = again.expect(VoteAnswer)
    assert answer.granted
    assert records.durable[GROUP][0].granted_to == BACKUP


def test_a_grant_not_saved_because_the_store_closed_is_no_fault(router, witness,  # noqa: F811
                                                                records, observe_errors):
    """
    An instance that stops (a hand-over, a shutdown) closes the records'
    store under a request in flight: unanswered, as any record not saved,
    but logged as what it is, not as a fault.
    """
    peer = candidate(router)
    peer.to_voting()
    records.fail_next = ExecutorStopped("the store is closed")
    peer.ask(1)
    assert peer.written() == []
    assert not observe_errors.take(lambda e: True)


def test_records_not_saved_for_a_full_disk_are_said_once_until_one_is(router, witness,  # noqa: F811
                                                                      records):
    """
    A full disk fails every save (a request each heartbeat-interval):
    each unanswered, the first said as a warning without a traceback, the
    next ones not, until a record is saved again.
    """
    with capturedLogs() as logged:
        for _ in range(3):
            peer = candidate(router)
            peer.to_voting()
            records.fail_next = StoreFull("the router's disk is full (database or disk is full)")
            peer.ask(1)
            assert peer.written() == []
        said = [e for e in logged if e.get("log_namespace") == "meshroute.router.witness"]
        assert [e["log_level"] for e in said] == [LogLevel.warn]
        assert "disk is full" in said[0]["why"]
        peer = candidate(router)
        peer.to_voting()
        peer.ask(1)
        assert peer.expect(VoteAnswer)[0].granted
        said = [e for e in logged if e.get("log_namespace") == "meshroute.router.witness"]
    assert "HA voter records are saved again; answers are sent" in [
        e["log_format"] for e in said[1:]]


def test_the_start_up_question_is_answered_from_the_group_s_record(router, witness):  # noqa: F811
    peer = candidate(router)
    peer.to_voting()
    peer.send(StartQuery(GROUP))
    (answer,) = peer.expect(StartAnswer)
    assert answer == StartAnswer(GROUP, LOCAL, "", 0, "", 0, 0, 0, 0, [])  # never heard of
    assert GROUP not in witness.records()  # a question creates no record
    peer.ask(1, candidate=PRIMARY, position=(0, 5))
    peer.expect(VoteAnswer)
    peer.send(StartQuery(GROUP))
    (answer,) = peer.expect(StartAnswer)
    # It granted epoch 1 to the primary (running alone: confirmed (1, 0))
    # and hears it: the primary is active.
    assert answer == StartAnswer(GROUP, LOCAL, PRIMARY, 1, PRIMARY, 0, 5, 1, 0, [])
    router.clock.advance(LEASE_MS / 1000)
    peer.send(StartQuery(GROUP))
    (answer,) = peer.expect(StartAnswer)
    assert answer.active == "" and answer.granted_to == PRIMARY


def test_a_start_answer_waits_until_the_record_it_tells_is_durable(router, witness,  # noqa: F811
                                                                   records):
    peer = candidate(router)
    peer.to_voting()
    records.hold = True
    peer.ask(1)
    peer.send(StartQuery(GROUP))
    assert peer.written() == []
    records.flush()
    (_, answer) = peer.expect(VoteAnswer, StartAnswer)
    assert answer.granted_to == BACKUP


def test_an_instance_s_own_witness_tells_its_data_position(router, records):  # noqa: F811
    own = Witness(LOCAL, records, router.clock, router.context.events,
                  own_position=lambda: LogPosition(3, 1200))
    answer = own.start(REMOTE, StartQuery(GROUP)).result
    assert answer.own_position == [3, 1200]


def test_heartbeats_are_accepted_and_a_stale_one_refused(router, witness):  # noqa: F811
    peer = candidate(router)
    peer.to_voting()
    peer.ask(1, candidate=PRIMARY)
    peer.expect(VoteAnswer)
    peer.beat(1, sent_at=7.5)
    (answer,) = peer.expect(HeartbeatAnswer)
    assert answer == HeartbeatAnswer(GROUP, LOCAL, True, 7.5, 1)
    # While the primary's heartbeats arrive, the backup is refused.
    router.clock.advance(LEASE_MS / 1000 - 0.5)
    peer.ask(2, candidate=BACKUP, position=(1, 10))
    (refused,) = peer.expect(VoteAnswer)
    assert refused.reason == ACTIVE_ALIVE
    # After the lease ran out: a backup lacking what the heartbeat said was
    # confirmed is refused, one holding it granted; the old epoch's beat
    # is then refused.
    router.clock.advance(0.5)
    peer.ask(2, candidate=BACKUP, position=(1, 9))
    assert peer.expect(VoteAnswer)[0].reason == NOT_IN_SYNC
    peer.ask(2, candidate=BACKUP, position=(1, 10))
    assert peer.expect(VoteAnswer)[0].granted
    peer.beat(1)
    (answer,) = peer.expect(HeartbeatAnswer)
    assert (answer.accepted, answer.granted_epoch) == (False, 2)
    (record,) = router.events(events.HA_HEARTBEAT_REFUSED)
    assert (record["instance"], record["epoch"], record["granted_epoch"]) == (PRIMARY, 1, 2)


def test_an_idle_vote_connection_is_closed(router, witness):  # noqa: F811
    peer = candidate(router)
    peer.to_voting()
    router.clock.advance(STAGE_TIMEOUT - 1)
    peer.ask(1)  # any request restarts the wait
    router.clock.advance(STAGE_TIMEOUT - 1)
    assert peer.how_closed == "open"
    router.clock.advance(1)
    record = peer.assert_closed(reasons.IDLE, "abort")
    assert record["stage"] == stages.VOTING


def test_a_router_without_a_witness_refuses_vote_connections(router):  # noqa: F811
    peer = candidate(router)
    peer.hello()
    (reject,) = peer.expect(Reject)
    assert (reject.code, reject.detail) == (reasons.VERSION,
                                            "this router takes no vote connections")


def test_a_vote_hello_without_version_3_is_refused(router, witness):  # noqa: F811
    peer = candidate(router)
    peer.hello(versions=(2,))
    (reject,) = peer.expect(Reject)
    assert (reject.code, reject.detail) == (reasons.VERSION, "we speak [3]")


def test_a_wrong_secret_gets_no_vote(router, witness):  # noqa: F811
    peer = candidate(router)
    peer.hello_welcomed()
    peer.authenticate(secret=b"wrong")
    (reject,) = peer.expect(Reject)
    assert reject.code == reasons.AUTH_FAILED
    peer.ask(1)
    assert peer.written() == []
    assert witness.records() == {}


@pytest.mark.parametrize("first, then", [
    ("vote", Recovery(0)),
    ("vote", Hello([2, 3], REMOTE)),
    ("link", VoteRequest(GROUP, BACKUP, BACKUP, 1, 0, 0, True, LEASE_MS)),
    ("link", Heartbeat(GROUP, PRIMARY, 1, 1, 0, 1, 0, 1.0, LEASE_MS)),
], ids=["recovery-on-votes", "hello-on-votes", "request-on-link", "heartbeat-on-link"])
def test_frames_of_the_other_purpose_are_protocol_errors(router, witness, first,  # noqa: F811
                                                         then, observe_errors):
    peer = candidate(router) if first == "vote" else router.listener()
    if first == "vote":
        peer.to_voting()
    else:
        peer.to_delivery()
    peer.send(then)
    peer.assert_closed(reasons.PROTOCOL_ERROR, "abort")
    assert witness.records() == {}


# -- the witness over its records --------------------------------------------


def test_a_restarted_witness_refuses_the_same_epoch_and_hears_the_active(router):  # noqa: F811
    granted = VoterRecord(4, PRIMARY, LogPosition(3, 10), LogPosition(3, 10))
    records = HeldRecords({GROUP: (granted, LEASE_MS)})
    witness = Witness(LOCAL, records, router.clock, router.context.events)
    witness.load()
    ask = lambda epoch, who: witness.vote(REMOTE, VoteRequest(  # noqa: E731
        GROUP, who, who, epoch, 3, 10, True, LEASE_MS)).result
    assert ask(4, BACKUP).reason == STALE_EPOCH
    assert ask(5, BACKUP).reason == ACTIVE_ALIVE  # as if it had just heard the primary
    router.clock.advance(LEASE_MS / 1000)
    assert ask(5, BACKUP).granted


def test_no_request_shortens_the_lease_a_witness_waits_out(router):  # noqa: F811
    records = HeldRecords()
    witness = Witness(LOCAL, records, router.clock, router.context.events)
    witness.load()
    witness.vote(REMOTE, VoteRequest(GROUP, PRIMARY, PRIMARY, 1, 0, 0, True, 10_000))
    router.clock.advance(5)
    vote = witness.vote(REMOTE, VoteRequest(GROUP, BACKUP, BACKUP, 2, 1, 0, True, 1000)).result
    assert vote.reason == ACTIVE_ALIVE
    assert records.durable[GROUP][1] == 10_000
    router.clock.advance(5)
    assert witness.vote(REMOTE, VoteRequest(GROUP, BACKUP, BACKUP, 2, 1, 0, True, 1000)
                        ).result.granted
