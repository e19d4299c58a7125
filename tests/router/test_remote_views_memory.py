"""
Read-only admin views asked through the mesh (L{meshroute.router.remote_views}),
on whole routers linked in memory: a question crosses two hops and the
answer comes back, a router that cannot be reached fails the question in
time, and none of it is a message of the mesh's traffic.
"""

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from meshroute.router.remote_views import (
    ANSWER_TIMEOUT_S,
    Answer,
    AnsweredError,
    UnknownView,
    Unreachable,
    bounded_json,
)
from meshroute.events import read_events
from meshroute.testing.memory_mesh import MemoryMesh

A, B, C = "router-a", "router-b", "router-c"


@pytest.fixture
def mesh(tmp_path):
    mesh = MemoryMesh(tmp_path)
    yield mesh
    mesh.stop_all()


@pytest.fixture
def line(mesh):
    """
    A–B–C in a line, in delivery: C is two hops from A.
    """
    mesh.add(A, connect_to=[B])
    mesh.add(B, connect_to=[C])
    mesh.add(C)
    mesh.run(1)
    assert mesh.routers[A].engine.routes.routes()[C] == (B, 2)
    return mesh


def outcome(d):
    """
    What C{d} fired with: a value, or the exception it failed with.
    """
    results = []
    d.addBoth(results.append)
    assert results, "not fired"
    result = results[0]
    return result.value if hasattr(result, "value") and hasattr(result, "check") else result


def ask(mesh, at: str, router: str, view: str, seconds: float = 0.5):
    d = mesh.routers[at].mesh_views.ask(router, view)
    mesh.run(seconds)
    return outcome(d)


def test_a_view_two_hops_away_is_the_routers_own(line):
    line.routers[C].engine.queues.put_transient("orders", _message(C, "orders"))
    answer = ask(line, A, C, "queues")
    assert isinstance(answer, Answer) and answer.truncated is None
    assert answer.value == json.loads(json.dumps(line.routers[C].describe_view("queues")))
    assert [q["name"] for q in answer.value] == ["orders"]
    router = ask(line, A, C, "router")
    assert router.value["name"] == C
    links = ask(line, A, C, "links").value
    assert [(link["peer"], link["stage"]) for link in links] == [(B, "delivery")]


def test_a_routers_own_view_is_answered_without_the_mesh(line):
    answer = ask(line, A, A, "routes", seconds=0)
    assert answer.value == line.routers[A].describe_routes()


def test_routed_questions_are_no_traffic(line):
    """
    No message event anywhere, no queue named after the system queues,
    no forwarded counter moved by them in the audit's eyes.
    """
    for _ in range(3):
        ask(line, A, C, "sessions")
    for name in (A, B, C):
        router = line.routers[name]
        router.events.flush()
        assert [e for e in read_events(router.events.data_dir)
                if e["event"].startswith("message.")] == []
        assert all(not q["name"].startswith("$") for q in router.describe_queues())
    # The question and answer crossed both links each way.
    [a_to_b] = line.routers[A].describe_links()
    assert a_to_b["sent"] == 3 and a_to_b["received"] == 3


def test_an_unknown_view_is_refused_before_asking(line):
    assert isinstance(ask(line, A, C, "secrets", seconds=0), UnknownView)


def test_an_unknown_router_is_unreachable_at_once(line):
    error = ask(line, A, "router-z", "links", seconds=0)
    assert isinstance(error, Unreachable) and "no router named 'router-z'" in str(error)


def test_a_silent_router_is_unreachable_after_the_timeout(line):
    line.partition(C)
    d = line.routers[A].mesh_views.ask(C, "links")
    line.run(ANSWER_TIMEOUT_S - 0.1)
    assert not d.called
    line.run(0.2)
    error = outcome(d)
    assert isinstance(error, Unreachable) and "no answer from router-c" in str(error)


