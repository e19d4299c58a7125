"""
C{GET /api/v1/router}, C{/links}, C{/routes}, C{/queues}, C{/topics} and
C{/sessions}: what a router is, what its links are doing, where it
forwards, what its queues hold, its topic subscriptions and the mesh's
topic interest, and who is connected, as JSON; C{/ha}, an HA instance's
role and state; C{/topology}, the mesh as it knows it
(L{meshroute.router.views}); C{/routers}, the routers it knows, and
C{/routers/NAME/VIEW}, another router's view asked through the mesh
(L{meshroute.admin.routers_resource}).  C{/} is the topology page
(L{meshroute.admin.page}), which shows these.  These are read-only
(GET).  What changes the router
lives apart, under C{/api/v1/actions/}, answers POST only and always
needs the token: C{POST /api/v1/actions/reload-security} reloads the
users and permissions as SIGHUP does (L{meshroute.security.reload}).
C{GET /metrics} answers the router's figures in Prometheus' text format
(L{meshroute.admin.metrics}, docs/metrics.md), under the same rules as
the read-only resources.

With C{[admin] token-file} every request must carry
C{Authorization: Bearer TOKEN}; without, the endpoint is loopback or a
UNIX socket (the configuration refuses anything else) and the read-only
resources are open to local processes, while the actions refuse
(C{token-required}, 403).  A TLS endpoint string (C{ssl:}) keeps the
token off the wire.

An HA instance serves this API all the time, while its router exists
only when the instance is the active one: then C{/router} says
C{"serving": false} with the HA state, and the router's other resources
answer C{not-active} (503).

Every answer of C{/api/} is JSON, errors too: C{{"error": CODE,
"detail": TEXT}} with C{not-found} (404) for a path that names no
resource (Twisted's default would answer C{/api/v1/queues/anything} with the whole queue list, and
errors with HTML pages; and C{/ha} of a router without C{[ha]}),
C{unauthorized} (401, with C{WWW-Authenticate: Bearer}) for a request
without the token or with a wrong one, C{method-not-allowed} (405) for
anything but GET and HEAD (POST for an action), C{not-active}
(503) for the router's resources on an HA instance that is not the
active one, and C{internal-error} (500, logged) when producing the
answer failed; every resource answers through L{meshroute.admin.resources}.
"""

import hmac
from typing import Callable

from twisted.web import http
from twisted.web.resource import Resource
from twisted.web.server import Site

from meshroute import __version__
from meshroute.admin import page
from meshroute.admin.metrics import metrics_resource
from meshroute.admin.resources import NotFound, Unavailable, json_error, not_allowed, serve
from meshroute.admin.routers_resource import RoutersResource


class _Directory(Resource):
    """
    A path segment with named children and nothing of its own.
    """

    def getChild(self, name: bytes, request):
        return NotFound()

    def render(self, request) -> bytes:
        return NotFound().render(request)


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
            return NotFound().render(request)
        return serve(request, (b"GET", b"HEAD"), self._produce, "answer")


class _Delegated(Resource):
    """
    A leaf answered by the resource C{make()} returns, made at the first
    request, at its own path only and for GET and HEAD (the API's JSON
    errors otherwise): C{/metrics}, whose resource runs in the reactor's
    thread pool, which a site that is never served does not need.
    """

    isLeaf = True

    def __init__(self, make: Callable[[], Resource]) -> None:
        super().__init__()
        self._make = make
        self._resource: Resource | None = None

    def render(self, request):
        if request.postpath not in ([], [b""]):
            return NotFound().render(request)
        if request.method not in (b"GET", b"HEAD"):
            return not_allowed(request, (b"GET", b"HEAD"))
        if self._resource is None:
            self._resource = self._make()
        return self._resource.render(request)


class _Unauthorized(Resource):
    """
    What a request without the right token gets, whatever its path.
    """

    isLeaf = True

    def render(self, request) -> bytes:
        request.setHeader(b"www-authenticate", b'Bearer realm="meshroute"')
        return json_error(request, http.UNAUTHORIZED, "unauthorized",
                          "this admin API needs the token of its [admin] token-file: "
                          "Authorization: Bearer TOKEN")


def _bearer(request) -> bytes | None:
    """
    The token a request presents, or None.
    """
    header = request.getHeader(b"authorization")
    if header is None:
        return None
    scheme, _, token = header.partition(b" ")
    return token.strip() if scheme.lower() == b"bearer" else None


