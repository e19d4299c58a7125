"""
C{GET /api/v1/router}, C{/links}, C{/routes}, C{/queues} and C{/sessions}:
what a router is, what its links are doing, where it forwards, what its
queues hold and who is connected, as JSON.  Read-only; bind it to loopback or protect
it with a TLS endpoint string.

Every answer is JSON, errors too: C{{"error": CODE, "detail": TEXT}} with
C{not-found} (404) for a path that names no resource (Twisted's default
would answer C{/api/v1/queues/anything} with the whole queue list, and
errors with HTML pages), C{method-not-allowed} (405) for anything but
GET and HEAD, and C{internal-error} (500, logged here) when producing the
answer failed.
"""

import json
from typing import Callable

from twisted.logger import Logger
from twisted.web import http
from twisted.web.resource import Resource
from twisted.web.server import Site

log = Logger()


def _answer(request, code: int, value: object) -> bytes:
    request.setResponseCode(code)
    request.setHeader(b"content-type", b"application/json")
    request.setHeader(b"cache-control", b"no-store")
    return json.dumps(value, indent=1).encode() + b"\n"


def _error(request, code: int, error: str, detail: str) -> bytes:
    return _answer(request, code, {"error": error, "detail": detail})


class _NotFound(Resource):
    """
    What a path that names no resource gets, whatever the method.
    """

    isLeaf = True

    def render(self, request) -> bytes:
        path = request.uri.decode("utf-8", errors="replace").split("?", 1)[0]
        return _error(request, http.NOT_FOUND, "not-found", f"no such resource: {path}")


class _Directory(Resource):
    """
    A path segment with named children and nothing of its own.
    """

    def getChild(self, name: bytes, request):
        return _NotFound()

    def render(self, request) -> bytes:
        return _NotFound().render(request)


class JSONResource(Resource):
    """
    A leaf that answers GET with C{produce()} as JSON, and only at its own
    path (a trailing slash allowed).
    """

    isLeaf = True

    def __init__(self, produce: Callable[[], object]) -> None:
        super().__init__()
        self._produce = produce

    def render(self, request) -> bytes:
        if request.postpath not in ([], [b""]):
            return _NotFound().render(request)
        if request.method not in (b"GET", b"HEAD"):
            request.setHeader(b"allow", b"GET, HEAD")
            return _error(request, http.NOT_ALLOWED, "method-not-allowed",
                          f"{request.method.decode(errors='replace')} is not served; use GET")
        try:
            value = self._produce()
        except Exception:
            log.failure("admin API: answering {path} failed",
                        path=request.uri.decode("utf-8", errors="replace"))
            return _error(request, http.INTERNAL_SERVER_ERROR, "internal-error",
                          "the router failed to answer; see its log")
        return _answer(request, http.OK, value)


class AdminSite(Site):
    """
    A Site that does not write an access-log line per request: the lab and
    monitoring poll it every second.
    """

    noisy = False

    def log(self, request) -> None:
        pass


def admin_site(router) -> Site:
    """
    The admin API of C{router} (a L{meshroute.node.RouterService}).
    """
    v1 = _Directory()
    v1.putChild(b"router", JSONResource(router.describe))
    v1.putChild(b"links", JSONResource(router.describe_links))
    v1.putChild(b"routes", JSONResource(router.describe_routes))
    v1.putChild(b"queues", JSONResource(router.describe_queues))
    v1.putChild(b"sessions", JSONResource(router.describe_sessions))
    api = _Directory()
    api.putChild(b"v1", v1)
    root = _Directory()
    root.putChild(b"api", api)
    return AdminSite(root)
