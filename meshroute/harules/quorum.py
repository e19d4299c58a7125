"""
The voting rules of an HA group, as pure logic.

The voters of a group are its primary, its backup and its witnesses; a
decision needs a majority of them (L{majority}).  Each voter keeps a
durable L{VoterRecord} per group and answers two kinds of message:

 - a L{VoteRequest} for a new epoch (L{Voter.request}): every activation
   of an instance takes a new epoch from a majority;
 - a L{Heartbeat} from the active instance (L{Voter.heartbeat}): it keeps
   the active's lease alive and tells the voter what has been confirmed.

The rules, in the order a voter applies them to a request:

 1. An epoch is granted at most once: a request for an epoch at or below
    the one the voter already granted is refused (C{stale-epoch}), except
    the same request again from the instance it was granted to (its
    answer may have been lost).  An epoch the voter learned from the
    heartbeats of the instance that won it (L{Voter.heartbeat}) it did
    not grant that instance: it refuses it to that instance too, for it
    may have granted it to the other one, and "one epoch, one winner"
    rests on no voter granting an epoch twice (any two majorities share
    a voter).  The winner needs no more grants for it.
 2. While the voter still hears the active's heartbeats (the last one
    less than C{lease-timeout} ago) it refuses (C{active-alive}) anyone
    but the active itself: the active may ask for the next epoch to run
    alone, to run replicated again, or to hand over to its peer.  The
    active's own voter hears it too: the active sends it every heartbeat
    (L{meshroute.harules.lease}), else the peer could win with its vote.
 3. Only an instance in sync at the epoch the voter knows is granted
    (C{not-in-sync}); see L{VoterRecord.in_sync}.

A voter writes its new record durably before it answers (the caller's
duty: L{Voter.request} returns the answer and leaves the new record in
L{Voter.record}).  What it heard and when is not durable: a voter that
restarts acts as if it had just heard the instance it last granted, so
that a restart never shortens an active's lease.

Positions: every instance describes its data by a L{LogPosition}, the
pair (epoch, position).  C{position} is the last store change it holds
durably (the replication stream's commit order); C{epoch} is the newest
epoch in which its data was complete: for the active, the epoch it
serves in; for a backup, the newest epoch whose start record (written by
the active, carrying the epoch's in-sync instances) names the backup as
in sync.  A backup still catching up during an epoch in which the active
runs alone receives that epoch's changes but not that epoch as its own:
it holds only part of what was confirmed in it.

One router name, one sequence of epochs.  The mesh fences an HA router
by its name (links and route advertisements carry the epoch, and a
neighbour refuses an epoch below the newest it saw for that name), so a
voter keeps the epochs of one router name apart from no one: two groups
whose instances carry the same router name (one instance's
C{group-name} mistyped) are rivals, and a voter answering one group
first applies rule 0 against the voters of the rival groups (L{rivals}):

 0. While it still hears an active of a rival group it refuses
    (C{group-mismatch}) every request and heartbeat of this one; and it
    grants, or accepts a heartbeat in, only an epoch above every epoch
    granted (or learned) for that router name in any group (C{stale-epoch}
    otherwise, telling the newest), and only to an instance in sync with
    what the rival groups' records know was confirmed (C{not-in-sync}:
    one router name, one history of confirmed changes).  So a voter
    never grants two groups of one router name epochs that could be
    served at once, the epochs of one router name only go up, whichever
    group asks, and an instance whose replication was refused never takes
    over the data it lacks.

The start-up rule (L{decide_start}) tells an instance that starts what to
do from the voters' answers: follow an active, resume (ask for the next
epoch) when it holds the newest data, or wait.
"""

from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from enum import Enum

#: Refusal reasons, as voters send them.
STALE_EPOCH = "stale-epoch"
ACTIVE_ALIVE = "active-alive"
NOT_IN_SYNC = "not-in-sync"
GROUP_MISMATCH = "group-mismatch"


def instance_name(router: str, ha_role: str) -> str:
    """
    The name an instance votes and is granted epochs as: both instances
    carry the router's name, so the configured role tells them apart.
    """
    return f"{router}/{ha_role}"


def router_of(instance: str) -> str:
    """
    The router name an instance (L{instance_name}) serves: what rule 0
    compares, read from the durable records themselves, so that it holds
    across a voter's restart.
    """
    return instance.partition("/")[0]


def rivals(instance: str, voters: "Iterable[Voter]") -> list["Voter"]:
    """
    Of C{voters} (one voter's voters of the I{other} groups), those whose
    group holds, or held, an epoch of C{instance}'s router name.
    """
    router = router_of(instance)
    return [voter for voter in voters
            if voter.record.granted_to is not None
            and router_of(voter.record.granted_to) == router]


