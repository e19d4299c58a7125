"""
Tests for L{meshroute.harules.quorum}: each voting rule on its own, the tally,
the start-up rule, and (with hypothesis) the safety of the rules under
random message orders, drops and voter restarts.
"""

from dataclasses import dataclass, field

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from meshroute.harules.quorum import (
    ACTIVE_ALIVE,
    GROUP_MISMATCH,
    NOT_IN_SYNC,
    ORIGIN,
    STALE_EPOCH,
    Heartbeat,
    LogPosition,
    Outcome,
    StartAnswer,
    StartDecision,
    Tally,
    Vote,
    Voter,
    VoteRequest,
    VoterRecord,
    decide_start,
    instance_name,
    majority,
    router_of,
)

LEASE = 3.0
VOTERS = frozenset({"p", "b", "w"})


def request(candidate="b", epoch=2, position=LogPosition(1, 10), alone=True, requester=None):
    return VoteRequest(candidate, requester or candidate, epoch, position, alone)


def granted_to_p(epoch=1, confirmed=LogPosition(1, 10)) -> VoterRecord:
    return VoterRecord(epoch, "p", LogPosition(0, 0), confirmed)


# -- majority -----------------------------------------------------------------


@pytest.mark.parametrize("voters,needed", [(1, 1), (2, 2), (3, 2), (4, 3), (5, 3), (6, 4)])
def test_majority_is_more_than_half(voters, needed):
    assert majority(voters) == needed


# -- the voter's rules --------------------------------------------------------


def test_positions_compare_epoch_first():
    assert LogPosition(2, 0) > LogPosition(1, 1_000_000)
    assert LogPosition(2, 5) > LogPosition(2, 4)


def test_a_fresh_voter_grants_the_first_epoch():
    voter = Voter("w", LEASE, VoterRecord(), now=0.0)
    vote = voter.request(request("p", 1, ORIGIN), now=0.0)
    assert vote.granted and vote.reason is None
    assert voter.record.granted_epoch == 1 and voter.record.granted_to == "p"


def test_an_epoch_is_granted_to_one_instance_only():
    voter = Voter("w", LEASE, VoterRecord(), now=0.0)
    assert voter.request(request("p", 1, ORIGIN), now=0.0).granted
    vote = voter.request(request("b", 1, ORIGIN), now=10.0)
    assert not vote.granted and vote.reason == STALE_EPOCH
    assert voter.record.granted_to == "p"


def test_the_same_request_again_is_granted_again():
    """
    The candidate's first answer may have been lost: asking again for the
    same epoch gets the same grant.
    """
    voter = Voter("w", LEASE, VoterRecord(), now=0.0)
    voter.request(request("p", 1, ORIGIN), now=0.0)
    assert voter.request(request("p", 1, ORIGIN), now=1.0).granted


def test_stale_epochs_are_refused_and_the_newest_is_told():
    voter = Voter("w", LEASE, granted_to_p(epoch=5), now=0.0)
    vote = voter.request(request("b", 4), now=100.0)
    assert (vote.granted, vote.reason, vote.granted_epoch) == (False, STALE_EPOCH, 5)


def test_refuses_while_it_hears_the_active():
    voter = Voter("w", LEASE, granted_to_p(), now=0.0)
    voter.heartbeat(Heartbeat("p", 1, LogPosition(1, 10), LogPosition(1, 10), 9.0), now=10.0)
    vote = voter.request(request("b", 2, LogPosition(1, 10)), now=10.0 + LEASE - 0.001)
    assert vote.reason == ACTIVE_ALIVE
    assert voter.request(request("b", 2, LogPosition(1, 10)), now=10.0 + LEASE).granted


def test_the_active_itself_may_take_the_next_epoch_while_heard():
    voter = Voter("w", LEASE, granted_to_p(), now=0.0)
    assert voter.request(request("p", 2, LogPosition(1, 10)), now=0.5).granted


def test_the_active_may_hand_over_to_its_peer_while_heard():
    voter = Voter("w", LEASE, granted_to_p(), now=0.0)
    handover = request("b", 2, LogPosition(1, 10), alone=False, requester="p")
    assert voter.request(handover, now=0.5).granted
    assert voter.record.granted_to == "b"


def test_a_restarted_voter_acts_as_if_it_just_heard_the_active():
    """
    Whether it heard the active is not durable: a voter that restarts must
    not grant the active's place away before a whole lease-timeout.
    """
    restarted = Voter("w", LEASE, granted_to_p(), now=50.0)
    assert restarted.request(request("b", 2), now=51.0).reason == ACTIVE_ALIVE
    assert restarted.request(request("b", 2), now=53.0).granted


