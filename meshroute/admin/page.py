"""
The topology page at the admin endpoint's C{/}: one HTML file, its script
and its style sheet, shipped in the package (C{meshroute/admin/static/})
so that it works on a network without the internet.  The graph is plain
SVG drawn by the script; there is no library to vendor.

The page holds no router data: it fetches C{/api/v1/topology} and the
other resources of the JSON API every few seconds and redraws what
changed.  So the page and its files are served without the token, while
the API keeps asking for it: with C{[admin] token-file}, the page asks the
operator for the token once, keeps it in the tab's C{sessionStorage}
(gone when the tab closes) and sends it as C{Authorization: Bearer}.
"""

from importlib.resources import files

from twisted.web.resource import Resource

#: The page's files under C{/static/}, with their content types.
ASSETS = {
    "topology.js": b"text/javascript; charset=utf-8",
    "topology.css": b"text/css; charset=utf-8",
}

#: The root's children that serve the page, without the token.
OPEN = frozenset({b"", b"static"})


class _File(Resource):
    """
    One file of the page, read from the package once; below it, nothing
    (C{not_found}).
    """

    def __init__(self, name: str, content_type: bytes, not_found: Resource) -> None:
        super().__init__()
        self._body = (files("meshroute.admin") / "static" / name).read_bytes()
        self._content_type = content_type
        self._not_found = not_found

    def getChild(self, name: bytes, request) -> Resource:
        return self._not_found

    def render_GET(self, request) -> bytes:
        request.setHeader(b"content-type", self._content_type)
        request.setHeader(b"cache-control", b"no-cache")
        request.setHeader(b"x-content-type-options", b"nosniff")
        return self._body


def add_page(root: Resource, static: Resource, not_found: Resource) -> None:
    """
    Serve the page at C{root}'s C{/} and its files in C{static}, which
    becomes C{/static/} (a resource that answers 404 for anything else, as
    C{not_found} does below a file).
    """
    root.putChild(b"", _File("index.html", b"text/html; charset=utf-8", not_found))
    for name, content_type in ASSETS.items():
        static.putChild(name.encode(), _File(name, content_type, not_found))
    root.putChild(b"static", static)
