"""
The candidate and active side of HA voting: how one instance of a pair
reaches its group's voters and feeds their answers to the pure machines.

The voters of a group are the instance's own voter (asked directly,
through its L{meshroute.router.witness.Witness}, so that its record is
durable before its answer counts: L{asking_witness}), its peer (the
pair's other instance, over a vote connection to the peer's replication
listener) and the witnesses: other routers, each reached over a vote
connection to its routing listener (docs/protocol.md, "Vote
connections").  A L{WitnessConnection} keeps each vote connection up.

L{Voters} sends an election's L{quorum.VoteRequest} to every voter and
feeds each answer to the election (L{meshroute.harules.election}); once won,
the lease (L{meshroute.harules.lease}) sends each round of heartbeats to every
voter, the instance's own voter included (docs/ha.md, "The lease": only
then does that voter refuse the peer while the active serves), and counts
the answers.  A voter that does not answer is simply not counted: the
election's timeout and the lease's expiry are the machines' own.  A
witness's vote connection closes when a request stays unanswered for
C{stage-valid-timeout} and is dialled again under the connector retry
policy.  The witness closes it too when nothing was asked for
C{stage-valid-timeout} (the active's heartbeats keep it open; a candidate
between elections lets it fall idle): what is asked while it is down is
sent once it is up again, the newest vote request and the newest
heartbeat only (a late answer is harmless: the election ignores it once
decided, and the lease measures from the time the heartbeat was sent).

A request or start-up question written to a connection that then closes
unanswered is asked again on the next one, while it is the newest of its
kind and L{Voters} has not withdrawn it: it withdraws a request whose
election was lost or abandoned (a witness asked late would record a
grant no one counts, one that could refuse a healthy active's
heartbeats) and a start-up question whose round ended.  A won election's
request is still sent: the voter learns the grant the election counted
on, and a hand-over's request is how the peer learns it was handed the
router.  A heartbeat is not asked again: the next round is due within a
heartbeat-interval.  The witness's idle close is left as it is: a
request still on the wire when the witness's timer fires crosses the
close whatever the witness does (it cannot see a frame that has not
arrived), and a connection ends for other reasons too (a reset, a store
that failed), so only the asker, which knows what it still waits for,
can make up for a lost request; keeping idle connections open
(keepalives between elections) would be a new frame on vote connections
for every router of the mesh and would still need the re-send.  With it,
a request that crosses an idle close costs one reconnection: it goes out
as the next connection reaches voting, long before that connection's
idle timer, so the two cannot stay in lock-step.

A witness that does not know vote connections (link protocol version 2
closes the connection at the L{VoteHello}) never answers, said once in
the log.

Before any election, an instance that starts asks every voter who is
active (L{Voters.ask_start}, the start-up question, L{frames.StartQuery}
on a vote connection) and collects their L{quorum.StartAnswer}s, for
L{quorum.decide_start}.
"""

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace

from twisted.application.service import MultiService
from twisted.internet.defer import Deferred
from twisted.internet.interfaces import IDelayedCall, IReactorTime
from twisted.logger import Logger

from meshroute.harules import lease, quorum
from meshroute.harules.election import Defeat, ElectionInputs, start_election
from meshroute.link import reasons
from meshroute.link.connector import ConnectorService
from meshroute.link.context import RouterContext
from meshroute.link.retry import RetrySchedule
from meshroute.link.rotation import EndpointRotation
from meshroute.link.settings import ConnectorSettings
from meshroute.link.stages import CONNECT, VOTES
from meshroute.wire import frames
from meshroute.router.witness import start_answer

log = Logger()


@dataclass(frozen=True)
class StartQuestion:
    """
    The start-up question to a voter: who is active?  (Artemis'
    C{check-for-live-server}; answered by a L{quorum.StartAnswer}.)
    """