def rival_refusal(rival_voters: "list[Voter]", epoch: int, now: float,
                  candidate: str | None = None,
                  position: "LogPosition | None" = None) -> tuple[str, int] | None:
    """
    Rule 0: why a request (from C{candidate} at C{position}) or a
    heartbeat (neither given) for C{epoch} is refused because of its
    router name's other groups (their voters, L{rivals}), with the newest
    epoch granted in them; None when it is not.
    """
    newest = max((voter.record.granted_epoch for voter in rival_voters), default=0)
    if any(voter.hears_active(now) for voter in rival_voters):
        return GROUP_MISMATCH, newest
    if epoch <= newest:
        return STALE_EPOCH, newest
    if candidate is not None and not all(
            voter.record.in_sync(candidate, position) for voter in rival_voters):
        return NOT_IN_SYNC, newest
    return None


def majority(voters: int) -> int:
    """
    The number of voters a decision needs: more than half of them.
    """
    return voters // 2 + 1


@dataclass(frozen=True, order=True)
class LogPosition:
    """
    How far an instance's data goes: compared as (epoch, position).

    @ivar epoch: the newest epoch in which this instance's data was
        complete (see the module docstring).
    @ivar position: the last store change it holds durably.
    """

    epoch: int
    position: int


#: Where a new, empty pair starts.
ORIGIN = LogPosition(0, 0)


@dataclass(frozen=True)
class VoterRecord:
    """
    What one voter must remember across restarts about one group.

    @ivar granted_epoch: the newest epoch this voter granted (or learned
        from the active's heartbeats); 0 before any.
    @ivar granted_to: the instance it granted C{granted_epoch} to.
    @ivar granted_at: that instance's position when it was granted.
    @ivar confirmed: the least position an instance must hold to be in
        sync, as far as this voter knows: the newest position an active
        reported as confirmed, and at least C{(E, 0)} once this voter
        granted epoch C{E} to an instance running alone (which from then
        on confirms changes its peer lacks).
    @ivar learned: C{granted_epoch} and C{granted_to} were learned from
        that instance's heartbeats, not granted by this voter, which may
        have granted that epoch to another instance: the same request
        again is not granted (rule 1).  Durable like the rest, so that a
        voter that restarts still knows which epochs it never granted.
    """

    granted_epoch: int = 0
    granted_to: str | None = None
    granted_at: LogPosition = ORIGIN
    confirmed: LogPosition = ORIGIN
    learned: bool = False

    def in_sync(self, instance: str, at: LogPosition) -> bool:
        """
        Whether C{instance}, holding data up to C{at}, holds everything
        this voter knows to have been confirmed.

        An instance is in sync when its (epoch, position) is at least
        C{confirmed}.  The instance last granted is also in sync while it
        holds at least what it held when granted: whatever was confirmed
        since, it confirmed itself (an instance that won an epoch to run
        alone and stopped before writing that epoch's start record has
        confirmed nothing in it).
        """
        if at >= self.confirmed:
            return True
        return instance == self.granted_to and at >= self.granted_at


@dataclass(frozen=True)
class VoteRequest:
    """
    A request for a new epoch.

    @ivar candidate: the instance that is to be active in C{epoch}.
    @ivar requester: who asks: the candidate itself, or the active handing
        over to its peer (failback, graceful shutdown).
    @ivar epoch: the epoch asked for.
    @ivar position: the candidate's position.
    @ivar alone: whether the candidate will run without an in-sync peer
        (failover, or the active's peer lost): the voter then raises its
        C{confirmed} to the start of C{epoch}.
    """

    candidate: str
    requester: str
    epoch: int
    position: LogPosition
    alone: bool


@dataclass(frozen=True)
class Vote:
    """
    A voter's answer to a L{VoteRequest}.

    @ivar reason: why it refused (L{STALE_EPOCH}, L{ACTIVE_ALIVE},
        L{NOT_IN_SYNC}, L{GROUP_MISMATCH}); C{None} for a grant.
    @ivar granted_epoch: the voter's newest granted epoch after answering,
        so that a candidate refused as stale knows which epoch to ask next.
    """

    voter: str
    epoch: int
    granted: bool
    reason: str | None
    granted_epoch: int


@dataclass(frozen=True)
class Heartbeat:
    """
    The active's periodic word to every voter.

    @ivar sent_at: the active's clock when it sent this heartbeat; echoed
        back, so that the active measures its lease from when it asked,
        not from when the answer arrived (L{meshroute.harules.lease}).
    @ivar confirmed: the newest position the active has confirmed to
        anyone (a send to a client, a hand-over to a neighbour).
    """

    instance: str
    epoch: int
    position: LogPosition
    confirmed: LogPosition
    sent_at: float


@dataclass(frozen=True)
class HeartbeatAnswer:
    """
    A voter's answer to a L{Heartbeat}: C{accepted}, or refused because
    the voter knows a newer epoch (C{granted_epoch}), and the active must
    fence itself.
    """

    voter: str
    accepted: bool
    sent_at: float
    granted_epoch: int


