"""
Tests for L{meshroute.ha.own_voter}: an instance's own voter answers its
own group always and other groups only while the instance serves, and
tells the instance of a hand-over and of the active peer heard.
"""

from twisted.internet.defer import succeed

from meshroute.errors import NotServing
from meshroute.ha.own_voter import OwnVoter
from meshroute.ha.records import InstanceVoterRecords
from meshroute.harules.quorum import LogPosition, VoterRecord
from meshroute.wire import frames
from support.held_records import HeldRecords

GROUP = "router-b"
OTHER = "router-x"
PRIMARY = "router-b/primary"
BACKUP = "router-b/backup"


class RecordingWitness:
    """
    Answers as a L{meshroute.router.witness.Witness} does: grants and
    accepts everything; remembers who asked what, and what it was told.
    """

    def __init__(self) -> None:
        self.asked: list[tuple[str, str, object]] = []
        self.retained: list[str] = []
        self.stopped: list[str] = []
        self.granted: dict[str, VoterRecord] = {}

    def vote(self, peer, frame: frames.VoteRequest):
        self.asked.append(("vote", peer, frame))
        return succeed(frames.VoteAnswer(frame.group, BACKUP, frame.epoch, True, "",
                                         frame.epoch))

    def heartbeat(self, peer, frame: frames.Heartbeat):
        self.asked.append(("heartbeat", peer, frame))
        return succeed(frames.HeartbeatAnswer(frame.group, BACKUP, True, frame.sent_at,
                                              frame.epoch))

    def start(self, peer, frame: frames.StartQuery):
        self.asked.append(("start", peer, frame))
        return succeed("an answer")

    def records(self) -> dict:
        return self.granted

    def retain(self, group: str) -> None:
        self.retained.append(group)

    def own_instance_stopped(self, group: str) -> None:
        self.stopped.append(group)


class Instance:
    """
    The backup instance's side: what its own voter tells it.
    """

    def __init__(self) -> None:
        self.witness = RecordingWitness()
        self.records = InstanceVoterRecords(GROUP, HeldRecords())
        self.handed: list[frames.VoteRequest] = []
        self.heard = 0
        self.voter = OwnVoter(self.witness, self.records, GROUP, BACKUP, PRIMARY,
                              self.handed.append, self.peer_heard)

    def peer_heard(self) -> None:
        self.heard += 1


def vote(group: str, candidate: str, requester: str) -> frames.VoteRequest:
    return frames.VoteRequest(group, candidate, requester, 5, 4, 100, False, 3000)


def heartbeat(group: str, instance: str) -> frames.Heartbeat:
    return frames.Heartbeat(group, instance, 5, 5, 100, 5, 99, 1.0, 3000)


def failed(d) -> type:
    failures = []
    d.addErrback(failures.append)
    assert failures, "did not fail"
    return failures[0].type


def test_its_own_group_is_answered_whether_or_not_it_serves():
    instance = Instance()
    request = vote(GROUP, PRIMARY, PRIMARY)
    assert instance.voter.vote(PRIMARY, request).result.granted
    assert instance.voter.heartbeat(PRIMARY, heartbeat(GROUP, PRIMARY)).result.accepted
    assert instance.voter.start(PRIMARY, frames.StartQuery(GROUP)).result == "an answer"
    assert [kind for kind, _, _ in instance.witness.asked] == ["vote", "heartbeat", "start"]


def test_another_group_is_answered_only_while_serving():
    instance = Instance()
    request = vote(OTHER, "router-x/primary", "router-x/primary")
    assert failed(instance.voter.vote("router-x/primary", request)) is NotServing
    assert failed(instance.voter.heartbeat("router-x/primary",
                                           heartbeat(OTHER, "router-x/primary"))) is NotServing
    assert failed(instance.voter.start("router-x/primary", frames.StartQuery(OTHER))) is NotServing
    assert instance.witness.asked == []  # the voter was not touched

    store = HeldRecords()
    instance.voter.serve(store)
    assert instance.voter.vote("router-x/primary", request).result.granted
    assert instance.witness.retained == [GROUP]

    instance.voter.stop_serving()
    assert failed(instance.voter.vote("router-x/primary", request)) is NotServing
    assert instance.witness.retained == [GROUP, GROUP]


def test_a_grant_to_it_at_the_peers_request_is_a_hand_over():
    instance = Instance()
    instance.voter.vote(PRIMARY, vote(GROUP, PRIMARY, PRIMARY))  # the peer's own election
    instance.voter.vote(PRIMARY, vote(GROUP, BACKUP, BACKUP))  # its own election
    handed = vote(GROUP, BACKUP, PRIMARY)
    instance.voter.vote(PRIMARY, handed)
    assert instance.handed == [handed]


def test_a_heartbeat_of_the_peer_accepted_is_the_peer_heard():
    instance = Instance()
    instance.voter.heartbeat(BACKUP, heartbeat(GROUP, BACKUP))
    assert instance.heard == 0
    instance.voter.heartbeat(PRIMARY, heartbeat(GROUP, PRIMARY))
    assert instance.heard == 1


def test_its_granted_epoch_is_its_own_groups():
    instance = Instance()
    assert instance.voter.granted_epoch() == 0
    instance.witness.granted[OTHER] = VoterRecord(9, "router-x/primary", LogPosition(8, 1),
                                                  LogPosition(8, 1))
    assert instance.voter.granted_epoch() == 0
    instance.witness.granted[GROUP] = VoterRecord(4, PRIMARY, LogPosition(3, 1),
                                                  LogPosition(3, 1))
    assert instance.voter.granted_epoch() == 4


def test_the_instance_stopping_is_told_to_its_groups_voter():
    instance = Instance()
    instance.voter.instance_stopped()
    assert instance.witness.stopped == [GROUP]