#: An answer from a voter: a vote, a heartbeat's answer, or a start answer.
Answer = quorum.Vote | quorum.HeartbeatAnswer | quorum.StartAnswer
#: What is sent to a voter.
Question = quorum.VoteRequest | quorum.Heartbeat | StartQuestion
#: How a voter asked directly is asked: a Deferred firing with its answer
#: (a failure, or no firing: not answered).
Ask = Callable[[Question], Deferred]


def _speaks_no_votes(core) -> bool:
    """
    Whether a vote connection that closed tells us the witness does not
    take vote connections: it closed (a version-2 router does, as a
    protocol error) or refused us C{version} before it welcomed us.
    """
    if core.stage != CONNECT:
        return False
    if core.close_reason == reasons.REJECTED:
        return core.close_detail == reasons.VERSION
    return core.close_reason in (reasons.PEER_CLOSED, reasons.PROTOCOL_ERROR)


class WitnessConnection(ConnectorService):
    """
    The vote connection to one witness, dialled again whenever it closes
    (the routing connector's service and retry policy, making vote
    connections instead of links).

    @ivar deliver: called with each answer, as a L{quorum.Vote},
        L{quorum.HeartbeatAnswer} or L{quorum.StartAnswer} from the
        witness.
    """

    #: What its connections are for (L{meshroute.link.link.LinkProtocol}).
    purpose = VOTES

    def __init__(self, context: RouterContext, settings: ConnectorSettings,
                 endpoints: EndpointRotation, schedule: RetrySchedule, clock: IReactorTime,
                 group: str, lease_timeout: float, voter: str | None = None) -> None:
        """
        @param settings: the secret, the witness's router name
            (C{expected_peer}), and C{stage_valid_timeout_ms}: how long an
            unanswered request keeps the connection open.
        @param voter: the name the witness votes as: its router name (the
            default), or for the pair's other instance, which carries this
            router's name, that instance's name.
        """
        super().__init__(context, settings, endpoints, schedule, clock, side=self)
        self.witness = voter if voter is not None else settings.expected_peer
        self.setName(f"witness:{self.witness}")
        self.group = group
        self.lease_timeout_ms = round(lease_timeout * 1000)
        self.deliver: Callable[[Answer], None] = lambda answer: None
        self._link = None
        self._said_no_votes = False
        self._held: dict[type, Question] = {}
        # Sent on the connection in voting, not answered yet (the witness
        # answers in order).
        self._unanswered: list[Question] = []
        # The newest question of each kind asked and not withdrawn.
        self._wanted: dict[type, Question] = {}

    # -- VoteSide ---------------------------------------------------------

    def voting(self, link) -> None:
        self._link = link
        self._unanswered = []
        self._said_no_votes = False
        held, self._held = self._held, {}
        for question in held.values():
            self.ask(question)

    def answered(self,
                 frame: frames.VoteAnswer | frames.HeartbeatAnswer | frames.StartAnswer) -> None:
        if self._unanswered:
            del self._unanswered[0]
        if frame.group == self.group:
            self.deliver(_answer(self.witness, frame))

    def closed(self, core) -> None:
        if core.link is self._link:
            self._link = None
            self._hold_unanswered()
        if _speaks_no_votes(core) and not self._said_no_votes:
            self._said_no_votes = True
            log.warn(
                "HA group {group}: witness {witness} at {endpoint} does not take vote "
                "connections ({reason} {detail} before Welcome; a router of link protocol "
                "version 2 does that): counted as silent, dialled again",
                group=self.group, witness=self.witness, endpoint=core.endpoint,
                reason=core.close_reason, detail=core.close_detail,
            )

    def _hold_unanswered(self) -> None:
        """
        The connection closed with requests and start-up questions not
        answered (the witness may have closed it as idle just as they
        crossed): hold those still wanted (the newest of their kind, not
        withdrawn) for the next connection.  Heartbeats are not asked
        again: the next one is due anyway, and an old one says nothing
        new.
        """
        unanswered, self._unanswered = self._unanswered, []
        for question in reversed(unanswered):
            if (not isinstance(question, quorum.Heartbeat)
                    and self._wanted.get(type(question)) is question):
                self._held[type(question)] = question

    @property
    def connected(self) -> bool:
        """
        Whether a vote connection is in voting.
        """
        return self._link is not None

    # -- asking -----------------------------------------------------------

    def ask(self, question: Question) -> None:
        """
        Send a vote request, heartbeat or start-up question now if the
        vote connection is in voting (and not closing), else once a vote
        connection is (replacing one of the same kind held).
        """
        self._wanted[type(question)] = question
        if self._link is None or self._link.core.close_reason is not None:
            self._held[type(question)] = question
        else:
            self._unanswered.append(question)
            self._link.ask(_frame(self.group, question, self.lease_timeout_ms))

    def withdraw(self, question: Question) -> None:
        """
        C{question} must not reach the witness late any more (its
        election was lost or abandoned, its start-up round ended): it is
        not sent on a later connection, whether held or left unanswered
        by one that closed.  (Questions are told apart by identity: every
        L{StartQuestion} is equal to every other.)
        """
        kind = type(question)
        if self._wanted.get(kind) is question:
            del self._wanted[kind]
        if self._held.get(kind) is question:
            del self._held[kind]