class Voter:
    """
    One voter's rules for one group, over its durable record.

    @ivar record: the durable L{VoterRecord}; after every call the caller
        persists it before sending the answer.
    @ivar heard_at: when the voter last heard the instance it granted
        (volatile).
    """

    def __init__(self, name: str, lease_timeout: float, record: VoterRecord, now: float) -> None:
        """
        @param record: the record as last persisted (L{VoterRecord()} for
            a voter new to the group).
        @param now: the time the voter (re)starts: it acts as if it had
            just heard the instance it last granted, so that a restarted
            voter never grants away an active that may still be serving.
            Unless that instance is the voter itself: an instance's own
            voter (named as the instance) restarts with it, and an
            instance that restarted holds no lease.
        """
        self.name = name
        self.lease_timeout = lease_timeout
        self.record = record
        self.heard_at: float | None = (
            now if record.granted_to not in (None, name) else None)

    def own_instance_stopped(self) -> None:
        """
        This voter is an instance's own (named as the instance), and the
        instance stopped serving (fenced, or handing over): it holds no
        lease any more, so its own last heartbeats no longer make the
        voter refuse others (C{active-alive}).  Otherwise a fenced
        instance following the new active in sync would refuse, for up to
        a lease-timeout, that active's hand-over to it.
        """
        if self.record.granted_to == self.name:
            self.heard_at = None

    def hears_active(self, now: float) -> bool:
        """
        Whether the active's heartbeats still arrive: the last one less
        than C{lease_timeout} ago.
        """
        return self.heard_at is not None and now - self.heard_at < self.lease_timeout

    def request(self, request: VoteRequest, now: float, others: Iterable["Voter"] = ()) -> Vote:
        """
        Answer a request for a new epoch (the rules of the module
        docstring, in order).

        @param others: this voter's voters of the other groups (rule 0).
        """
        refusal = rival_refusal(rivals(request.candidate, others), request.epoch, now,
                                request.candidate, request.position)
        if refusal is not None:
            reason, newest = refusal
            return Vote(self.name, request.epoch, False, reason,
                        max(newest, self.record.granted_epoch))
        record = self.record
        asked_again = (request.epoch, request.candidate) == (record.granted_epoch, record.granted_to)
        if asked_again and not record.learned:
            return self._vote(request, None)
        if request.epoch <= record.granted_epoch:
            return self._vote(request, STALE_EPOCH)
        if self.hears_active(now) and request.requester != record.granted_to:
            return self._vote(request, ACTIVE_ALIVE)
        if not record.in_sync(request.candidate, request.position):
            return self._vote(request, NOT_IN_SYNC)
        confirmed = record.confirmed
        if request.alone:
            confirmed = max(confirmed, LogPosition(request.epoch, 0))
        self.record = VoterRecord(
            granted_epoch=request.epoch,
            granted_to=request.candidate,
            granted_at=request.position,
            confirmed=confirmed,
        )
        # The grantee is about to serve: its lease runs from now.
        self.heard_at = now
        return self._vote(request, None)

    def heartbeat(self, beat: Heartbeat, now: float,
                  others: Iterable["Voter"] = ()) -> HeartbeatAnswer:
        """
        Answer the active's heartbeat: refuse one from an older epoch, or
        one rule 0 refuses (C{others}: this voter's voters of the other
        groups); otherwise note the time and what it confirmed.

        Only the instance that won an epoch sends heartbeats in it.  So a
        heartbeat of a newer epoch than the voter granted comes from an
        active that won it without this voter's grant (its request was
        lost), and one of the epoch the voter granted to another instance
        comes from the instance that won it with other voters' grants
        (the one this voter granted, cut off, asked in vain): either way
        the voter learns who holds that epoch, so it will never grant it
        to anyone else, and an instance cut off for a while does not
        fence the active when it returns.  Nor to the active itself: it
        won without this voter, which may have granted that epoch to the
        other instance (rule 1).
        """
        record = self.record
        refusal = rival_refusal(rivals(beat.instance, others), beat.epoch, now)
        if refusal is not None:
            return HeartbeatAnswer(self.name, False, beat.sent_at,
                                   max(refusal[1], record.granted_epoch))
        if beat.epoch < record.granted_epoch:
            return HeartbeatAnswer(self.name, False, beat.sent_at, record.granted_epoch)
        if (beat.epoch, beat.instance) != (record.granted_epoch, record.granted_to):
            record = replace(
                record,
                granted_epoch=beat.epoch,
                granted_to=beat.instance,
                granted_at=beat.position,
                learned=True,
            )
        self.record = replace(record, confirmed=max(record.confirmed, beat.confirmed))
        self.heard_at = now
        return HeartbeatAnswer(self.name, True, beat.sent_at, self.record.granted_epoch)

    def start_answer(self, now: float, own_position: LogPosition | None = None) -> "StartAnswer":
        """
        Answer an instance that starts and asks who is active.

        @param own_position: this voter's own data position when it is the
            other instance of the pair.
        """
        active = self.record.granted_to if self.hears_active(now) else None
        return StartAnswer(self.name, active, self.record, own_position)

    def _vote(self, request: VoteRequest, reason: str | None) -> Vote:
        return Vote(self.name, request.epoch, reason is None, reason, self.record.granted_epoch)