def test_an_instance_s_own_voter_stops_hearing_its_instance_once_it_stops_serving():
    """
    The active fenced itself (its lease ran out while it was frozen) and
    follows the new active in sync; its own voter still heard its own
    last heartbeats.  Once the instance stopped serving it holds no lease:
    its voter takes the new active's hand-over to it (a graceful stop)
    instead of refusing it active-alive, which turned the hand-over into
    a takeover.
    """
    voter = Voter("b", LEASE, VoterRecord(20, "b", LogPosition(19, 5), LogPosition(20, 9)),
                  now=0.0)
    voter.heartbeat(Heartbeat("b", 20, LogPosition(20, 9), LogPosition(20, 9), 10.0), now=10.0)
    handover = request("b", 23, LogPosition(20, 9), alone=True, requester="p")
    assert voter.request(handover, now=10.5).reason == ACTIVE_ALIVE
    voter.own_instance_stopped()
    assert voter.request(handover, now=10.6).granted


def test_an_instance_s_own_voter_restarted_does_not_hear_its_own_instance():
    """
    An instance's own voter restarts with its instance (one process): the
    instance it last granted, itself, holds no lease any more.  So the
    active peer may hand the router over to it at once (failback), though
    no heartbeat of the peer reached this voter yet (its vote connection
    was down while the peer took its epochs).
    """
    restarted = Voter("p", LEASE, granted_to_p(), now=50.0)
    handover = request("p", 3, LogPosition(1, 10), alone=False, requester="b")
    assert restarted.request(handover, now=50.5).granted


def test_the_active_s_own_voter_refuses_its_peer_only_by_hearing_its_heartbeats():
    """
    With three voters, the backup and the active's own voter are a
    majority, sharing no voter but the active with the majority (active
    and witness) that renews its lease.  So the active sends every
    heartbeat to its own voter too (docs/ha.md, "The lease"): a backup
    that stopped hearing the active while the witness still does must not
    win through the active's own vote.
    """
    beat = Heartbeat("p", 1, LogPosition(1, 10), LogPosition(1, 10), 4.5)
    takeover = request("b", 2, LogPosition(1, 10))
    deaf = Voter("p", LEASE, granted_to_p(), now=0.0)
    assert deaf.request(takeover, now=5.0).granted
    hearing = Voter("p", LEASE, granted_to_p(), now=0.0)
    hearing.heartbeat(beat, now=4.5)
    assert hearing.request(takeover, now=5.0).reason == ACTIVE_ALIVE


def test_an_instance_behind_the_confirmed_position_is_refused():
    voter = Voter("w", LEASE, granted_to_p(confirmed=LogPosition(1, 10)), now=-10.0)
    vote = voter.request(request("b", 2, LogPosition(1, 9)), now=0.0)
    assert vote.reason == NOT_IN_SYNC
    assert voter.request(request("b", 2, LogPosition(1, 10)), now=0.0).granted


def test_heartbeats_teach_the_confirmed_position():
    voter = Voter("w", LEASE, granted_to_p(confirmed=LogPosition(1, 10)), now=0.0)
    answer = voter.heartbeat(Heartbeat("p", 1, LogPosition(1, 30), LogPosition(1, 25), 0.5), 1.0)
    assert answer.accepted and answer.sent_at == 0.5
    assert voter.record.confirmed == LogPosition(1, 25)
    # The confirmed position never goes back.
    voter.heartbeat(Heartbeat("p", 1, LogPosition(1, 30), LogPosition(1, 20), 1.5), 2.0)
    assert voter.record.confirmed == LogPosition(1, 25)
    assert voter.request(request("b", 2, LogPosition(1, 24)), now=10.0).reason == NOT_IN_SYNC


def test_an_alone_epoch_makes_the_peer_stale():
    """
    Once a voter granted epoch 2 to p running alone, p may confirm
    changes b lacks: b, whose data is complete only up to epoch 1, is
    refused however long its log.
    """
    voter = Voter("w", LEASE, granted_to_p(), now=0.0)
    assert voter.request(request("p", 2, LogPosition(1, 40), alone=True), now=0.0).granted
    assert voter.record.confirmed == LogPosition(2, 0)
    late = voter.request(request("b", 3, LogPosition(1, 10**9)), now=100.0)
    assert late.reason == NOT_IN_SYNC


def test_the_alone_grantee_stays_in_sync_before_its_first_change():
    """
    p won epoch 2 to run alone and stopped before writing anything in it:
    it has confirmed nothing b lacks, and it may resume.
    """
    voter = Voter("w", LEASE, granted_to_p(), now=0.0)
    voter.request(request("p", 2, LogPosition(1, 40), alone=True), now=0.0)
    assert voter.request(request("p", 3, LogPosition(1, 40)), now=100.0).granted
    assert not voter.record.in_sync("p", LogPosition(1, 39))


