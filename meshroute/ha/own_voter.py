"""
An HA instance's own voter, as the others ask it.

Each instance of a pair is one voter of its group: its
L{meshroute.router.witness.Witness}, whose record for its own group lives
in the instance's C{ha.db} and whose records for other groups live, while
the instance serves, in its router's replicated C{store.db}
(L{InstanceVoterRecords} says why).  The peer asks it over the
replication listener (L{meshroute.ha.listener}), and the instance's own
L{meshroute.ha.voters.Voters} ask it directly
(L{meshroute.ha.voters.asking_witness}): both as they would ask a
witness, with C{vote}, C{heartbeat} and C{start}.

An instance that does not serve answers its own group only: a grant for
another group could not be saved, and must not linger in memory.  Two
answers are news to the instance itself: a vote that grants it an epoch
at its active peer's request (the peer hands the router over to it), and
a heartbeat accepted from its peer (the active was heard).
"""

from collections.abc import Callable

from twisted.internet import defer

from meshroute.errors import NotServing
from meshroute.ha.records import InstanceVoterRecords
from meshroute.router.witness import Witness
from meshroute.wire import frames


class OwnVoter:
    """
    The voter of the instance C{instance}, answering as its C{witness}
    does, over C{records}.

    @param handed_over: called with a vote request it granted to this
        instance at the peer's request (a hand-over).
    @param peer_heard: called when it accepted a heartbeat of the peer.
    """

    def __init__(self, witness: Witness, records: InstanceVoterRecords, group: str,
                 instance: str, peer_instance: str,
                 handed_over: Callable[[frames.VoteRequest], None],
                 peer_heard: Callable[[], None]) -> None:
        self._witness = witness
        self._records = records
        self._group = group
        self._instance = instance
        self._peer_instance = peer_instance
        self._handed_over = handed_over
        self._peer_heard = peer_heard
        self._serving = False

    def granted_epoch(self) -> int:
        """
        The newest epoch this voter granted in its own group (0 if none).
        """
        record = self._witness.records().get(self._group)
        return record.granted_epoch if record is not None else 0

    # -- while the instance serves ----------------------------------------

    def serve(self, store) -> None:
        """
        The instance serves on C{store}: other groups' records are read
        from and saved there, and no voter of another group held from
        before may shadow them (the witness loads them from this store;
        the other instance may have granted some).
        """
        self._records.serve(store)
        self._witness.retain(self._group)
        self._serving = True

    def instance_stopped(self) -> None:
        """
        The instance stopped serving its group's router.
        """
        self._witness.own_instance_stopped(self._group)

    def stop_serving(self) -> None:
        """
        The instance's router stopped: other groups' records are the next
        active's.
        """
        self._serving = False
        self._records.stop_serving()
        self._witness.retain(self._group)

    # -- as others ask it ---------------------------------------------------

    def vote(self, peer: str, frame: frames.VoteRequest) -> defer.Deferred:
        """
        Answer a vote request; one that grants this instance an epoch at
        the peer's request is a hand-over.
        """
        if not self._answers(frame.group):
            return self._not_serving(frame.group)
        return self._witness.vote(peer, frame).addCallback(self._voted, frame)

    def heartbeat(self, peer: str, frame: frames.Heartbeat) -> defer.Deferred:
        """
        Answer a heartbeat; one accepted from the peer is the peer heard.
        """
        if not self._answers(frame.group):
            return self._not_serving(frame.group)
        return self._witness.heartbeat(peer, frame).addCallback(self._heard, frame)

    def start(self, peer: str, frame: frames.StartQuery) -> defer.Deferred:
        """
        Answer the start-up question (with this instance's data position).
        """
        if not self._answers(frame.group):
            return self._not_serving(frame.group)
        return self._witness.start(peer, frame)

    def _answers(self, group: str) -> bool:
        """
        Whether this voter answers C{group} now: its own group always,
        another only while the instance serves.
        """
        return self._records.owns(group) or self._serving

    def _not_serving(self, group: str) -> defer.Deferred:
        """
        No answer (the vote connection closes), and the voter is not
        touched.
        """
        return defer.fail(NotServing(f"{self._instance} is not active: it answers no "
                                     f"vote of group {group!r}"))

    def _voted(self, answer: frames.VoteAnswer, frame: frames.VoteRequest):
        if (answer.granted and frame.candidate == self._instance
                and frame.requester == self._peer_instance):
            self._handed_over(frame)
        return answer

    def _heard(self, answer: frames.HeartbeatAnswer, frame: frames.Heartbeat):
        if answer.accepted and frame.instance == self._peer_instance:
            self._peer_heard()
        return answer
