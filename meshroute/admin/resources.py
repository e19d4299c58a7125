"""
How every resource of the admin API answers: JSON, errors too.

An answer is C{json.dumps(value)} with C{application/json} and
C{no-store}; an error is C{{"error": CODE, "detail": TEXT}} with its
HTTP status.  The site's own resources (L{meshroute.admin.api}) and the
resource that asks other routers through the mesh
(L{meshroute.admin.routers_resource}) answer through these, so that a
client of the API meets one shape of answer and one shape of error.
"""

import json
from typing import Callable

from twisted.logger import Logger
from twisted.web import http
from twisted.web.resource import Resource

log = Logger()


def json_answer(request, code: int, value: object) -> bytes:
    """
    Answer C{request} with C{code} and C{value} as JSON.
    """
    request.setResponseCode(code)
    request.setHeader(b"content-type", b"application/json")
    request.setHeader(b"cache-control", b"no-store")
    return json.dumps(value, indent=1).encode() + b"\n"


def json_error(request, code: int, error: str, detail: str) -> bytes:
    """
    Answer C{request} with C{code} and the JSON error C{error}, saying
    C{detail}.
    """
    return json_answer(request, code, {"error": error, "detail": detail})


class Unavailable(Exception):
    """
    Raised by a producer of an answer (L{serve}'s C{call}) to answer with a
    JSON error rather than a value.
    """

    def __init__(self, code: int, error: str, detail: str) -> None:
        super().__init__(detail)
        self.code = code
        self.error = error
        self.detail = detail


def serve(request, methods: tuple[bytes, ...], call: Callable[[], object],
          doing: str) -> bytes:
    """
    Answer C{request} with C{call()} as JSON when its method is one of
    C{methods} (the first names the method to use): a 405 otherwise, the
    error an L{Unavailable} carries, or a logged 500 (the router failed to
    C{doing}).  Read-only resources and actions share it, so they answer
    the same way.
    """
    if request.method not in methods:
        return not_allowed(request, methods)
    try:
        value = call()
    except Unavailable as e:
        return json_error(request, e.code, e.error, e.detail)
    except Exception:
        log.failure("admin API: {path} failed",
                    path=request.uri.decode("utf-8", errors="replace"))
        return json_error(request, http.INTERNAL_SERVER_ERROR, "internal-error",
                     f"the router failed to {doing}; see its log")
    return json_answer(request, http.OK, value)


def not_allowed(request, methods: tuple[bytes, ...]) -> bytes:
    """
    Answer C{request}, whose method is not one of C{methods}, with a 405
    naming them.
    """
    request.setHeader(b"allow", b", ".join(methods))
    return json_error(request, http.NOT_ALLOWED, "method-not-allowed",
                 f"{request.method.decode(errors='replace')} is not served; "
                 f"use {methods[0].decode()}")


class NotFound(Resource):
    """
    What a path that names no resource gets, whatever the method.
    """

    isLeaf = True

    def render(self, request) -> bytes:
        path = request.uri.decode("utf-8", errors="replace").split("?", 1)[0]
        return json_error(request, http.NOT_FOUND, "not-found", f"no such resource: {path}")