def test_a_replicated_epoch_does_not_raise_the_confirmed_position():
    voter = Voter("w", LEASE, granted_to_p(), now=0.0)
    voter.request(request("p", 2, LogPosition(1, 40), alone=False), now=0.0)
    assert voter.record.confirmed == LogPosition(1, 10)


def test_a_heartbeat_from_an_older_epoch_is_refused():
    voter = Voter("w", LEASE, VoterRecord(3, "b", LogPosition(2, 5), LogPosition(3, 0)), now=0.0)
    answer = voter.heartbeat(Heartbeat("p", 2, LogPosition(2, 9), LogPosition(2, 9), 1.0), 1.0)
    assert (answer.accepted, answer.granted_epoch) == (False, 3)
    assert voter.record.confirmed == LogPosition(3, 0)


def test_a_heartbeat_for_the_same_epoch_from_another_instance_is_learned():
    """
    This voter granted epoch 3 to p, which did not win it (it was cut
    off); b won it with the other voters' grants and says so in its
    heartbeats: the voter learns b, and p can no longer have epoch 3.
    """
    voter = Voter("w", LEASE, granted_to_p(epoch=3), now=0.0)
    answer = voter.heartbeat(Heartbeat("b", 3, LogPosition(3, 9), LogPosition(3, 9), 1.0), 1.0)
    assert answer.accepted
    assert (voter.record.granted_epoch, voter.record.granted_to) == (3, "b")
    assert voter.request(request("p", 3, LogPosition(3, 9)), now=100.0).reason == STALE_EPOCH


def test_an_epoch_learned_from_heartbeats_is_not_granted_to_its_winner():
    """
    This voter granted epoch 4 to p; b won it with the other voters'
    grants (p handed over to it) and says so in its heartbeats.  The
    voter learns b, but it never granted b epoch 4: p's late hand-over
    request is refused, as a first request would be, or the voter would
    have granted epoch 4 twice.  That holds across a restart.
    """
    voter = Voter("w", LEASE, VoterRecord(), now=0.0)
    assert voter.request(request("p", 4, ORIGIN), now=0.0).granted
    voter.heartbeat(Heartbeat("b", 4, ORIGIN, ORIGIN, 1.0), 1.0)
    assert voter.record.learned
    handover = request("b", 4, ORIGIN, alone=False, requester="p")
    assert voter.request(handover, now=1.5).reason == STALE_EPOCH
    restarted = Voter("w", LEASE, voter.record, now=2.0)
    assert restarted.request(handover, now=100.0).reason == STALE_EPOCH
    # A grant of its own, asked again, is granted again.
    assert restarted.request(request("b", 5, ORIGIN, requester="b"), now=100.0).granted
    assert not restarted.record.learned
    assert restarted.request(request("b", 5, ORIGIN, requester="b"), now=100.5).granted


def test_a_heartbeat_of_a_newer_epoch_is_learned():
    """
    The active won epoch 4 without this voter's grant: the voter learns
    it, and will not grant epoch 4 to anyone else.
    """
    voter = Voter("w", LEASE, granted_to_p(epoch=3), now=0.0)
    answer = voter.heartbeat(Heartbeat("b", 4, LogPosition(4, 1), LogPosition(4, 1), 10.0), 10.0)
    assert answer.accepted
    assert (voter.record.granted_epoch, voter.record.granted_to) == (4, "b")
    assert voter.request(request("p", 4, LogPosition(4, 1)), now=100.0).reason == STALE_EPOCH


# -- rule 0: one router name, one sequence of epochs ---------------------------

#: The instances of router r, the primary configured in group g1 and the
#: backup, by a typo, in group g2.
R_P, R_B = instance_name("r", "primary"), instance_name("r", "backup")


def test_an_instance_s_router_is_read_from_its_name():
    assert (R_P, router_of(R_P)) == ("r/primary", "r")
    assert router_of("p") == "p"


def test_a_rival_group_s_active_is_refused_as_a_group_mismatch():
    """
    A voter granted r's primary (group g1) epoch 1 and hears it: r's
    backup, in group g2, is refused as a group mismatch, however high the
    epoch it asks for, and its heartbeats are not accepted.
    """
    g1 = Voter("w", LEASE, VoterRecord(), now=0.0)
    g2 = Voter("w", LEASE, VoterRecord(), now=0.0)
    assert g1.request(request(R_P, 1, ORIGIN), now=0.0, others=[g2]).granted
    vote = g2.request(request(R_B, 9, ORIGIN), now=1.0, others=[g1])
    assert (vote.granted, vote.reason, vote.granted_epoch) == (False, GROUP_MISMATCH, 1)
    assert g2.record == VoterRecord()
    beat = g2.heartbeat(Heartbeat(R_B, 9, ORIGIN, ORIGIN, 1.0), 1.0, others=[g1])
    assert (beat.accepted, beat.granted_epoch) == (False, 1)
    assert g2.record == VoterRecord()


