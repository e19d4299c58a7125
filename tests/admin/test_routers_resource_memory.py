"""
C{/api/v1/routers} of the admin API (L{meshroute.admin.routers_resource}),
on whole routers linked in memory: another router's view asked through
the mesh answers as that router's own, the routers known are listed, and
every failure is a JSON error.
"""

import json

import pytest
from twisted.web.resource import getChildForRequest
from twisted.web.test.requesthelper import DummyRequest

from meshroute.admin.api import admin_site
from meshroute.router.remote_views import ANSWER_TIMEOUT_S
from meshroute.router.views import describe_topics
from support.mesh_testing import line as three_in_a_line
from support.mesh_testing import mesh  # noqa: F401 (a fixture)
from support.topic_testing import TopicConsumer

A, B, C = "router-a", "router-b", "router-c"


@pytest.fixture
def line(mesh):  # noqa: F811
    """
    A–B–C in a line, in delivery: C is two hops from A.
    """
    three_in_a_line(mesh)
    assert mesh.routers[A].engine.routes.routes()[C] == (B, 2)
    return mesh


def http_get(mesh, at: str, path: str, method: bytes = b"GET", seconds: float = 0.5):
    """
    Serve C{method path} from router C{at}'s admin site, running the mesh
    while the answer is awaited: (status, headers, JSON).
    """
    request = DummyRequest(path.encode().split(b"/")[1:])
    request.method = method
    request.uri = request.path = path.encode()
    resource = getChildForRequest(admin_site(mesh.routers[at]).resource, request)
    body = resource.render(request)
    if not isinstance(body, bytes):
        mesh.run(seconds)
        assert request.finished
        body = b"".join(request.written)
    return request.responseCode or 200, request.responseHeaders, json.loads(body)


def test_http_answers_another_routers_view(line):
    status, headers, links = http_get(line, A, "/api/v1/routers/router-c/links")
    assert status == 200 and headers.getRawHeaders(b"content-type") == [b"application/json"]
    assert [link["peer"] for link in links] == [B]
    status, _, router = http_get(line, A, "/api/v1/routers/router-c")
    assert status == 200 and router["name"] == C


def test_http_answers_the_topics_here_and_through_the_mesh(line):
    TopicConsumer(line.routers[C], "prices.#", client_id="app", durable="prices")
    TopicConsumer(line.routers[A], "orders.*")
    line.run(1)

    status, _, here = http_get(line, A, "/api/v1/topics")
    assert status == 200 and here == describe_topics(line.routers[A].engine)
    assert [row["pattern"] for row in here["subscriptions"]] == ["orders.*"]
    assert [(row["router"], row["patterns"]) for row in here["interest"]] == [
        (B, []), (C, ["prices.#"])]
    status, _, there = http_get(line, A, "/api/v1/routers/router-c/topics")
    assert status == 200 and there == describe_topics(line.routers[C].engine)
    assert there["subscriptions"][0]["client_id"] == "app"


def test_http_lists_the_routers_known(line):
    status, _, routers = http_get(line, A, "/api/v1/routers")
    assert status == 200
    assert [(r["name"], r["reachable"], r["next_hop"], r["hops"]) for r in routers] == [
        (A, True, None, 0), (B, True, B, 1), (C, True, B, 2)]
    assert routers[1]["stage"] == "delivery" and routers[2]["link"] == routers[1]["link"]
    assert all(r["last_change"] is not None for r in routers)


def test_http_errors(line):
    status, _, error = http_get(line, A, "/api/v1/routers/router-c/secrets")
    assert (status, error["error"]) == (404, "not-found")
    status, _, error = http_get(line, A, "/api/v1/routers/router-c/ha")
    assert (status, error["error"]) == (404, "not-found")  # C has no [ha]
    status, _, error = http_get(line, A, "/api/v1/routers/router-z/links")
    assert (status, error["error"]) == (504, "unreachable")
    status, _, error = http_get(line, A, "/api/v1/routers/router-c/links/more")
    assert (status, error["error"]) == (404, "not-found")
    status, _, error = http_get(line, A, "/api/v1/routers/router-c/links", method=b"POST")
    assert (status, error["error"]) == (405, "method-not-allowed")
    line.partition(C)
    status, _, error = http_get(line, A, "/api/v1/routers/router-c/links",
                                seconds=ANSWER_TIMEOUT_S + 0.1)
    assert (status, error["error"]) == (504, "unreachable")