class Outcome(Enum):
    """
    Where an election stands.
    """

    WON = "won"
    LOST = "lost"
    UNDECIDED = "undecided"


@dataclass
class Tally:
    """
    The candidate's count of the votes for one epoch.

    A voter's latest answer counts (a retried request may turn a refusal
    into a grant); answers from non-voters and for other epochs are
    ignored.  The election is won with a majority of grants, lost as soon
    as the refusals leave too few voters for a majority, or as soon as a
    voter refuses it as stale (C{stale-epoch}): that voter granted this
    epoch, or a newer one, to another instance, so a new election above
    it is the way on, and waiting for silent voters (the active that won
    that epoch may be dead) would only delay it.
    """

    voters: frozenset[str]
    epoch: int
    votes: dict[str, Vote] = field(default_factory=dict)

    def record(self, vote: Vote) -> Outcome:
        """
        Count C{vote} and say where the election stands.
        """
        if vote.voter in self.voters and vote.epoch == self.epoch:
            self.votes[vote.voter] = vote
        return self.outcome()

    def outcome(self) -> Outcome:
        """
        Where the election stands with the votes counted so far.
        """
        needed = majority(len(self.voters))
        granted = sum(1 for vote in self.votes.values() if vote.granted)
        refused = len(self.votes) - granted
        if granted >= needed:
            return Outcome.WON
        if len(self.voters) - refused < needed:
            return Outcome.LOST
        if any(vote.reason == STALE_EPOCH for vote in self.votes.values()):
            return Outcome.LOST
        return Outcome.UNDECIDED

    def refusals(self) -> dict[str, str]:
        """
        The refusals so far, voter → reason.
        """
        return {v.voter: v.reason for v in self.votes.values() if not v.granted}

    def newest_epoch(self) -> int:
        """
        The newest epoch any voter reported having granted: a new
        election must ask for one above it.
        """
        return max([self.epoch, *(vote.granted_epoch for vote in self.votes.values())])


@dataclass(frozen=True)
class StartAnswer:
    """
    A voter's answer to an instance that starts and asks who is active
    (Artemis' C{check-for-live-server}).

    @ivar active: the instance whose heartbeats the voter hears, if any.
    @ivar record: the voter's durable record for the group.
    @ivar own_position: when the voter is the other instance of the pair,
        its own data position; C{None} for witnesses.
    """

    voter: str
    active: str | None
    record: VoterRecord
    own_position: LogPosition | None = None


class StartDecision(Enum):
    """
    What an instance that starts does next.
    """

    #: No majority answered yet: ask again, never activate.
    WAIT = "wait"
    #: Another instance is active: become its backup and catch up.
    FOLLOW = "follow"
    #: Nothing is active and this instance holds the newest data: ask
    #: the voters for the next epoch.
    RESUME = "resume"
    #: Nothing is active and the peer holds newer data: leave resuming to
    #: it, then follow.
    DEFER = "defer"
    #: This instance lacks changes some voter knows were confirmed: it
    #: never activates by itself (only C{meshroute ha force-activate}).
    STALE = "stale"


def decide_start(
    instance: str,
    is_primary: bool,
    position: LogPosition,
    voters: frozenset[str],
    answers: list[StartAnswer],
) -> StartDecision:
    """
    The start-up rule: an instance asks the voters first; if another
    instance is active it follows; if both instances were stopped, the
    one with the newest (epoch, position) resumes by itself, and a stale
    one never activates.

    C{instance} counts as one of the answers (it is a voter too, its own
    record given among C{answers}).  When both instances hold the same
    position the primary resumes and the backup defers; the epoch vote
    makes sure only one of them can win, whatever this rule decides.
    """
    answered = {a.voter: a for a in answers if a.voter in voters}
    if len(answered) < majority(len(voters)):
        return StartDecision.WAIT
    if any(a.active not in (None, instance) for a in answered.values()):
        return StartDecision.FOLLOW
    if not all(a.record.in_sync(instance, position) for a in answered.values()):
        return StartDecision.STALE
    for answer in answered.values():
        peer = answer.own_position
        if answer.voter == instance or peer is None:
            continue
        if peer > position or (peer == position and not is_primary):
            return StartDecision.DEFER
    return StartDecision.RESUME