def _frame(group: str, question: Question, lease_timeout_ms: int):
    """
    The wire frame of a question for C{group}.
    """
    if isinstance(question, StartQuestion):
        return frames.StartQuery(group)
    if isinstance(question, quorum.VoteRequest):
        return frames.VoteRequest(
            group, question.candidate, question.requester, question.epoch,
            question.position.epoch, question.position.position, question.alone,
            lease_timeout_ms)
    return frames.Heartbeat(
        group, question.instance, question.epoch, question.position.epoch,
        question.position.position, question.confirmed.epoch, question.confirmed.position,
        question.sent_at, lease_timeout_ms)


def _answer(voter: str,
            frame: frames.VoteAnswer | frames.HeartbeatAnswer | frames.StartAnswer) -> Answer:
    """
    The answer C{voter} sent as C{frame}.
    """
    if isinstance(frame, frames.StartAnswer):
        return replace(start_answer(frame), voter=voter)
    if isinstance(frame, frames.VoteAnswer):
        return quorum.Vote(voter, frame.epoch, frame.granted, frame.reason or None,
                           frame.granted_epoch)
    return quorum.HeartbeatAnswer(voter, frame.accepted, frame.sent_at, frame.granted_epoch)


def asking_witness(witness, instance: str, group: str, lease_timeout: float) -> Ask:
    """
    How an instance asks its own voter: through its
    L{meshroute.router.witness.Witness}, as a vote connection would, so that
    the answer arrives only once the record it rests on is durable (a
    grant the instance counted must survive the instance's restart).

    @param witness: anything that answers as a L{meshroute.router.witness.Witness}
        does (C{vote}, C{heartbeat}, C{start}).
    @param instance: the instance asking (the C{peer} of the witness's
        events).
    """
    lease_timeout_ms = round(lease_timeout * 1000)

    def ask(question: Question) -> Deferred:
        frame = _frame(group, question, lease_timeout_ms)
        if isinstance(question, StartQuestion):
            answering = witness.start(instance, frame)
        elif isinstance(question, quorum.VoteRequest):
            answering = witness.vote(instance, frame)
        else:
            answering = witness.heartbeat(instance, frame)
        return answering.addCallback(lambda answer: _answer(answer.voter, answer))

    return ask


@dataclass
class _StartRound:
    """
    The start answers collected so far, voter → answer, until every voter
    answered or the timeout; C{question} is this round's own (withdrawn
    from the vote connections when the round ends).
    """

    decided: Callable[[list[quorum.StartAnswer]], None]
    question: StartQuestion = field(default_factory=StartQuestion)
    timer: IDelayedCall | None = None
    answers: dict[str, quorum.StartAnswer] = field(default_factory=dict)


