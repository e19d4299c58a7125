"""
The witness side of HA voting: every router votes for the HA groups that
ask it.

A router answers vote requests and heartbeats that arrive on vote
connections to its routing listener (docs/protocol.md, "Vote
connections").  For each group that ever asked, L{Witness} holds one
L{quorum.Voter}, built at start from the record the store last saved
(L{meshroute.interfaces.IVoterRecords}); the rules are the voter's, not
this module's, and so is rule 0, which weighs one group's request
against the voters of the other groups of the same router name (a pair
whose C{group-name}s differ must never be granted two epochs at once).
What this module adds is durability and order: after every request or
heartbeat it saves the group's record if it changed, and answers only
once that save, and every save before it, is durable.  A grant that is
not durable is never answered: if the save fails, the caller gets the
failure instead of the answer (the vote connection closes), and the
next request saves the record again before it is answered.

The lease a voter waits out (rule 2 of L{meshroute.harules.quorum}) is
the group's C{lease-timeout}, which the group's instances send in every
request and heartbeat; the witness keeps the longest it was told,
durably, so that no request can shorten what an active counts on.

It also answers the start-up question (L{frames.StartQuery}): who is
active, and its record, as L{quorum.Voter.start_answer} says; an HA
instance's own witness, which its peer asks over the replication
listener, adds its own data position.

A part of the router core, not of the pair's runtime (L{meshroute.ha}):
every router is a witness, HA or not (L{meshroute.router.service.RouterService}
builds one), and an HA instance builds its own from the same class over
its own records.  So it rests on the rules (L{meshroute.harules}) and a
store's L{meshroute.interfaces.IVoterRecords}, and on nothing of HA's
runtime.
"""

from collections.abc import Callable
from dataclasses import dataclass

from twisted.internet.defer import Deferred, succeed
from twisted.internet.interfaces import IReactorTime
from twisted.logger import Logger
from twisted.python.failure import Failure

from meshroute import events
from meshroute.errors import NotServing, StoreFull
from meshroute.harules import quorum
from meshroute.said_once import SaidOnce
from meshroute.store import ExecutorStopped
from meshroute.wire import frames

log = Logger()


@dataclass(frozen=True)
class _NotSaved:
    """
    What a group's last save fired with when it failed: its waiters fail
    too, and no one else sees the failure twice.
    """

    failure: Failure


@dataclass
class _Group:
    """
    One group's voter and where its record stands.

    @ivar submitted: the (record, lease_timeout_ms) last handed to the
        store; None when it must be saved again (the last save failed).
    @ivar durable: fires with None once C{submitted} is durable, or with a
        L{_NotSaved}.
    """

    voter: quorum.Voter
    lease_timeout_ms: int
    submitted: tuple | None
    durable: Deferred


