"""
Another router's read-only views, asked through the mesh.

An operator who reaches one router's admin API sees any router:
C{GET /api/v1/routers/NAME/VIEW} answers exactly the JSON router NAME
answers at its own C{/api/v1/VIEW} (L{meshroute.router.service.VIEWS}), and
C{GET /api/v1/routers/NAME} its C{/api/v1/router}.  The question and the
answer travel over the links as messages, not as link frames of their
own, so every link that carries messages carries them:

 - The asking router sends a non-persistent message to the system queue
   L{ADMIN_QUEUE} of router NAME (C{$admin@NAME}), its headers naming the
   request (L{REQUEST}, unique in the asking process) and the view
   (L{VIEW}); its body is empty.
 - Each router on the way forwards it like any non-persistent message,
   on the next hop's link at once (L{SystemMessages.send<meshroute.router.system_messages.SystemMessages.send>}): it never
   waits for a route, and no event records it, since it is no message of
   the mesh's traffic.
 - Router NAME's engine hands what arrives for a system queue to this
   module before any queue sees it; the view is produced there and sent
   back to the asker's L{ADMIN_REPLY_QUEUE} (C{$admin-reply@ORIGIN}, the
   origin of the question) with the same L{REQUEST} header: the view as
   compact JSON in the body, or an error code in L{ERROR} and its detail
   in the body.
 - The asker matches the answer to its question by the request id.  No
   answer within L{ANSWER_TIMEOUT_S} (of the router's clock), or no route
   to NAME when asking, and the question fails with L{Unreachable}; a
   late answer is dropped.

An answer is at most L{MAX_ANSWER_BYTES} of JSON, well within a link
frame and a quarter of the largest message: a list or object view that
is larger keeps its first rows that fit, and says so in L{TRUNCATED}
(C{KEPT/TOTAL}), which the HTTP answer passes on as the header
C{X-Meshroute-Truncated}.

Clients never see any of this: a client address or queue name cannot
start with C{$} (L{meshroute.messages.QUEUE_NAME}), so no client can
send to, consume from or fake an answer on these queues; and only
read-only views are ever asked for.  Any router of the mesh may ask: its
routers share the mesh's secret, and the asker's admin API has its own
token.
"""

import itertools
import json
import os
from dataclasses import dataclass
from typing import Callable

from twisted.internet.defer import Deferred, fail, succeed
from twisted.internet.interfaces import IReactorTime
from twisted.logger import Logger

from meshroute.errors import MeshrouteError
from meshroute.messages import ADMIN_QUEUE, ADMIN_REPLY_QUEUE, Message

log = Logger()

#: How long an asking router waits for the answer, in seconds.
ANSWER_TIMEOUT_S = 5.0

#: The largest JSON answer sent back (a quarter of the largest message a
#: link takes), in bytes.
MAX_ANSWER_BYTES = 1024 * 1024

#: Header: the request id, in a question and in its answer.
REQUEST = "x-admin-request"
#: Header of a question: the view asked for.
VIEW = "x-admin-view"
#: Header of an answer that is an error: its code (the detail is the body).
ERROR = "x-admin-error"
#: Header of an answer cut to fit: C{KEPT/TOTAL} rows of the view.
TRUNCATED = "x-admin-truncated"


class Unreachable(MeshrouteError):
    """
    The router asked for cannot be reached: unknown, no route, or no
    answer in time.
    """

    code = "unreachable"


class UnknownView(MeshrouteError):
    """
    No view of that name.
    """

    code = "not-found"


class AnsweredError(MeshrouteError):
    """
    The router asked answered with an error (its code and detail).
    """

    def __init__(self, code: str, detail: str) -> None:
        super().__init__(detail)
        self.code = code


@dataclass(frozen=True)
class Answer:
    """
    A view as a router answered it.

    @ivar truncated: C{(kept, total)} rows when it was cut to fit
        L{MAX_ANSWER_BYTES}, else None.
    """

    value: object
    truncated: tuple[int, int] | None = None


def bounded_json(value, limit: int = MAX_ANSWER_BYTES) -> tuple[bytes, tuple[int, int] | None]:
    """
    C{value} as compact JSON of at most C{limit} bytes when it is a list
    or an object: its first items (or members) that fit, and C{(kept,
    total)} when some did not.
    """
    body = json.dumps(value, separators=(",", ":")).encode()
    if len(body) <= limit or not isinstance(value, (list, dict)):
        return body, None
    if isinstance(value, list):
        parts = [json.dumps(item, separators=(",", ":")) for item in value]
        opening, closing = "[", "]"
    else:
        parts = [json.dumps(key) + ":" + json.dumps(item, separators=(",", ":"))
                 for key, item in value.items()]
        opening, closing = "{", "}"
    size = 2
    kept = 0
    for part in parts:
        # ASCII (json.dumps escapes the rest): characters are bytes.
        size += len(part) + (1 if kept else 0)
        if size > limit:
            break
        kept += 1
    return (opening + ",".join(parts[:kept]) + closing).encode(), (kept, len(parts))


