"""
Tests for L{meshroute.admin.api}: every answer is JSON, a path that names
nothing is a JSON 404, and only GET is served.
"""

import json

import pytest
from twisted.web.resource import getChildForRequest
from twisted.web.test.requesthelper import DummyRequest

from meshroute.admin.api import admin_site

from support.admin_requests import FakeRouter, serve


def get(path: str, method: bytes = b"GET", router=None):
    """
    Serve C{method path} from the admin site: (status, content type, JSON).
    """
    return serve(admin_site(router or FakeRouter()), path, method)


@pytest.mark.parametrize("path", ["/api/v1/queues", "/api/v1/queues/"])
def test_a_resource_answers_json(path):
    assert get(path) == (200, [b"application/json"],
                         [{"name": "orders", "depth": 2, "consumers": 0}])


@pytest.mark.parametrize("path", [
    "/api/v1/queues/anything", "/api/v1/queues/orders", "/api/v1/nothing", "/api/v2/queues",
    "/nothing", "/api/v1", "/api", "/api/v1/router/x/y", "/static/", "/static/nothing.js",
    "/static/topology.js/x",
])
def test_a_path_that_names_nothing_is_a_json_404(path):
    status, content_type, body = get(path)
    assert (status, content_type) == (404, [b"application/json"])
    assert body["error"] == "not-found"
    assert path in body["detail"]


def test_only_get_is_served():
    status, content_type, body = get("/api/v1/links", method=b"POST")
    assert (status, content_type) == (405, [b"application/json"])
    assert body["error"] == "method-not-allowed"


def test_a_failure_is_a_json_500(observe_errors):
    class Broken(FakeRouter):
        def describe_routes(self):
            raise RuntimeError("the route table is gone")

    status, content_type, body = get("/api/v1/routes", router=Broken())
    assert (status, content_type) == (500, [b"application/json"])
    assert body["error"] == "internal-error"
    assert "the route table is gone" not in json.dumps(body)
    [logged] = observe_errors.take(lambda e: e.get("log_failure") is not None)
    assert logged["log_failure"].check(RuntimeError)


TOKEN = b"0123456789abcdef-token"


class ReloadingRouter(FakeRouter):
    """
    A router whose reloads are counted.
    """

    def __init__(self) -> None:
        self.reloads = 0

    def reload_security(self) -> bool:
        self.reloads += 1
        return True


def serve_with(site, path: str, method: bytes = b"GET", authorization: bytes | None = None):
    """
    L{serve} with an C{Authorization} header; also the C{WWW-Authenticate}
    answered.
    """
    request = DummyRequest(path.encode().split(b"/")[1:])
    request.method = method
    request.uri = request.path = path.encode()
    if authorization is not None:
        request.requestHeaders.addRawHeader(b"authorization", authorization)
    body = getChildForRequest(site.resource, request).render(request)
    challenge = request.responseHeaders.getRawHeaders(b"www-authenticate")
    return request.responseCode or 200, challenge, json.loads(body)


@pytest.mark.parametrize("path", ["/api/v1/router", "/api/v1/queues", "/nothing",
                                  "/api/v1/topology", "/api/v1/actions/reload-security"])
@pytest.mark.parametrize("authorization", [
    None, b"Bearer", b"Bearer wrong-token-of-some-length", b"Basic " + TOKEN,
    b"Bearer " + TOKEN[:-1], b"Bearer " + TOKEN + b"x",
])
def test_with_a_token_every_request_needs_it(path, authorization):
    router = ReloadingRouter()
    site = admin_site(router, token=TOKEN)
    for method in (b"GET", b"POST"):
        status, challenge, body = serve_with(site, path, method, authorization)
        assert (status, challenge, body["error"]) == (
            401, [b'Bearer realm="meshroute"'], "unauthorized")
    assert router.reloads == 0


def test_with_the_token_requests_are_answered():
    router = ReloadingRouter()
    site = admin_site(router, token=TOKEN)
    for authorization in (b"Bearer " + TOKEN, b"bearer  " + TOKEN):
        assert serve_with(site, "/api/v1/queues", authorization=authorization)[::2] == (
            200, [{"name": "orders", "depth": 2, "consumers": 0}])
    assert serve_with(site, "/api/v1/nothing", authorization=b"Bearer " + TOKEN)[0] == 404


def test_actions_take_post_with_the_token():
    router = ReloadingRouter()
    site = admin_site(router, token=TOKEN)
    status, _, body = serve_with(site, "/api/v1/actions/reload-security", b"GET",
                                 b"Bearer " + TOKEN)
    assert (status, body["error"], router.reloads) == (405, "method-not-allowed", 0)
    status, _, body = serve_with(site, "/api/v1/actions/reload-security", b"POST",
                                 b"Bearer " + TOKEN)
    assert (status, body, router.reloads) == (200, {"reloaded": True}, 1)


def test_without_a_token_actions_are_refused():
    """
    An API without a token (bound to loopback) serves its reads to local
    processes, but nothing that changes the router.
    """
    router = ReloadingRouter()
    site = admin_site(router)
    assert get("/api/v1/router", router=router)[0] == 200
    for method in (b"POST", b"GET"):
        status, _, body = serve_with(site, "/api/v1/actions/reload-security", method)
        assert (status, body["error"]) == (403, "token-required")
    assert serve_with(site, "/api/v1/actions", b"POST")[0] == 404
    assert router.reloads == 0


def serve_page(site, path: str, authorization: bytes | None = None):
    """
    Serve C{GET path} from C{site}: (status, content type, body).
    """
    request = DummyRequest(path.encode().split(b"/")[1:])
    request.uri = request.path = path.encode()
    if authorization is not None:
        request.requestHeaders.addRawHeader(b"authorization", authorization)
    body = getChildForRequest(site.resource, request).render(request)
    return (request.responseCode or 200,
            request.responseHeaders.getRawHeaders(b"content-type"), body)


@pytest.mark.parametrize("token", [None, TOKEN])
def test_the_topology_page_and_its_files_need_no_token(token):
    """
    They hold no data; the page asks for the token the API needs.
    """
    site = admin_site(FakeRouter(), token=token)

    status, content_type, body = serve_page(site, "/")
    assert (status, content_type) == (200, [b"text/html; charset=utf-8"])
    assert b'<script src="static/topology.js">' in body
    for path, expected in (("/static/topology.js", b"text/javascript; charset=utf-8"),
                           ("/static/topology.css", b"text/css; charset=utf-8")):
        status, content_type, body = serve_page(site, path)
        assert (status, content_type) == (200, [expected])
        assert body
    status, _, _ = serve_page(site, "/api/v1/topology")
    assert status == (200 if token is None else 401)


def test_the_topology_is_a_resource_of_the_api():
    assert get("/api/v1/topology") == (200, [b"application/json"],
                                       {"router": "router-a", "nodes": [], "edges": []})
