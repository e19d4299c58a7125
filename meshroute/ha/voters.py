"""
The candidate and active side of HA voting: how one instance of a pair
reaches its group's voters and feeds their answers to the pure machines.

The voters of a group are the instance's own voter (asked directly,
through its L{meshroute.ha.witness.Witness}, so that its record is
durable before its answer counts: L{asking_witness}), its peer (the
pair's other instance, over a vote connection to the peer's replication
listener) and the witnesses: other routers, each reached over a vote
connection to its routing listener (docs/protocol.md, "Vote
connections").  A L{WitnessConnection} keeps each vote connection up.

L{Voters} sends an election's L{quorum.VoteRequest} to every voter and
feeds each answer to the election (L{meshroute.ha.election}); once won,
the lease (L{meshroute.ha.lease}) sends each round of heartbeats to every
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
A witness that does not know vote connections (link protocol version 2
closes the connection at the L{VoteHello}) never answers, said once in
the log.
"""

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

from twisted.application.service import MultiService
from twisted.internet.defer import Deferred, succeed
from twisted.internet.interfaces import IDelayedCall, IReactorTime
from twisted.logger import Logger

from meshroute.ha import lease, quorum
from meshroute.ha.election import Defeat, ElectionInputs, start_election
from meshroute.link import reasons
from meshroute.link.connector import ConnectorService
from meshroute.link.handshake import CONNECT, ConnectorSettings, RouterContext
from meshroute.link.retry import RetrySchedule
from meshroute.link.rotation import EndpointRotation
from meshroute.wire import frames

log = Logger()

@dataclass(frozen=True)
class StartQuestion:
    """
    An instance that starts (or was fenced) asks a voter who is active
    (Artemis' C{check-for-live-server}); the voter answers with a
    L{quorum.StartAnswer}.
    """

    instance: str


