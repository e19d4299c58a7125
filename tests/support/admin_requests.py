"""
Requests to the admin API served in memory (L{serve}, no socket), and a
router that describes itself with fixed answers (L{FakeRouter}), for the
admin API's tests.
"""

import json

from twisted.web.resource import getChildForRequest
from twisted.web.test.requesthelper import DummyRequest


class FakeRouter:
    def describe(self):
        return {"name": "router-a", "version": "0", "uptime_s": 1.0}

    def describe_links(self):
        return []

    def describe_routes(self):
        return {}

    def describe_queues(self):
        return [{"name": "orders", "depth": 2, "consumers": 0}]

    def describe_sessions(self):
        return []

    def describe_topology(self):
        return {"router": "router-a", "nodes": [], "edges": []}


def serve(site, path: str, method: bytes = b"GET"):
    """
    Serve C{method path} from C{site}: (status, content type, JSON).
    """
    request = DummyRequest(path.encode().split(b"/")[1:])
    request.method = method
    request.uri = request.path = path.encode()
    resource = getChildForRequest(site.resource, request)
    body = resource.render(request)
    if not isinstance(body, bytes):
        body = b"".join(request.written)
    content_type = request.responseHeaders.getRawHeaders(b"content-type")
    return request.responseCode or 200, content_type, json.loads(body)