class MeshViews:
    """
    One router's side of routed admin requests: it asks other routers
    (L{ask}) and answers their questions (what its engine hands it).

    @param describe_view: produces this router's view of a name, raising
        C{KeyError} for an unknown one (L{RouterService.describe_view}).
    @param views: the names of the views.
    """

    def __init__(self, name: str, engine, clock: IReactorTime,
                 describe_view: Callable[[str], object], views,
                 timeout_s: float = ANSWER_TIMEOUT_S) -> None:
        self.name = name
        self._engine = engine
        self._clock = clock
        self._describe_view = describe_view
        self._views = frozenset(views)
        self._timeout_s = timeout_s
        self._prefix = os.urandom(4).hex()
        self._numbers = itertools.count(1)
        self._pending: dict[str, tuple[Deferred, object, str]] = {}
        engine.serve_system(ADMIN_QUEUE, self.arrived)
        engine.serve_system(ADMIN_REPLY_QUEUE, self.arrived)

    # -- asking -------------------------------------------------------------

    def ask(self, router: str, view: str) -> Deferred:
        """
        Router C{router}'s view C{view}.

        @return: Deferred firing with an L{Answer}, or failing with
            L{UnknownView}, L{Unreachable} or L{AnsweredError}.
        """
        if view not in self._views:
            return fail(UnknownView(f"no view named {view!r}; views: "
                                    f"{', '.join(sorted(self._views))}"))
        if router == self.name:
            try:
                return succeed(Answer(self._produce(view, self.name)))
            except AnsweredError as e:
                return fail(e)
        if not self._engine.routes.known(router):
            return fail(Unreachable(f"no router named {router!r} is known in the mesh"))
        request_id = f"{self._prefix}-{next(self._numbers)}"
        question = Message(
            msg_id=f"{self.name}:admin:{request_id}", origin=self.name, dest_router=router,
            dest_queue=ADMIN_QUEUE, body=b"", headers={REQUEST: request_id, VIEW: view},
            persistent=False, accepted_at=self._clock.seconds())
        if not self._engine.send_system(question):
            return fail(Unreachable(f"no route to {router} now"))
        answer = Deferred(lambda _: self._forget(request_id))
        timer = self._clock.callLater(self._timeout_s, self._timed_out, request_id)
        self._pending[request_id] = (answer, timer, router)
        return answer

    def _forget(self, request_id: str):
        pending = self._pending.pop(request_id, None)
        if pending is not None and pending[1].active():
            pending[1].cancel()
        return pending

    def _timed_out(self, request_id: str) -> None:
        answer, _timer, router = self._pending.pop(request_id)
        answer.errback(Unreachable(
            f"no answer from {router} within {self._timeout_s:g} s"))

    def stop(self) -> None:
        """
        The router is stopping: every question still open fails.
        """
        for request_id in list(self._pending):
            answer, _timer, router = self._forget(request_id)
            answer.errback(Unreachable(f"{self.name} stopped before {router} answered"))

    # -- what arrives -------------------------------------------------------

    def arrived(self, message: Message) -> None:
        """
        A message for one of this router's system queues: a question to
        answer, or an answer to one of ours.
        """
        request_id = message.headers.get(REQUEST)
        if request_id is None:
            log.warn("a message for {queue} from {origin} names no request; dropped",
                     queue=message.dest_queue, origin=message.origin)
        elif message.dest_queue == ADMIN_QUEUE:
            self._answer(message, request_id)
        else:
            self._answered(message, request_id)

    def _produce(self, view: str, asker: str):
        """
        This router's view C{view}, for C{asker}.

        @raise AnsweredError: C{not-found}, or C{internal-error} (logged).
        """
        try:
            return self._describe_view(view)
        except KeyError:
            raise AnsweredError("not-found", f"{self.name} has no {view} view") from None
        except Exception:
            log.failure("admin request from {origin}: view {view} failed", origin=asker,
                        view=view)
            raise AnsweredError("internal-error", f"{self.name} failed to produce its "
                                f"{view} view; see its log") from None

    def _answer(self, question: Message, request_id: str) -> None:
        headers = {REQUEST: request_id}
        try:
            body, truncated = bounded_json(
                self._produce(question.headers.get(VIEW, ""), question.origin))
        except AnsweredError as e:
            headers[ERROR], body, truncated = e.code, str(e).encode(), None
        if truncated is not None:
            headers[TRUNCATED] = f"{truncated[0]}/{truncated[1]}"
        answer = Message(
            msg_id=f"{self.name}:admin-reply:{request_id}", origin=self.name,
            dest_router=question.origin, dest_queue=ADMIN_REPLY_QUEUE, body=body,
            headers=headers, persistent=False, accepted_at=self._clock.seconds())
        if not self._engine.send_system(answer):
            log.info("no route back to {origin} for its admin request; not answered",
                     origin=question.origin)

    def _answered(self, message: Message, request_id: str) -> None:
        asked = self._pending.get(request_id)
        if asked is None or asked[2] != message.origin:
            log.info("an answer from {origin} to no open question of ours (it came after "
                     "the question gave up?); dropped", origin=message.origin)
            return
        pending = self._forget(request_id)
        answer = pending[0]
        headers = message.headers
        if ERROR in headers:
            answer.errback(AnsweredError(headers[ERROR], message.body.decode(errors="replace")))
            return
        try:
            value = json.loads(message.body)
            truncated = (tuple(int(n) for n in headers[TRUNCATED].split("/", 1))
                         if TRUNCATED in headers else None)
        except ValueError as e:
            answer.errback(AnsweredError("internal-error",
                                         f"{message.origin} answered what is not JSON: {e}"))
            return
        answer.callback(Answer(value, truncated))