class Voters(MultiService):
    """
    The voters of one HA instance, and the election or lease their
    answers feed.

    @param instance: this instance's name (the candidate and heartbeat
        name), its own voter's too.
    @param direct: the voters asked directly, name → L{Ask}: this
        instance's own voter (L{asking_witness}), and any other voter a
        caller reaches by itself.
    @param witnesses: one L{WitnessConnection} per voter reached over a
        vote connection (the witnesses, and the peer instance); started
        and stopped with this service.
    """

    def __init__(self, clock: IReactorTime, instance: str, direct: Mapping[str, Ask],
                 witnesses: Iterable[WitnessConnection]) -> None:
        super().__init__()
        self._clock = clock
        self.instance = instance
        self._direct = dict(direct)
        self._witnesses = list(witnesses)
        for witness in self._witnesses:
            witness.deliver = self._answered
            witness.setServiceParent(self)
        self.names = frozenset([instance, *self._direct,
                                *(witness.witness for witness in self._witnesses)])
        self._election: ElectionInputs | None = None
        # The request of the election under way (undecided), if any.
        self._request: quorum.VoteRequest | None = None
        self._tally: quorum.Tally | None = None
        self._requested_at = 0.0
        self._lease: lease.LeaseInputs | None = None
        self._lease_core: lease.LeaseCore | None = None
        self._lease_since = 0.0
        self._lease_epoch = 0
        self._start: _StartRound | None = None
        self._candidate: str | None = None

    def ask_start(self, timeout: float,
                  decided: Callable[[list[quorum.StartAnswer]], None]) -> None:
        """
        Ask every voter who is active (the start-up question); C{decided}
        is called once with the answers, as L{quorum.decide_start} takes
        them: when every voter answered, or C{timeout} seconds after
        asking with those that did (too few is that rule's C{WAIT}).  A
        new round replaces one still collecting (its C{decided} is not
        called).
        """
        self._end_start_round()
        self._start = _StartRound(decided)
        self._start.timer = self._clock.callLater(timeout, self._start_decided)
        self._ask_everyone(self._start.question)

    def _start_decided(self) -> None:
        decided, answers = self._start.decided, list(self._start.answers.values())
        self._end_start_round()
        decided(answers)

    def _end_start_round(self) -> None:
        if self._start is not None:
            if self._start.timer.active():
                self._start.timer.cancel()
            self._withdraw(self._start.question)
        self._start = None

    def stopService(self):
        self._end_start_round()
        self.abandon()
        return super().stopService()

    def connected(self) -> dict[str, bool]:
        """
        Voter → whether its vote connection is up (voters asked directly
        are always reachable).
        """
        return {**{name: True for name in self._direct},
                **{witness.witness: witness.connected for witness in self._witnesses}}

    def abandon(self) -> None:
        """
        Give up the election under way, if any: it reports nothing.
        """
        if self._election is not None:
            self._election.abandon()
        self._withdraw_undecided()

    def elect(self, request: quorum.VoteRequest, timeout: float,
              won: Callable[[int], None], lost: Callable[[Defeat], None]) -> ElectionInputs:
        """
        Ask every voter for C{request.epoch}; C{won} or C{lost} is called
        once (L{start_election}).  An election still undecided is
        abandoned: only the newest is the caller's.
        """
        self.abandon()
        self._candidate = request.candidate
        self._tally = quorum.Tally(self.names, request.epoch)
        self._requested_at = self._clock.seconds()
        self._request = request

        def was_won(epoch: int) -> None:
            self._request = None
            won(epoch)

        def was_lost(defeat: Defeat) -> None:
            self._withdraw_undecided()
            lost(defeat)

        self._election = start_election(self._clock, self._tally, timeout, was_won, was_lost)
        self._ask_everyone(request)
        return self._election

    def _withdraw_undecided(self) -> None:
        """
        The election under way, if any, was lost or abandoned: its request
        is withdrawn from the vote connections (L{WitnessConnection.withdraw}).
        """
        request, self._request = self._request, None
        if request is not None:
            self._withdraw(request)

    def hold_lease(self, status: Callable[[], tuple[quorum.LogPosition, quorum.LogPosition]],
                   heartbeat_interval: float, lease_timeout: float,
                   lost: Callable[[str], None],
                   forced_epoch: int | None = None) -> lease.LeaseInputs:
        """
        Hold the lease of the epoch the last election won (call once it
        was won): its grants are the first round, then a heartbeat to
        every voter, this instance's own included, each
        C{heartbeat_interval}; C{lost} is called once, as by
        L{lease.hold_lease}.

        @param status: this instance's (position, confirmed position) now,
            for each heartbeat.
        @param forced_epoch: the epoch of a forced activation (C{meshroute
            ha force-activate}), which no election won: the operator's word
            stands for the grants of every voter now, and the voters learn
            the epoch from its heartbeats (or refuse them, knowing a newer
            one, which ends the lease).
        """
        if forced_epoch is not None:
            epoch, granted_by = forced_epoch, list(self.names)
            self._requested_at = self._clock.seconds()
        else:
            epoch = self._tally.epoch
            granted_by = [vote.voter for vote in self._tally.votes.values() if vote.granted]

        def send_heartbeats(sent_at: float) -> None:
            position, confirmed = status()
            self._ask_everyone(
                quorum.Heartbeat(self.instance, epoch, position, confirmed, sent_at))

        core = self._lease_core = lease.LeaseCore(
            self._clock, self.instance, self.names, heartbeat_interval,
            lease_timeout, send_heartbeats, lost)
        self._lease_since = self._requested_at
        self._lease_epoch = epoch
        self._lease = lease.hold_lease(core, self._requested_at, granted_by)
        return self._lease

    def lease_holds(self) -> bool:
        """
        Whether the last lease held is held now, by the clock
        (L{lease.LeaseCore.holds}): what an active checks before it
        confirms anything.
        """
        return self._lease_core is not None and self._lease_core.holds()

    def _ask_everyone(self, question: Question) -> None:
        """
        Ask the voters over vote connections and those asked directly.
        """
        for witness in self._witnesses:
            witness.ask(question)
        for name, ask in self._direct.items():
            ask(question).addCallbacks(self._answered, self._silent, errbackArgs=(name,))

    def _withdraw(self, question: Question) -> None:
        """
        No one waits for C{question}'s answers any more: the vote
        connections do not ask it again (L{WitnessConnection.withdraw}).
        """
        for witness in self._witnesses:
            witness.withdraw(question)

    def _silent(self, failure, name: str) -> None:
        log.info("HA: {voter} did not answer: {why}", voter=name,
                 why=failure.getErrorMessage())

    def _answered(self, answer: Answer) -> None:
        """
        Feed an answer to the election, or to the lease; an answer to a
        heartbeat sent before this lease began (an earlier lease's, held
        while a witness was down) is not this lease's: a refusal of an
        older epoch must not fence it.  Nor must the refusal of a voter
        that refuses it because it granted this instance the next epoch
        (the active asks for one to run alone, or replicated again, while
        its lease goes on), nor a refusal naming no newer epoch than the
        lease's own: a heartbeat of the epoch before, sent while the
        election for this one was under way, refused by a voter whose
        grant came after the election was won.
        """
        if isinstance(answer, quorum.StartAnswer):
            if self._start is not None and answer.voter in self.names:
                self._start.answers[answer.voter] = answer
                if len(self._start.answers) == len(self.names):
                    self._start_decided()
        elif isinstance(answer, quorum.Vote):
            if self._election is not None:
                self._election.got_vote(answer)
        elif self._lease is not None and answer.sent_at >= self._lease_since:
            if answer.accepted or (answer.granted_epoch > self._lease_epoch
                                   and not self._granted_this_instance(answer)):
                self._lease.got_answer(answer)

    def _granted_this_instance(self, answer: quorum.HeartbeatAnswer) -> bool:
        """
        Whether C{answer}'s voter granted this instance the epoch it names.
        """
        tally = self._tally
        if tally is None or tally.epoch != answer.granted_epoch:
            return False
        vote = tally.votes.get(answer.voter)
        return vote is not None and vote.granted and self._candidate == self.instance