def test_a_rival_group_s_epochs_are_stale_once_its_active_is_silent():
    """
    Once r's primary is silent for the lease, r's backup in group g2 may
    have an epoch, but only one above every epoch r had in group g1: the
    mesh's fencing knows r's epochs, not its groups.
    """
    g1 = Voter("w", LEASE, VoterRecord(), now=0.0)
    g2 = Voter("w", LEASE, VoterRecord(), now=0.0)
    assert g1.request(request(R_P, 4, ORIGIN, alone=False), now=0.0, others=[g2]).granted
    later = 2 * LEASE
    vote = g2.request(request(R_B, 4, ORIGIN), now=later, others=[g1])
    assert (vote.reason, vote.granted_epoch) == (STALE_EPOCH, 4)
    assert g2.request(request(R_B, 5, ORIGIN), now=later, others=[g1]).granted
    # And now g1's primary is the rival that is refused.
    vote = g1.request(request(R_P, 6, ORIGIN), now=later + 1, others=[g2])
    assert (vote.reason, vote.granted_epoch) == (GROUP_MISMATCH, 5)


def test_an_instance_behind_a_rival_group_s_confirmed_position_is_refused():
    """
    r's backup in group g2 was never replicated to (its peer refused it):
    once r's primary in group g1 confirmed changes and fell silent, the
    backup still lacks them, and is refused.
    """
    g1 = Voter("w", LEASE, VoterRecord(), now=0.0)
    g2 = Voter("w", LEASE, VoterRecord(), now=0.0)
    assert g1.request(request(R_P, 1, ORIGIN), now=0.0, others=[g2]).granted
    g1.heartbeat(Heartbeat(R_P, 1, LogPosition(1, 40), LogPosition(1, 40), 1.0), 1.0, [g2])
    vote = g2.request(request(R_B, 2, LogPosition(0, 0)), now=10.0, others=[g1])
    assert (vote.reason, vote.granted_epoch) == (NOT_IN_SYNC, 1)
    assert g2.request(request(R_B, 2, LogPosition(1, 40)), now=10.0, others=[g1]).granted


def test_other_routers_groups_are_no_rivals():
    g1 = Voter("w", LEASE, VoterRecord(), now=0.0)
    other = Voter("w", LEASE, VoterRecord(), now=0.0)
    assert g1.request(request(R_P, 3, ORIGIN), now=0.0, others=[other]).granted
    assert other.request(request("s/primary", 1, ORIGIN), now=0.0, others=[g1]).granted


def test_a_restarted_voter_still_refuses_the_rival_of_the_active_it_granted():
    g1 = Voter("w", LEASE, VoterRecord(), now=0.0)
    g2 = Voter("w", LEASE, VoterRecord(), now=0.0)
    assert g1.request(request(R_P, 1, ORIGIN), now=0.0, others=[g2]).granted
    restarted = Voter("w", LEASE, g1.record, now=100.0)
    vote = g2.request(request(R_B, 2, ORIGIN), now=101.0, others=[restarted])
    assert vote.reason == GROUP_MISMATCH


# -- the tally ----------------------------------------------------------------


def vote(voter, granted, epoch=2, reason=None, granted_epoch=2):
    return Vote(voter, epoch, granted, None if granted else (reason or STALE_EPOCH), granted_epoch)


def test_tally_wins_with_a_majority_of_grants():
    tally = Tally(VOTERS, 2)
    assert tally.record(vote("b", True)) is Outcome.UNDECIDED
    assert tally.record(vote("w", True)) is Outcome.WON


def test_tally_loses_when_no_majority_is_left():
    tally = Tally(VOTERS, 2)
    assert tally.record(vote("p", False, reason=NOT_IN_SYNC)) is Outcome.UNDECIDED
    assert tally.record(vote("w", False, reason=ACTIVE_ALIVE)) is Outcome.LOST
    assert tally.refusals() == {"p": NOT_IN_SYNC, "w": ACTIVE_ALIVE}


def test_tally_loses_at_once_when_a_voter_granted_the_epoch_already():
    tally = Tally(VOTERS, 2)
    assert tally.record(vote("b", True)) is Outcome.UNDECIDED
    assert tally.record(vote("p", False, granted_epoch=7)) is Outcome.LOST
    assert tally.refusals() == {"p": STALE_EPOCH}
    assert tally.newest_epoch() == 7


def test_tally_ignores_strangers_and_other_epochs():
    tally = Tally(VOTERS, 2)
    tally.record(vote("x", True))
    tally.record(vote("w", True, epoch=1))
    tally.record(vote("b", True))
    assert tally.outcome() is Outcome.UNDECIDED


