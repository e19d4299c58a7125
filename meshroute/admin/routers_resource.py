"""
C{/api/v1/routers}: the admin API's questions about other routers, the
routers this one knows and any router's views, asked through the mesh
(the router side, which asks and answers, is
L{meshroute.router.remote_views}).

 - C{GET /api/v1/routers}: this router's C{routers} view
   (L{meshroute.router.views.describe_mesh}).
 - C{GET /api/v1/routers/NAME/VIEW}: exactly what router NAME answers at
   its own C{/api/v1/VIEW}, asked through the mesh
   (L{meshroute.router.remote_views}); C{GET /api/v1/routers/NAME} is its
   C{/api/v1/router}.  Errors: C{not-found} (404) for a view that does
   not exist, C{unreachable} (504) when NAME is unknown, has no route or
   does not answer within L{meshroute.router.remote_views.ANSWER_TIMEOUT_S}, and
   the error NAME answered with (its own code).  An answer cut to fit a
   message carries the header C{X-Meshroute-Truncated: KEPT/TOTAL}.
"""

from typing import Callable

from twisted.internet.defer import CancelledError
from twisted.logger import Logger
from twisted.web import http
from twisted.web.resource import Resource
from twisted.web.server import NOT_DONE_YET

from meshroute.admin.resources import NotFound, Unavailable, json_answer, json_error, serve
from meshroute.router.remote_views import AnsweredError, UnknownView, Unreachable

log = Logger()

#: The HTTP status of an error a router answered with, by its code.
_STATUS = {"not-found": http.NOT_FOUND, "not-active": http.SERVICE_UNAVAILABLE}


class RoutersResource(Resource):
    """
    C{/api/v1/routers} and what is below it.

    @param active: returns the router serving now (a
        L{meshroute.router.service.RouterService}), or raises L{Unavailable}.
    """

    isLeaf = True

    def __init__(self, active: Callable[[], object]) -> None:
        super().__init__()
        self._active = active

    def render(self, request):
        path = [segment.decode("utf-8", errors="replace") for segment in request.postpath]
        if path and path[-1] == "":
            path.pop()
        if not path:
            return serve(request, (b"GET", b"HEAD"),
                         lambda: self._active().describe_routers(), "answer")
        if len(path) > 2:
            return NotFound().render(request)
        router, view = path[0], path[1] if len(path) == 2 else "router"
        if request.method not in (b"GET", b"HEAD"):
            return serve(request, (b"GET", b"HEAD"), lambda: None, "answer")
        try:
            asking = self._active().mesh_views.ask(router, view)
        except Unavailable as e:
            return json_error(request, e.code, e.error, e.detail)
        finished = request.notifyFinish()
        finished.addErrback(lambda _: asking.cancel())
        asking.addCallbacks(self._answered, self._failed, callbackArgs=(request,),
                            errbackArgs=(request, router, view))
        return NOT_DONE_YET

    def _answered(self, answer, request) -> None:
        if answer.truncated is not None:
            request.setHeader(b"x-meshroute-truncated",
                              f"{answer.truncated[0]}/{answer.truncated[1]}".encode())
        self._finish(request, json_answer(request, http.OK, answer.value))

    def _failed(self, failure, request, router: str, view: str) -> None:
        if failure.check(CancelledError):
            return
        error = failure.value
        if failure.check(UnknownView):
            body = json_error(request, http.NOT_FOUND, error.code, str(error))
        elif failure.check(Unreachable):
            body = json_error(request, http.GATEWAY_TIMEOUT, error.code, str(error))
        elif failure.check(AnsweredError):
            body = json_error(request, _STATUS.get(error.code, http.BAD_GATEWAY), error.code,
                              f"{router} answered: {error}")
        else:
            log.failure("admin API: asking {router} for its {view} view failed", failure,
                        router=router, view=view)
            body = json_error(request, http.INTERNAL_SERVER_ERROR, "internal-error",
                              "the router failed to ask; see its log")
        self._finish(request, body)

    @staticmethod
    def _finish(request, body: bytes) -> None:
        if request.method != b"HEAD":
            request.write(body)
        request.finish()
