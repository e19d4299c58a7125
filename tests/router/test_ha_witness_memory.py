"""
Real routers as HA witnesses, in the in-memory mesh: a scripted
candidate (L{VoteCandidate}) asks a router's vote over its routing
listener; the router's grant is durable across a restart, and a vote
connection leaves the routing link of the same router name alone.
"""

from meshroute.testing.memory_mesh import SECRET, MemoryMesh
from meshroute.harules.quorum import ACTIVE_ALIVE, STALE_EPOCH
from meshroute.link import reasons
from meshroute.wire.frames import HeartbeatAnswer, VoteAnswer
from support.mesh_testing import events_of, mesh  # noqa: F401 (mesh: a fixture)
from support.vote_candidate import VoteCandidate

GROUP = "router-b"
PRIMARY = "router-b/primary"
BACKUP = "router-b/backup"
LEASE_MS = 3000


def dial(mesh: MemoryMesh, name: str, witness: str) -> VoteCandidate:
    """
    Open a vote connection from (an instance of) router C{name} to router
    C{witness}, authenticated.
    """
    candidate = VoteCandidate(name, witness, SECRET, LEASE_MS)
    mesh.network.endpoints(name).client(witness).connect(candidate)
    mesh.network.flush()
    assert candidate.authenticated
    return candidate


def answer(mesh: MemoryMesh, candidate: VoteCandidate):
    """
    Deliver what the candidate sent and return the one answer it got.
    """
    mesh.network.flush()
    return candidate.answers.pop()


def test_a_router_grants_an_epoch_once_and_remembers_it_across_a_restart(mesh):  # noqa: F811
    mesh.add("router-a")
    backup = dial(mesh, "router-b", "router-a")
    backup.ask(GROUP, BACKUP, 1, position=(0, 0))
    assert answer(mesh, backup) == VoteAnswer(GROUP, "router-a", 1, True, "", 1)

    primary = dial(mesh, "router-b", "router-a")  # the pair's other instance
    primary.ask(GROUP, PRIMARY, 1)
    assert answer(mesh, primary) == VoteAnswer(GROUP, "router-a", 1, False, STALE_EPOCH, 1)
    assert mesh.routers["router-a"].describe_links() == []  # votes are not links

    mesh.stop("router-a")
    assert backup.lost and primary.lost
    mesh.add("router-a")  # the same data-dir
    again = dial(mesh, "router-b", "router-a")
    again.ask(GROUP, PRIMARY, 1)
    assert answer(mesh, again).reason == STALE_EPOCH
    again.ask(GROUP, BACKUP, 1)  # the grantee asking again: its answer may have been lost
    assert answer(mesh, again).granted
    # Restarted, it acts as if it had just heard epoch 1's active.
    again.ask(GROUP, PRIMARY, 2, position=(1, 5))
    assert answer(mesh, again).reason == ACTIVE_ALIVE
    mesh.run(LEASE_MS / 1000)
    assert again.lost  # idle for longer than stage-valid-timeout
    later = dial(mesh, "router-b", "router-a")
    later.ask(GROUP, PRIMARY, 2, position=(1, 5))
    assert answer(mesh, later).granted

    votes = events_of(mesh.routers["router-a"], "ha.vote")
    assert [(v["candidate"], v["epoch"], v["granted"], v["reason"]) for v in votes] == [
        (BACKUP, 1, True, None), (PRIMARY, 1, False, STALE_EPOCH),
        (PRIMARY, 1, False, STALE_EPOCH), (BACKUP, 1, True, None),
        (PRIMARY, 2, False, ACTIVE_ALIVE), (PRIMARY, 2, True, None),
    ]


def test_a_vote_connection_leaves_the_routing_link_of_the_same_name_alone(mesh):  # noqa: F811
    a = mesh.add("router-a")
    mesh.add("router-b", connect_to=["router-a"])
    mesh.run(0.5)
    assert mesh.stages("router-a") == {"router-b": "delivery"}
    (link,) = a.describe_links()

    heartbeats = dial(mesh, "router-b", "router-a")
    for beat in range(4):
        heartbeats.beat(GROUP, PRIMARY, 1, position=(1, beat), confirmed=(1, beat),
                        sent_at=float(beat))
        assert answer(mesh, heartbeats) == HeartbeatAnswer(GROUP, "router-a", True,
                                                           float(beat), 1)
        mesh.run(0.3)
    (after,) = a.describe_links()  # the vote connection is not listed as a link
    assert (after["link"], after["stage"], after["since"]) == (link["link"], "delivery",
                                                               link["since"])
    # Silent for stage-valid-timeout (1 s here), the vote connection closes.
    mesh.run(1.0)
    assert heartbeats.lost
    (closed,) = events_of(a, "link.closed")
    assert (closed["peer"], closed["reason"], closed["stage"]) == ("router-b", reasons.IDLE,
                                                                   "voting")
    assert closed["link"] != link["link"]
    assert mesh.stages("router-a") == {"router-b": "delivery"}
    assert mesh.stages("router-b") == {"router-a": "delivery"}
    assert a.describe_routes() == {"router-b": {"next_hop": "router-b", "hops": 1}}
    assert events_of(mesh.routers["router-b"], "link.closed") == []
