"""
An HA pair as a witness for another HA group, in the in-memory mesh: a
scripted candidate of group C{router-x} (L{VoteCandidate}) asks the
pair's active over its routing listener.  The pair's records of other
groups are replicated, so a grant survives the pair's failover.
"""

from twisted.internet.error import ConnectionRefusedError

from meshroute.testing.memory_mesh import SECRET
from meshroute.harules.quorum import STALE_EPOCH
from meshroute.harules.settings import BACKUP, PRIMARY
from meshroute.wire.frames import VoteAnswer
from support.ha_pair import FAILOVER_BOUND, LEASE_MS, ROUTER, Pair, pair, serving  # noqa: F401
from support.ha_pair import start_both
from support.vote_candidate import VoteCandidate

GROUP_X = "router-x"
X_PRIMARY = "router-x/primary"
X_BACKUP = "router-x/backup"


def dial(pair: Pair, listener: str) -> VoteCandidate:
    """
    A vote connection from an instance of router-x to the routing
    listener C{listener} of router-b (an instance of the pair).
    """
    candidate = VoteCandidate(GROUP_X, ROUTER, SECRET, LEASE_MS)
    connecting = pair.mesh.network.endpoints(GROUP_X).client(listener).connect(candidate)
    pair.mesh.network.flush()
    refused = []
    connecting.addErrback(lambda failure: refused.append(failure.trap(ConnectionRefusedError)))
    assert candidate.authenticated or refused
    return candidate


def test_an_epoch_the_pair_s_active_granted_another_group_is_not_granted_again_after_a_failover(
        pair):  # noqa: F811
    primary, backup = start_both(pair)
    # The backup has no routing listener: it answers no other group.
    assert not dial(pair, pair.key(BACKUP)).authenticated

    x1 = dial(pair, pair.key(PRIMARY))
    x1.ask(GROUP_X, X_PRIMARY, 1)
    pair.mesh.network.flush()
    assert x1.answers.pop() == VoteAnswer(GROUP_X, pair.key(PRIMARY), 1, True, "", 1)

    pair.kill(PRIMARY)
    pair.run_until(lambda: serving(backup), FAILOVER_BOUND)
    x2 = dial(pair, pair.key(BACKUP))
    x2.ask(GROUP_X, X_BACKUP, 1)
    pair.mesh.network.flush()
    answer = x2.answers.pop()
    assert (answer.granted, answer.reason, answer.granted_epoch) == (False, STALE_EPOCH, 1)


def test_a_following_instance_answers_no_other_group_on_its_replication_listener(
        pair):  # noqa: F811
    start_both(pair)
    candidate = VoteCandidate(ROUTER, ROUTER, SECRET, LEASE_MS, group=ROUTER)
    pair.mesh.network.endpoints(GROUP_X).client("repl-backup").connect(candidate)
    pair.mesh.network.flush()
    assert candidate.authenticated
    candidate.ask(GROUP_X, X_PRIMARY, 1)
    pair.mesh.network.flush()
    assert candidate.answers == [] and candidate.lost
    assert GROUP_X not in pair.instances[pair.key(BACKUP)].witness.records()