#: An answer from a voter: a vote, a heartbeat's answer, a start answer.
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

    @ivar deliver: called with each answer, as a L{quorum.Vote} or
        L{quorum.HeartbeatAnswer} from the witness.
    """

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
        super().__init__(context, settings, endpoints, schedule, clock, vote_side=self)
        self.witness = voter if voter is not None else settings.expected_peer
        self.setName(f"witness:{self.witness}")
        self.group = group
        self.lease_timeout_ms = round(lease_timeout * 1000)
        self.deliver: Callable[[Answer], None] = lambda answer: None
        self._link = None
        self._said_no_votes = False
        self._held: dict[type, Question] = {}

    # -- VoteSide ---------------------------------------------------------

    def voting(self, link) -> None:
        self._link = link
        self._said_no_votes = False
        held, self._held = self._held, {}
        for question in held.values():
            self.ask(question)

    def answered(self, frame: frames.VoteAnswer | frames.HeartbeatAnswer) -> None:
        if frame.group == self.group:
            self.deliver(_answer(self.witness, frame))

    def closed(self, core) -> None:
        if core.link is self._link:
            self._link = None
        if _speaks_no_votes(core) and not self._said_no_votes:
            self._said_no_votes = True
            log.warn(
                "HA group {group}: witness {witness} at {endpoint} does not take vote "
                "connections ({reason} {detail} before Welcome; a router of link protocol "
                "version 2 does that): counted as silent, dialled again",
                group=self.group, witness=self.witness, endpoint=core.endpoint,
                reason=core.close_reason, detail=core.close_detail,
            )

    @property
    def connected(self) -> bool:
        """
        Whether a vote connection is in voting.
        """
        return self._link is not None

    # -- asking -----------------------------------------------------------

    def ask(self, question: Question) -> None:
        """
        Send a vote request or heartbeat now if the vote connection is in
        voting (and not closing), else once a vote connection is (replacing
        one of the same kind held).
        """
        if self._link is None or self._link.core.close_reason is not None:
            self._held[type(question)] = question
        else:
            self._link.ask(_frame(self.group, question, self.lease_timeout_ms))


def _frame(group: str, question: Question, lease_timeout_ms: int):
    """
    The wire frame of a vote request or heartbeat for C{group}.
    """
    if isinstance(question, quorum.VoteRequest):
        return frames.VoteRequest(
            group, question.candidate, question.requester, question.epoch,
            question.position.epoch, question.position.position, question.alone,
            lease_timeout_ms)
    return frames.Heartbeat(
        group, question.instance, question.epoch, question.position.epoch,
        question.position.position, question.confirmed.epoch, question.confirmed.position,
        question.sent_at, lease_timeout_ms)


def _answer(voter: str, frame: frames.VoteAnswer | frames.HeartbeatAnswer) -> Answer:
    """
    The answer C{voter} sent as C{frame}.
    """
    if isinstance(frame, frames.VoteAnswer):
        return quorum.Vote(voter, frame.epoch, frame.granted, frame.reason or None,
                           frame.granted_epoch)
    return quorum.HeartbeatAnswer(voter, frame.accepted, frame.sent_at, frame.granted_epoch)


def asking_witness(witness, instance: str, group: str, lease_timeout: float) -> Ask:
    """
    How an instance asks its own voter: through its
    L{meshroute.ha.witness.Witness}, as a vote connection would, so that
    the answer arrives only once the record it rests on is durable (a
    grant the instance counted must survive the instance's restart).

    @param witness: anything that answers as a L{meshroute.ha.witness.Witness}
        does (C{vote}, C{heartbeat}, C{start_answer}).
    @param instance: the instance asking (the C{peer} of the witness's
        events).
    """
    lease_timeout_ms = round(lease_timeout * 1000)

    def ask(question: Question) -> Deferred:
        if isinstance(question, StartQuestion):
            return succeed(witness.start_answer(group))
        frame = _frame(group, question, lease_timeout_ms)
        if isinstance(question, quorum.VoteRequest):
            answering = witness.vote(instance, frame)
        else:
            answering = witness.heartbeat(instance, frame)
        return answering.addCallback(lambda answer: _answer(answer.voter, answer))

    return ask


@dataclass
class _StartAnswers:
    """
    The start-up question being asked: the answers so far, and when it ends.
    """

    answered: Deferred
    timer: IDelayedCall
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
        self._tally: quorum.Tally | None = None
        self._requested_at = 0.0
        self._lease: lease.LeaseInputs | None = None
        self._lease_since = 0.0
        self._start: _StartAnswers | None = None

    def ask_start(self, timeout: float) -> Deferred:
        """
        Ask every voter who is active.

        @return: a Deferred firing with the L{quorum.StartAnswer}s, once
            every voter answered or after C{timeout} with those that did
            (the start-up rule needs a majority, and counts what it has).
        """
        self._start = _StartAnswers(Deferred(),
                                    self._clock.callLater(timeout, self._start_done))
        asked = self._start.answered
        self._ask_everyone(StartQuestion(self.instance))
        return asked

    def _start_done(self) -> None:
        start, self._start = self._start, None
        if start.timer.active():
            start.timer.cancel()
        start.answered.callback(list(start.answers.values()))

    def elect(self, request: quorum.VoteRequest, timeout: float,
              won: Callable[[int], None], lost: Callable[[Defeat], None]) -> ElectionInputs:
        """
        Ask every voter for C{request.epoch}; C{won} or C{lost} is called
        once (L{start_election}).  An election still undecided is
        abandoned: only the newest is the caller's.
        """
        self.abandon()
        self._tally = quorum.Tally(self.names, request.epoch)
        self._requested_at = self._clock.seconds()
        self._election = start_election(self._clock, self._tally, timeout, won, lost)
        self._ask_everyone(request)
        return self._election

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

    def stopService(self):
        self.abandon()
        return super().stopService()

    def hold_lease(self, status: Callable[[], tuple[quorum.LogPosition, quorum.LogPosition]],
                   heartbeat_interval: float, lease_timeout: float,
                   lost: Callable[[str], None]) -> lease.LeaseInputs:
        """
        Hold the lease of the epoch the last election won (call once it
        was won): its grants are the first round, then a heartbeat to
        every voter, this instance's own included, each
        C{heartbeat_interval}; C{lost} is called once, as by
        L{lease.hold_lease}.

        @param status: this instance's (position, confirmed position) now,
            for each heartbeat.
        """
        epoch = self._tally.epoch

        def send_heartbeats(sent_at: float) -> None:
            position, confirmed = status()
            self._ask_everyone(
                quorum.Heartbeat(self.instance, epoch, position, confirmed, sent_at))

        core = lease.LeaseCore(self._clock, self.instance, self.names, heartbeat_interval,
                         lease_timeout, send_heartbeats, lost)
        granted_by = [vote.voter for vote in self._tally.votes.values() if vote.granted]
        self._lease_since = self._requested_at
        self._lease = lease.hold_lease(core, self._requested_at, granted_by)
        return self._lease

    def _ask_everyone(self, question: Question) -> None:
        for witness in self._witnesses:
            witness.ask(question)
        for name, ask in self._direct.items():
            ask(question).addCallbacks(self._answered, self._silent, errbackArgs=(name,))

    def _silent(self, failure, name: str) -> None:
        log.info("HA: {voter} did not answer: {why}", voter=name,
                 why=failure.getErrorMessage())

    def _answered(self, answer: Answer) -> None:
        """
        Feed an answer to the election, or to the lease; an answer to a
        heartbeat sent before this lease began (an earlier lease's, held
        while a witness was down) is not this lease's: a refusal of an
        older epoch must not fence it.
        """
        if isinstance(answer, quorum.Vote):
            if self._election is not None:
                self._election.got_vote(answer)
        elif isinstance(answer, quorum.StartAnswer):
            if self._start is not None and answer.voter in self.names:
                self._start.answers[answer.voter] = answer
                if len(self._start.answers) == len(self.names):
                    self._start_done()
        elif self._lease is not None and answer.sent_at >= self._lease_since:
            self._lease.got_answer(answer)
