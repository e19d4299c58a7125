"""
The sends of a reactor turn, travelling together (L{SendBatcher}): the
messages that C{Client.send}, C{send_many} and a L{Producer}'s sends hand
over in one turn go out as one SendBatch (version 4) at the end of the
turn, or as soon as another command must go after them, so that commands
keep the order the application made them in.
"""

from operator import itemgetter

from meshroute.client.commands import SEND, SEND_BATCH, Command, SendOutcomes
from meshroute.client.router_connection import RouterConnection
from meshroute.client.session_machine import ClientInputs, EndOfTurn
from meshroute.wire import client_frames as f

#: Most messages, and most bytes of bodies, one SendBatch carries: a
#: turn's sends past either go in the next one, so that a SendBatch stays
#: within the router's frame limit (a message too large for the bytes
#: alone still fits: L{f.oversized_send} checked it as a Send).
SEND_BATCH_MAX_MESSAGES = 1000
SEND_BATCH_MAX_BYTES = 1024 * 1024

#: A SendBatch item's body.
_BODY = itemgetter(2)


class SendBatcher:
    """
    This turn's sends, gathered into SendBatch commands.
    """

    def __init__(self, connection: RouterConnection, machine: ClientInputs,
                 end_of_turn: EndOfTurn) -> None:
        self._connection = connection
        self._machine = machine
        self._end_of_turn = end_of_turn
        self._sends: list = []
        self._send_segments: list[tuple] = []
        self._send_bytes = 0
        self._stopped = False

    def send_later(self, messages: list, target, index: int = 0) -> None:
        """
        C{Client.send} and the like: C{messages} (SendBatch items), the
        sends of C{target} (a L{SendDeferred} or L{SendGroup}) from
        C{index} on, join this turn's sends, written together at the end of
        the turn, or before any other command so that commands keep their
        order (L{release}); at a bound (L{SEND_BATCH_MAX_MESSAGES},
        L{SEND_BATCH_MAX_BYTES}), at once.  Without a version-4 session (an
        older router, or none opened yet) or once the session is over,
        each is a Send command at once, as always.
        """
        if self._connection.version < f.BATCH_VERSION or self._stopped:
            submit = self._machine.submit
            for i, message in enumerate(messages, index):
                submit(Command(SEND, f.Send, tuple(message), SendOutcomes(1, [(0, target, i)])))
            return
        if len(messages) == 1:
            # One message (a Client.send): the common case, kept cheap.
            sends = self._sends
            self._send_segments.append((len(sends), target, index))
            sends.append(messages[0])
            self._send_bytes += len(messages[0][2])
            if (len(sends) >= SEND_BATCH_MAX_MESSAGES
                    or self._send_bytes >= SEND_BATCH_MAX_BYTES):
                self.release()
            else:
                self._end_of_turn.schedule()
            return
        taken, total = 0, len(messages)
        while taken < total:
            sends = self._sends
            chunk = messages[taken:taken + SEND_BATCH_MAX_MESSAGES - len(sends)]
            size = self._send_bytes + sum(map(len, map(_BODY, chunk)))
            if size >= SEND_BATCH_MAX_BYTES:
                chunk, size = _within_bytes(chunk, self._send_bytes)
            self._send_segments.append((len(sends), target, index + taken))
            sends.extend(chunk)
            self._send_bytes = size
            taken += len(chunk)
            if len(sends) >= SEND_BATCH_MAX_MESSAGES or size >= SEND_BATCH_MAX_BYTES:
                self.release()
        if self._sends:
            self._end_of_turn.schedule()

    def release(self) -> None:
        """
        Submit this turn's sends: one SendBatch, or a Send for a message
        alone (or, the session having been recreated on an older router
        meanwhile, a Send each).
        """
        sends = self._sends
        if not sends:
            return
        segments = self._send_segments
        self._sends, self._send_segments, self._send_bytes = [], [], 0
        submit = self._machine.submit
        n = len(sends)
        if n > 1 and self._connection.version >= f.BATCH_VERSION:
            submit(Command(SEND_BATCH, f.SendBatch, (sends,), SendOutcomes(n, segments),
                           count=n, unanswered=n))
            return
        ends = [start for start, _, _ in segments[1:]] + [n]
        for (start, target, index), end in zip(segments, ends):
            for i in range(end - start):
                submit(Command(SEND, f.Send, tuple(sends[start + i]),
                               SendOutcomes(1, [(0, target, index + i)])))

    def stop(self) -> None:
        """
        The session is over: what was gathered is submitted (to be
        refused), and so is every send from now on, at once.
        """
        self.release()
        self._stopped = True


def _within_bytes(messages: list, size: int) -> tuple[list, int]:
    """
    The first of C{messages} (SendBatch items) that a SendBatch already
    holding C{size} bytes of bodies takes before it reaches
    L{SEND_BATCH_MAX_BYTES} (the one that reaches it included), and the
    size then.
    """
    for taken, message in enumerate(messages, 1):
        size += len(message[2])
        if size >= SEND_BATCH_MAX_BYTES:
            return messages[:taken], size
    return messages, size