class Witness:
    """
    The voters of one router, one per HA group that asked it.

    @param name: the name this router votes as (its router name).
    @param store: an L{meshroute.interfaces.IVoterRecords}.
    @param own_position: on an HA instance, its own data position now
        (a L{quorum.LogPosition}), told in start answers; None for a
        witness, which holds no data of the group.
    """

    def __init__(self, name: str, store, clock: IReactorTime, event_log: events.EventLog,
                 own_position: Callable[[], quorum.LogPosition] | None = None):
        self.name = name
        self._own_position = own_position
        self._store = store
        self._clock = clock
        self._events = event_log
        self._groups: dict[str, _Group] = {}
        #: A record was not saved for a full disk since the last one
        #: saved: said once, not at every request (one each
        #: heartbeat-interval) while the disk stays full.
        self._full = SaidOnce(log)

    def load(self) -> Deferred:
        """
        Build a voter for every group whose record the store holds, as
        restarted now (it acts as if it had just heard the instance it
        last granted).  Fires when loaded; call before any request.

        A group this witness already holds keeps its voter (its record is
        the newest): an HA instance loads again when it becomes active,
        to add the other groups' records the replicated store holds
        (L{meshroute.ha.records.InstanceVoterRecords}).
        """
        return self._store.voter_records().addCallback(self._loaded)

    def retain(self, group: str) -> None:
        """
        Forget every group's voter but C{group}'s: an HA instance that
        stops serving no longer answers other groups, and when it serves
        again it loads their records as the other instance left them.
        """
        self._groups = {name: state for name, state in self._groups.items() if name == group}

    def _loaded(self, records: dict) -> None:
        now = self._clock.seconds()
        for group, (record, lease_timeout_ms) in records.items():
            if group in self._groups:
                continue
            voter = quorum.Voter(self.name, lease_timeout_ms / 1000, record, now)
            self._groups[group] = _Group(voter, lease_timeout_ms, (record, lease_timeout_ms),
                                         succeed(None))

    def records(self) -> dict[str, quorum.VoterRecord]:
        """
        Every group's current record (the durable one, or the one being
        saved).
        """
        return {group: state.voter.record for group, state in self._groups.items()}

    def own_instance_stopped(self, group: str) -> None:
        """
        The HA instance this voter belongs to stopped serving C{group}'s
        router (L{quorum.Voter.own_instance_stopped}).
        """
        state = self._groups.get(group)
        if state is not None:
            state.voter.own_instance_stopped()

    def vote(self, peer: str, frame: frames.VoteRequest) -> Deferred:
        """
        Answer a vote request from router C{peer}.

        @return: Deferred firing with the L{frames.VoteAnswer} once the
            record it rests on is durable.
        """
        state = self._group(frame.group, frame.lease_timeout_ms)
        request = quorum.VoteRequest(
            candidate=frame.candidate,
            requester=frame.requester,
            epoch=frame.epoch,
            position=quorum.LogPosition(frame.position_epoch, frame.position),
            alone=frame.alone,
        )
        vote = state.voter.request(request, self._clock.seconds(), self._others(frame.group))
        answer = frames.VoteAnswer(frame.group, self.name, vote.epoch, vote.granted,
                                   vote.reason or "", vote.granted_epoch)
        return self._when_durable(frame.group, state).addCallback(
            self._voted, peer, frame, answer)

    def _voted(self, _, peer: str, frame: frames.VoteRequest,
               answer: frames.VoteAnswer) -> frames.VoteAnswer:
        self._events.emit(
            events.HA_VOTE, group=frame.group, peer=peer, candidate=frame.candidate,
            requester=frame.requester, epoch=frame.epoch, granted=answer.granted,
            reason=answer.reason or None, granted_epoch=answer.granted_epoch,
        )
        log.info(
            "HA group {group}: {verdict} epoch {epoch} to {candidate} (asked by {requester} "
            "through {peer}){why}",
            group=frame.group, verdict="granted" if answer.granted else "refused",
            epoch=frame.epoch, candidate=frame.candidate, requester=frame.requester, peer=peer,
            why="" if answer.granted else f": {answer.reason}",
        )
        if answer.reason == quorum.GROUP_MISMATCH:
            self._mismatch(frame.group, frame.candidate)
        return answer

    def _mismatch(self, group: str, instance: str) -> None:
        """
        Say loudly that two groups carry one router name: a C{group-name}
        differs between the configurations of one router's instances.
        """
        rival_groups = sorted(name for name, state in self._groups.items()
                              if name != group and quorum.rivals(instance, [state.voter]))
        log.warn(
            "HA group {group}: {instance} refused ({reason}): router {router} is also "
            "served by group {rivals}, whose active this voter still hears; check "
            "ha.group-name in both instances' configurations",
            group=group, instance=instance, reason=quorum.GROUP_MISMATCH,
            router=quorum.router_of(instance), rivals=", ".join(rival_groups),
        )

    def heartbeat(self, peer: str, frame: frames.Heartbeat) -> Deferred:
        """
        Answer the active's heartbeat, relayed by router C{peer}.

        @return: Deferred firing with the L{frames.HeartbeatAnswer} once
            the record it rests on is durable.
        """
        state = self._group(frame.group, frame.lease_timeout_ms)
        beat = quorum.Heartbeat(
            instance=frame.instance,
            epoch=frame.epoch,
            position=quorum.LogPosition(frame.position_epoch, frame.position),
            confirmed=quorum.LogPosition(frame.confirmed_epoch, frame.confirmed_position),
            sent_at=frame.sent_at,
        )
        heard = state.voter.heartbeat(beat, self._clock.seconds(), self._others(frame.group))
        answer = frames.HeartbeatAnswer(frame.group, self.name, heard.accepted, heard.sent_at,
                                        heard.granted_epoch)
        return self._when_durable(frame.group, state).addCallback(
            self._heard, peer, frame, answer)

    def _heard(self, _, peer: str, frame: frames.Heartbeat,
               answer: frames.HeartbeatAnswer) -> frames.HeartbeatAnswer:
        if not answer.accepted:
            self._events.emit(
                events.HA_HEARTBEAT_REFUSED, group=frame.group, peer=peer,
                instance=frame.instance, epoch=frame.epoch, granted_epoch=answer.granted_epoch,
            )
            log.info(
                "HA group {group}: refused the heartbeat of {instance} in epoch {epoch}: "
                "epoch {granted} was granted",
                group=frame.group, instance=frame.instance, epoch=frame.epoch,
                granted=answer.granted_epoch,
            )
        return answer

    def start(self, peer: str, frame: frames.StartQuery) -> Deferred:
        """
        Answer the start-up question of an instance of C{frame.group}
        (relayed by router C{peer}): a group never heard of has an empty
        record and no active.

        @return: Deferred firing with the L{frames.StartAnswer} once the
            record it tells is durable.
        """
        own = None if self._own_position is None else self._own_position()
        state = self._groups.get(frame.group)
        if state is None:
            answer = quorum.StartAnswer(self.name, None, quorum.VoterRecord(), own)
            return succeed(_start_frame(frame.group, answer))
        answer = state.voter.start_answer(self._clock.seconds(), own)
        return self._when_durable(frame.group, state).addCallback(
            lambda _: _start_frame(frame.group, answer))

    def _group(self, group: str, lease_timeout_ms: int) -> _Group:
        """
        C{group}'s voter (a new one for a group never heard of), waiting
        out at least C{lease_timeout_ms}.
        """
        state = self._groups.get(group)
        if state is None:
            voter = quorum.Voter(self.name, lease_timeout_ms / 1000, quorum.VoterRecord(),
                                 self._clock.seconds())
            state = self._groups[group] = _Group(voter, lease_timeout_ms, None, succeed(None))
        elif lease_timeout_ms > state.lease_timeout_ms:
            state.lease_timeout_ms = lease_timeout_ms
            state.voter.lease_timeout = lease_timeout_ms / 1000
        return state

    def _others(self, group: str) -> list[quorum.Voter]:
        """
        The voters of every group but C{group}: rule 0 of
        L{meshroute.harules.quorum} picks the rivals among them (the groups of
        the same router name).
        """
        return [state.voter for name, state in self._groups.items() if name != group]

    def _when_durable(self, group: str, state: _Group) -> Deferred:
        """
        Save C{group}'s record if it changed since the last save; fire once
        the last save is durable (the store writes in submission order, so
        every earlier save is too), or fail if it could not be made so.
        """
        current = (state.voter.record, state.lease_timeout_ms)
        if current != state.submitted:
            state.submitted = current
            state.durable = self._store.save_voter_record(group, *current)
            state.durable.addCallbacks(self._saved, self._not_saved, errbackArgs=(group, state))
        waiter = Deferred()

        def fire(outcome):
            if isinstance(outcome, _NotSaved):
                waiter.errback(outcome.failure)
            else:
                waiter.callback(None)
            return outcome

        state.durable.addCallback(fire)
        return waiter

    def _saved(self, _) -> None:
        self._full.over("HA voter records are saved again; answers are sent")

    def _not_saved(self, failure: Failure, group: str, state: _Group) -> _NotSaved:
        if failure.check(StoreFull):
            self._full.trouble("HA voter record of group {group} not saved ({why}); no "
                               "answer is sent until one is", group=group,
                               why=failure.getErrorMessage())
        elif failure.check(ExecutorStopped, NotServing):
            # The records' store closed, or stopped being this instance's,
            # as it stops (a hand-over, a shutdown): unanswered is right,
            # and no fault.
            log.info("HA voter record of group {group} not saved ({why}); its answers "
                     "are not sent", group=group, why=failure.getErrorMessage())
        else:
            log.failure("cannot save an HA voter record; its answers are not sent", failure)
        state.submitted = None
        return _NotSaved(failure)


def _start_frame(group: str, answer: quorum.StartAnswer) -> frames.StartAnswer:
    """
    The wire form of a start answer (L{start_answer} is its inverse, but
    for the record's C{learned}).
    """
    record = answer.record
    own = answer.own_position
    return frames.StartAnswer(
        group, answer.voter, answer.active or "", record.granted_epoch,
        record.granted_to or "", record.granted_at.epoch, record.granted_at.position,
        record.confirmed.epoch, record.confirmed.position,
        [] if own is None else [own.epoch, own.position])


def start_answer(frame: frames.StartAnswer) -> quorum.StartAnswer:
    """
    A start answer as it came over the wire.  Its record does not say
    whether the voter learned its epoch (L{quorum.VoterRecord.learned}):
    that concerns only the voter's own grants, and the start-up rule reads
    the record for whether the asker is in sync.
    """
    own = frame.own_position
    return quorum.StartAnswer(
        frame.voter, frame.active or None,
        quorum.VoterRecord(frame.granted_epoch, frame.granted_to or None,
                           quorum.LogPosition(frame.granted_at_epoch, frame.granted_at_position),
                           quorum.LogPosition(frame.confirmed_epoch, frame.confirmed_position)),
        quorum.LogPosition(*own) if own else None)