def test_tally_counts_a_voters_latest_answer():
    tally = Tally(VOTERS, 2)
    tally.record(vote("w", False, reason=ACTIVE_ALIVE))
    tally.record(vote("w", True))
    assert tally.record(vote("b", True)) is Outcome.WON


def test_a_pair_without_witnesses_needs_both():
    tally = Tally(frozenset({"p", "b"}), 2)
    assert tally.record(vote("b", True)) is Outcome.UNDECIDED
    assert tally.record(vote("p", False)) is Outcome.LOST


# -- the start-up rule ----------------------------------------------------------


def answers(*specs, b_position=None):
    """
    Start answers from p (the asker, record only), b and w.
    """
    record = granted_to_p(confirmed=LogPosition(1, 10))
    return [
        StartAnswer(voter, active, record, b_position if voter == "b" else None)
        for voter, active in specs
    ]


def start(position, *specs, b_position=None, instance="p", is_primary=True):
    return decide_start(instance, is_primary, position, VOTERS,
                        answers(*specs, b_position=b_position))


def test_start_waits_for_a_majority():
    assert start(LogPosition(1, 50), ("p", None)) is StartDecision.WAIT


def test_start_follows_an_active():
    assert start(LogPosition(1, 50), ("p", None), ("w", "b")) is StartDecision.FOLLOW


def test_start_resumes_with_the_newest_data():
    decision = start(LogPosition(1, 50), ("p", None), ("b", None), b_position=LogPosition(1, 40))
    assert decision is StartDecision.RESUME


def test_start_defers_to_a_peer_with_newer_data():
    decision = start(LogPosition(1, 50), ("p", None), ("b", None), b_position=LogPosition(1, 60))
    assert decision is StartDecision.DEFER


def test_start_at_equal_positions_the_primary_resumes():
    pos = LogPosition(1, 50)
    assert start(pos, ("p", None), ("b", None), b_position=pos) is StartDecision.RESUME
    peer = StartAnswer("p", None, granted_to_p(), pos)
    backup = decide_start("b", False, pos, VOTERS, [*answers(("b", None)), peer])
    assert backup is StartDecision.DEFER


def test_start_never_activates_a_stale_instance():
    """
    The voters know (1, 10) was confirmed; b holds up to (1, 9).  (p, the
    instance last granted, would still be in sync: see L{VoterRecord}.)
    """
    stale = decide_start("b", False, LogPosition(1, 9), VOTERS, answers(("b", None), ("w", None)))
    assert stale is StartDecision.STALE


def test_start_from_witnesses_alone_when_the_peer_is_down():
    assert start(LogPosition(1, 10), ("p", None), ("w", None)) is StartDecision.RESUME


def test_a_voters_start_answer_names_the_active_it_hears():
    voter = Voter("w", LEASE, granted_to_p(), now=0.0)
    assert voter.start_answer(LEASE - 0.1).active == "p"
    assert voter.start_answer(LEASE, LogPosition(1, 3)) == StartAnswer(
        "w", None, granted_to_p(), LogPosition(1, 3))


def test_a_voter_hearing_the_asker_itself_does_not_make_it_follow():
    """
    The instance restarted within its own old lease: the voter still
    "hears" it, which is no other active to follow.
    """
    assert start(LogPosition(1, 10), ("p", None), ("w", "p")) is StartDecision.RESUME


# -- safety under random schedules ----------------------------------------------

INSTANCES = ("p", "b")


