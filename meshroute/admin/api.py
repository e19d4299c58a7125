"""
C{GET /api/v1/router}, C{/links}, C{/routes}, C{/queues} and C{/sessions}:
what a router is, what its links are doing, where it forwards, what its
queues hold and who is connected, as JSON.  Read-only; bind it to loopback or protect
it with a TLS endpoint string.
"""

import json
from typing import Callable

from twisted.web.resource import Resource
from twisted.web.server import Site


class JSONResource(Resource):
    """
    A leaf that answers GET with C{produce()} as JSON.
    """

    isLeaf = True

    def __init__(self, produce: Callable[[], object]) -> None:
        super().__init__()
        self._produce = produce

    def render_GET(self, request) -> bytes:
        request.setHeader(b"content-type", b"application/json")
        request.setHeader(b"cache-control", b"no-store")
        return json.dumps(self._produce(), indent=1).encode() + b"\n"


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
    v1 = Resource()
    v1.putChild(b"router", JSONResource(router.describe))
    v1.putChild(b"links", JSONResource(router.describe_links))
    v1.putChild(b"routes", JSONResource(router.describe_routes))
    v1.putChild(b"queues", JSONResource(router.describe_queues))
    v1.putChild(b"sessions", JSONResource(router.describe_sessions))
    api = Resource()
    api.putChild(b"v1", v1)
    root = Resource()
    root.putChild(b"api", api)
    return AdminSite(root)