def test_a_router_without_a_route_is_unreachable_at_once(line):
    line.stop(C)
    line.run(1)
    error = ask(line, A, C, "links", seconds=0)
    assert isinstance(error, Unreachable) and "no route to router-c" in str(error)


def test_an_answer_after_the_timeout_is_dropped(line):
    line.partition(C)
    d = line.routers[A].mesh_views.ask(C, "links")
    line.run(ANSWER_TIMEOUT_S + 0.1)
    assert isinstance(outcome(d), Unreachable)
    line.heal(C)
    line.run(1)  # C's late answer arrives, and is dropped quietly


def test_a_failing_view_answers_an_error(line, monkeypatch, observe_errors):
    def broken():
        raise RuntimeError("broken")

    monkeypatch.setattr(line.routers[C], "describe_sessions", broken)
    error = ask(line, A, C, "sessions")
    assert isinstance(error, AnsweredError) and error.code == "internal-error"
    assert "router-c failed to produce its sessions view" in str(error)
    [logged] = observe_errors.take(lambda e: e.get("log_failure") is not None)
    assert logged["log_failure"].check(RuntimeError)


def test_a_large_list_is_cut_to_fit():
    rows = [{"n": n, "pad": "x" * 90} for n in range(100)]
    body, truncated = bounded_json(rows, limit=1000)
    kept = json.loads(body)
    assert len(body) <= 1000 and truncated == (len(kept), 100) and kept == rows[:len(kept)]
    body, truncated = bounded_json({f"r{n}": n for n in range(1000)}, limit=100)
    assert len(body) <= 100 and truncated[1] == 1000 and len(json.loads(body)) == truncated[0]
    assert bounded_json(rows[:2]) == (json.dumps(rows[:2], separators=(",", ":")).encode(),
                                      None)


_JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner,
                                                               max_size=4),
    max_leaves=10)


@given(st.lists(_JSON, max_size=30) | st.dictionaries(st.text(max_size=10), _JSON, max_size=30),
       st.integers(min_value=2, max_value=600))
def test_a_cut_answer_is_a_prefix_that_fits(view, limit):
    body, truncated = bounded_json(view, limit)
    value = json.loads(body)
    if truncated is None:
        assert value == view
        return
    kept, total = truncated
    assert len(body) <= limit and total == len(view) and kept < total
    if isinstance(view, list):
        assert value == view[:kept]
    else:
        assert list(value.items()) == list(view.items())[:kept]


def _message(router: str, queue: str):
    from meshroute.messages import Message

    return Message(msg_id=f"{router}:test:1", origin=router, dest_router=router,
                   dest_queue=queue, body=b"x", persistent=False)


def test_a_link_tells_how_the_previous_link_to_its_peer_ended(line):
    stopped_at = line.clock.seconds()
    line.stop(C)
    line.run(1)
    [row] = [r for r in line.routers[B].describe_routers() if r["name"] == C]
    assert (row["reachable"], row["last_close_reason"]) == (False, "peer-closed")
    line.add(C)
    line.run(1)
    [link] = [link for link in line.routers[B].describe_links() if link["peer"] == C]
    assert link["stage"] == "delivery"
    assert (link["last_close_reason"], link["last_closed_at"]) == ("peer-closed", stopped_at)


def test_an_answer_from_another_router_than_the_one_asked_is_dropped(line):
    from meshroute.router.remote_views import REQUEST
    from meshroute.messages import ADMIN_REPLY_QUEUE, Message

    line.partition(C)
    views = line.routers[A].mesh_views
    d = views.ask(C, "links")
    [request_id] = list(views._pending)
    views.arrived(Message(msg_id="forged", origin=B, dest_router=A,
                          dest_queue=ADMIN_REPLY_QUEUE, body=b"[]",
                          headers={REQUEST: request_id}, persistent=False))
    assert not d.called
    line.run(ANSWER_TIMEOUT_S + 0.1)
    assert isinstance(outcome(d), Unreachable)