@dataclass
class Group:
    """
    The voters of one group as a simulation: durable records that survive
    restarts, a bag of messages in flight, and a record of every grant.
    """

    witnesses: int
    reachable: object = None
    now: float = 0.0
    voters: dict[str, Voter] = field(default_factory=dict)
    in_flight: list[VoteRequest | tuple] = field(default_factory=list)
    grants: dict[int, dict[str, set[str]]] = field(default_factory=dict)
    granted_by_voter: dict[tuple[str, int], set[str]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        names = [*INSTANCES, *(f"w{i}" for i in range(self.witnesses))]
        self.voters = {name: Voter(name, LEASE, VoterRecord(), 0.0) for name in names}

    @property
    def names(self) -> frozenset[str]:
        return frozenset(self.voters)

    def reaches(self, sender: str, voter: str) -> bool:
        return self.reachable is None or self.reachable(sender, voter)

    def send_request(self, req: VoteRequest) -> None:
        for name in self.voters:
            if self.reaches(req.requester, name):
                self.in_flight.append((name, req))

    def send_heartbeats(self, winner: str, epoch: int, confirmed: LogPosition) -> None:
        beat = Heartbeat(winner, epoch, confirmed, confirmed, self.now)
        for name in self.voters:
            if self.reaches(winner, name):
                self.in_flight.append((name, beat))

    def deliver(self, index: int) -> None:
        name, message = self.in_flight.pop(index % len(self.in_flight))
        voter = self.voters[name]
        if isinstance(message, VoteRequest):
            if voter.request(message, self.now).granted:
                by_candidate = self.grants.setdefault(message.epoch, {})
                by_candidate.setdefault(message.candidate, set()).add(name)
                to = self.granted_by_voter.setdefault((name, message.epoch), set())
                to.add(message.candidate)
        else:
            voter.heartbeat(message, self.now)

    def restart(self, name: str) -> None:
        self.voters[name] = Voter(name, LEASE, self.voters[name].record, self.now)

    def winners(self, epoch: int) -> set[str]:
        needed = majority(len(self.voters))
        return {c for c, by in self.grants.get(epoch, {}).items() if len(by) >= needed}

    def won_epochs(self) -> dict[int, set[str]]:
        return {epoch: self.winners(epoch) for epoch in self.grants if self.winners(epoch)}


positions = st.builds(LogPosition, st.integers(0, 3), st.integers(0, 50))
deliver = st.tuples(st.just("deliver"), st.integers(0, 1000))


def requests(candidates=st.sampled_from(INSTANCES), positions=positions):
    return st.tuples(st.just("request"), candidates, st.sampled_from(INSTANCES),
                     st.integers(1, 4), positions, st.booleans())


# Deliveries weigh most (one_of picks a branch uniformly): a request only
# counts once a majority of voters have seen it.  Schedules are long
# (min_size), since hypothesis otherwise favours lists of a few steps.
steps = st.one_of(
    requests(), requests(), deliver, deliver, deliver, deliver,
    st.tuples(st.just("drop"), st.integers(0, 1000)),
    st.tuples(st.just("restart"), st.integers(0, 10)),
    st.tuples(st.just("advance"), st.floats(0.0, 2 * LEASE)),
    st.tuples(st.just("heartbeat"), positions),
)


def play(group: Group, step: tuple) -> None:
    """
    Play one step of a schedule.  Only an instance that won an epoch by a
    majority sends heartbeats for it (voters trust heartbeats to be
    truthful).
    """
    kind = step[0]
    if kind == "request":
        _, candidate, requester, epoch, position, alone = step
        group.send_request(VoteRequest(candidate, requester, epoch, position, alone))
    elif kind == "deliver" and group.in_flight:
        group.deliver(step[1])
    elif kind == "drop" and group.in_flight:
        group.in_flight.pop(step[1] % len(group.in_flight))
    elif kind == "restart":
        group.restart(sorted(group.voters)[step[1] % len(group.voters)])
    elif kind == "advance":
        group.now += step[1]
    elif kind == "heartbeat":
        won = group.won_epochs()
        if won:
            epoch = max(won)
            (winner,) = won[epoch]
            group.send_heartbeats(winner, epoch, step[1])


def run(group: Group, schedule) -> None:
    for step in schedule:
        play(group, step)


def _request(candidate: str, requester: str, epoch: int) -> tuple:
    return ("request", candidate, requester, epoch, ORIGIN, False)


#: p hands epoch 4 over to b, granted by voters p and w0: b wins it.  p
#: then asks epoch 4 for itself, and voter b, which had not heard of the
#: hand-over, grants it.  b's heartbeat teaches voter b that b holds epoch
#: 4; the hand-over's request reaches voter b last, and was granted as the
#: same request as the holder's: voter b had granted epoch 4 to both.
#: (hypothesis's shrunk case, restarts and all.)
LEARNED_THEN_ASKED = [
    *[("deliver", 0)] * 5, _request("p", "p", 1), *[("deliver", 0)] * 5,
    _request("b", "p", 4), ("deliver", 0), _request("p", "p", 1), _request("p", "p", 1),
    ("deliver", 1), ("deliver", 1), ("restart", 0), _request("p", "p", 4), ("deliver", 52),
    ("restart", 0), ("restart", 0), _request("p", "p", 1), _request("p", "p", 1),
    ("deliver", 1), _request("p", "p", 1), ("heartbeat", ORIGIN), _request("p", "p", 1),
    ("deliver", 39), ("deliver", 0),
]


@settings(max_examples=300, deadline=None)
@given(st.integers(0, 3), st.lists(steps, min_size=30, max_size=100))
@example(witnesses=1, schedule=LEARNED_THEN_ASKED)
def test_never_two_instances_win_the_same_epoch(witnesses, schedule):
    group = Group(witnesses)
    run(group, schedule)
    for (voter, epoch), candidates in group.granted_by_voter.items():
        assert len(candidates) == 1, (voter, epoch, candidates)
    for epoch in group.grants:
        assert len(group.winners(epoch)) <= 1, (epoch, group.grants[epoch])


@settings(max_examples=200, deadline=None)
@given(st.integers(0, 3), st.lists(steps, min_size=30, max_size=100))
def test_an_isolated_backup_never_wins(witnesses, schedule):
    """
    The backup reaches neither the primary nor any witness (only its own
    voter): whatever it asks, it never gathers a majority.
    """
    group = Group(witnesses, reachable=lambda sender, voter: (sender == "b") == (voter == "b"))
    # Nobody can hand over to an instance it cannot reach.
    run(group, [s for s in schedule if s[0] != "request" or (s[1] == "b") == (s[2] == "b")])
    assert not any("b" in winners for winners in group.won_epochs().values())


backup_steps = st.one_of(
    requests(st.just("b"), positions), deliver, deliver,
    st.tuples(st.just("drop"), st.integers(0, 1000)),
    st.tuples(st.just("restart"), st.integers(0, 10)),
    st.tuples(st.just("advance"), st.floats(0.0, 0.5)),
)


def active_p(group: Group) -> None:
    """
    Make p the active of epoch 1, granted by every voter.
    """
    group.send_request(VoteRequest("p", "p", 1, ORIGIN, False))
    while group.in_flight:
        group.deliver(0)
    assert group.winners(1) == {"p"}


@settings(max_examples=200, deadline=None)
@given(st.integers(1, 3), st.lists(backup_steps, min_size=30, max_size=100))
def test_a_backup_cut_off_from_a_live_primary_never_wins(witnesses, schedule):
    """
    Only the primary↔backup path is cut; the primary keeps sending
    heartbeats (every 0.5 s, as at the defaults) that reach the
    witnesses in time.  Whatever the backup asks, a witness that still
    hears the primary refuses it, and the backup never wins.
    """
    group = Group(witnesses, reachable=lambda s, v: {s, v} != {"p", "b"})
    active_p(group)
    next_beat = 0.0
    for step in schedule:
        while next_beat <= group.now:
            group.send_heartbeats("p", 1, LogPosition(1, 0))
            # Heartbeats arrive within the lease: deliver them at once.
            beats = [m for m in group.in_flight if isinstance(m[1], Heartbeat)]
            group.in_flight = [m for m in group.in_flight if not isinstance(m[1], Heartbeat)]
            for name, beat in beats:
                group.voters[name].heartbeat(beat, group.now)
            next_beat += 0.5
        if step[0] != "request" or step[2] == "b":  # p cannot reach b to hand over
            play(group, step)
    assert not any("b" in winners for winners in group.won_epochs().values())


stale_b_steps = st.one_of(
    requests(st.just("b"), st.builds(LogPosition, st.integers(0, 1), st.integers(0, 10**6))),
    requests(st.just("b"), st.builds(LogPosition, st.integers(0, 1), st.integers(0, 10**6))),
    requests(st.just("p")), deliver, deliver, deliver, deliver,
    st.tuples(st.just("drop"), st.integers(0, 1000)),
    st.tuples(st.just("restart"), st.integers(0, 10)),
    st.tuples(st.just("advance"), st.floats(0.0, 2 * LEASE)),
    st.tuples(st.just("heartbeat"), positions),
)


@settings(max_examples=300, deadline=None)
@given(st.integers(0, 3), st.lists(st.integers(0, 2**16), min_size=1, max_size=60),
       st.lists(stale_b_steps, min_size=30, max_size=100))
def test_after_an_alone_epoch_the_stale_backup_never_wins(witnesses, grant_order, schedule):
    """
    p, active in epoch 1, lost b and won epoch 2 to run alone (from some
    majority, in some order).  From then on b, whose data is complete
    only up to epoch 1, never wins an epoch, whatever happens: p may
    have confirmed changes b lacks.
    """
    group = Group(witnesses)
    active_p(group)
    group.now = 10 * LEASE
    group.send_request(VoteRequest("p", "p", 2, LogPosition(1, 40), True))
    for index in grant_order:
        if group.winners(2) or not group.in_flight:
            break
        group.deliver(index)
    if not group.winners(2):
        return
    group.in_flight.clear()
    run(group, schedule)
    for epoch, winners in group.won_epochs().items():
        assert epoch <= 2 or winners == {"p"}, (epoch, winners)


# -- two groups of one router name (a mistyped group-name) --------------------

#: Which group each instance of router r was configured in.
GROUP_OF = {R_P: "g1", R_B: "g2"}


@dataclass
class MismatchedPair:
    """
    Router r's primary in group g1 and its backup in group g2, with
    witnesses: a voter per group at every witness (a witness keeps one
    record per group), each instance's own voter for its own group only
    (the other instance's requests are refused at its replication
    listener, C{group-mismatch}), messages in flight, restarts, and every
    grant and heartbeat each witness accepted, with its time.
    """

    witnesses: int
    now: float = 0.0
    voters: dict[tuple[str, str], Voter] = field(default_factory=dict)
    in_flight: list[tuple] = field(default_factory=list)
    grants: dict[tuple[str, int], set[str]] = field(default_factory=dict)
    #: (witness, group) -> the times it granted to, or accepted a
    #: heartbeat from, that group's instance.
    served: dict[tuple[str, str], list[float]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        keys = [(R_P, "g1"), (R_B, "g2"),
                *((f"w{i}", group) for i in range(self.witnesses) for group in ("g1", "g2"))]
        self.voters = {key: Voter(key[0], LEASE, VoterRecord(), 0.0) for key in keys}

    def voters_of(self, instance: str) -> list[str]:
        """
        The voters an instance of its group counts (the pair and the
        witnesses: the peer never answers it).
        """
        return [R_P, R_B, *(f"w{i}" for i in range(self.witnesses))]

    def others(self, voter: str, group: str) -> list[Voter]:
        return [v for (name, g), v in self.voters.items() if name == voter and g != group]

    def send_request(self, request: VoteRequest) -> None:
        self._send(request.candidate, request)

    def send_heartbeats(self, winner: str, epoch: int, confirmed: LogPosition) -> None:
        self._send(winner, Heartbeat(winner, epoch, confirmed, confirmed, self.now))

    def _send(self, instance: str, message) -> None:
        group = GROUP_OF[instance]
        for name in self.voters_of(instance):
            if (name, group) in self.voters:
                self.in_flight.append((name, group, message))

    def deliver(self, index: int) -> None:
        name, group, message = self.in_flight.pop(index % len(self.in_flight))
        voter = self.voters[(name, group)]
        if isinstance(message, VoteRequest):
            by = self.grants.setdefault((message.candidate, message.epoch), set())
            again = name in by
            if voter.request(message, self.now, self.others(name, group)).granted:
                by.add(name)
            # The same request granted again is no new grant: its winner's
            # lease runs from its election's start, before the first.
            served = name in by and not again
        else:
            served = voter.heartbeat(message, self.now, self.others(name, group)).accepted
        if served and name.startswith("w"):
            self.check_no_rival_served(name, group)
            self.served.setdefault((name, group), []).append(self.now)

    def check_no_rival_served(self, witness: str, group: str) -> None:
        """
        Rule 0 at one witness: it grants to, or accepts the heartbeat of,
        one group only once it served no other group of the router for a
        whole lease.
        """
        for (name, other), times in self.served.items():
            if name == witness and other != group:
                assert self.now - max(times) >= LEASE, (witness, group, other, times, self.now)

    def restart(self, key: tuple[str, str]) -> None:
        self.voters[key] = Voter(key[0], LEASE, self.voters[key].record, self.now)

    def won_epochs(self) -> dict[int, set[str]]:
        """
        Each epoch won, with its winners (both instances, were rule 0
        broken).
        """
        needed = majority(len(self.voters_of(R_P)))
        won: dict[int, set[str]] = {}
        for (instance, epoch), by in self.grants.items():
            if len(by) >= needed:
                won.setdefault(epoch, set()).add(instance)
        return won


#: A request of either instance, asked by itself (neither can hand over
#: to the other: each refuses the other's connections).
own_requests = st.sampled_from((R_P, R_B)).flatmap(lambda candidate: st.tuples(
    st.just("request"), st.just(candidate), st.just(candidate), st.integers(1, 6),
    positions, st.booleans()))
mismatch_steps = st.one_of(
    own_requests, own_requests, deliver, deliver, deliver, deliver,
    st.tuples(st.just("drop"), st.integers(0, 1000)),
    st.tuples(st.just("restart"), st.integers(0, 20)),
    st.tuples(st.just("advance"), st.floats(0.0, 2 * LEASE)),
    st.tuples(st.just("heartbeat"), positions),
)


@settings(max_examples=300, deadline=None)
@given(st.integers(1, 3), st.lists(mismatch_steps, min_size=30, max_size=100))
def test_two_groups_of_one_router_never_win_one_epoch_nor_serve_at_once(witnesses, schedule):
    """
    A mismatched pair: whatever the order, drops and restarts, no epoch
    of router r is won by both instances (the mesh fences by router
    name), and no witness grants to, or hears, one group while it served
    the other less than a lease ago (checked at every grant).
    """
    pair = MismatchedPair(witnesses)
    for step in schedule:
        if step[0] == "heartbeat" and any(len(w) > 1 for w in pair.won_epochs().values()):
            break  # (play would not know whose heartbeat to send)
        play(pair, step)
    for epoch, winners in pair.won_epochs().items():
        assert len(winners) == 1, (epoch, winners)