class _Guarded(Resource):
    """
    The root: every request presents C{token} before any resource sees
    it (compared in constant time, so that timing does not leak it),
    except for the topology page and its assets (L{page.OPEN}), which
    hold no data and ask the operator for the token.
    """

    def __init__(self, token: bytes, root: Resource) -> None:
        super().__init__()
        self._token = token
        self._root = root

    def _allowed(self, request) -> bool:
        presented = _bearer(request)
        return presented is not None and hmac.compare_digest(presented, self._token)

    def getChildWithDefault(self, name: bytes, request):
        if name not in page.OPEN and not self._allowed(request):
            return _Unauthorized()
        return self._root.getChildWithDefault(name, request)

    def render(self, request) -> bytes:
        if not self._allowed(request):
            return _Unauthorized().render(request)
        return self._root.render(request)


class _Action(Resource):
    """
    A leaf that changes the router: POST only, and only with a token
    configured (the L{_Guarded} root has checked it by then).
    """

    isLeaf = True

    def __init__(self, act: Callable[[], object], token_configured: bool) -> None:
        super().__init__()
        self._act = act
        self._token_configured = token_configured

    def render(self, request) -> bytes:
        if request.postpath not in ([], [b""]):
            return NotFound().render(request)
        if not self._token_configured:
            return json_error(request, http.FORBIDDEN, "token-required",
                              "actions need [admin] token-file; this router has none")
        return serve(request, (b"POST",), self._act, "act")


class AdminSite(Site):
    """
    A Site that does not write an access-log line per request: the lab and
    monitoring poll it every second.
    """

    noisy = False

    def log(self, request) -> None:
        pass


#: The router's own resources: each answers C{router.describe_NAME()}.
_ROUTER_RESOURCES = ("links", "routes", "queues", "topics", "sessions", "topology")


def admin_site(router=None, *, ha=None, token: bytes | None = None, reactor=None) -> Site:
    """
    The admin API of C{router} (a L{meshroute.router.service.RouterService}), or of
    the HA instance C{ha} (a L{meshroute.interfaces.IHAInstanceView}),
    whose router is looked up at each request.

    @param token: the bearer token every request must present, or None
        (an API bound to loopback: reads are open, actions refused).
    @param reactor: the router's reactor, on which C{/metrics} reads the
        router and in whose thread pool it answers; default: the global
        reactor, imported at the first scrape.
    """
    if (router is None) == (ha is None):
        raise TypeError("admin_site takes a router or an HA instance")

    def current():
        return router if ha is None else ha.router

    def active():
        serving_router = current()
        if serving_router is None:
            raise Unavailable(
                http.SERVICE_UNAVAILABLE, "not-active",
                f"this instance of {ha.name} is not the active one (state "
                f"{ha.ha_status().state}); the other instance serves, see /api/v1/ha")
        return serving_router

    def serving(name: str):
        return getattr(active(), f"describe_{name}")()

    def describe_router() -> dict:
        serving_router = current()
        if serving_router is not None:
            answer = serving_router.describe()
        else:
            answer = {"name": ha.name, "version": __version__, "uptime_s": ha.uptime_s(),
                      "backlog": {}, "serving": False}
        if ha is not None:
            answer["ha"] = ha.ha_status().describe()
        return answer

    def describe_ha() -> dict:
        if ha is None:
            raise Unavailable(http.NOT_FOUND, "not-found",
                              "this router is not an HA instance (no [ha] section)")
        return ha.ha_status().describe()

    v1 = _Directory()
    v1.putChild(b"router", JSONResource(describe_router))
    for name in _ROUTER_RESOURCES:
        v1.putChild(name.encode(), JSONResource(lambda name=name: serving(name)))
    v1.putChild(b"ha", JSONResource(describe_ha))
    v1.putChild(b"routers", RoutersResource(active))
    actions = _Directory()
    owner = router if router is not None else ha
    actions.putChild(b"reload-security", _Action(
        lambda: {"reloaded": owner.reload_security()}, token is not None))
    v1.putChild(b"actions", actions)
    api = _Directory()
    api.putChild(b"v1", v1)
    root = _Directory()
    root.putChild(b"api", api)

    def metrics() -> Resource:
        if reactor is None:
            from twisted.internet import reactor as running
        else:
            running = reactor
        return metrics_resource(running, current, ha)

    root.putChild(b"metrics", _Delegated(metrics))
    page.add_page(root, _Directory(), NotFound())
    return AdminSite(root if token is None else _Guarded(token, root))
