"""
L{Producer}: a high-rate sender over a L{meshroute.client.Client}, with
a bounded window of sends in flight.
"""

from collections import deque

from twisted.internet.defer import Deferred, fail

from meshroute.client.commands import SendDeferred, SendGroup
from meshroute.client.errors import SendError
from meshroute.client.send_items import send_item, send_items, send_refusal


class Producer:
    """
    A high-rate sender over a L{Client}: at most C{window} sends in flight
    (handed to the client and not yet answered by the router).  Sends
    made while the window is full wait, in order, in the producer until
    answers make room: no error and no loss, the application's Deferred
    simply fires later.  So that what waits stays bounded too, a loop
    awaits L{ready} before each send (or each L{send_many}): it fires at
    once while there is room, and only once answers made room otherwise.
    Sends made in one reactor turn travel together (L{Client.send}).
    L{send_many} is the fast way: one Deferred for many messages.

    @ivar window: most sends in flight.
    @ivar in_flight: sends handed to the client and not yet answered.
    """

    def __init__(self, client, window: int) -> None:
        if window < 1:
            raise ValueError("window must be at least 1")
        self.window = window
        self.in_flight = 0
        self._clock = client._core.clock
        self._connection = client._core.connection
        self._sends = client._core.sends
        # Sends not yet handed to the client, in order: [messages, target,
        # how many of them were handed over].
        self._waiting: deque = deque()
        self._waiting_count = 0
        self._ready: deque[Deferred] = deque()
        self._wake_call = None

    @property
    def waiting(self) -> int:
        "Sends made while the window was full, not yet handed to the client."
        return self._waiting_count

    def send(self, address: str, body: bytes, headers: dict | None = None,
             persistent: bool = True, duplicate_id: str | None = None,
             ttl: float | None = None, notify_expiry: bool = False) -> Deferred:
        """
        L{Client.send}, within the window.

        @return: Deferred firing with the message id (as L{Client.send});
            failing as it does, and with C{TypeError} for arguments it
            would raise that for.
        """
        try:
            message = send_item(address, body, headers, persistent, duplicate_id, ttl,
                                 notify_expiry)
        except (TypeError, ValueError) as e:
            return fail(e)
        refusal = send_refusal(self._connection.version, message)
        if refusal is not None:
            return fail(refusal)
        d = SendDeferred()
        d.on_settled = self._settled
        self._offer([message], d)
        return d

    def send_many(self, address: str, bodies, headers: dict | None = None,
                  persistent: bool = True, ttl: float | None = None,
                  notify_expiry: bool = False) -> Deferred:
        """
        L{Client.send_many}, within the window: each message counts as one
        send, and those that do not fit wait (so a batch larger than the
        window goes out as answers make room).

        @return: ONE Deferred, as L{Client.send_many}'s; failing with
            C{TypeError} for arguments it would raise that for.
        """
        try:
            messages = send_items(self._connection.version, address, bodies, headers,
                                   persistent, ttl, notify_expiry)
        except (TypeError, ValueError, SendError) as e:
            return fail(e)
        group = SendGroup(len(messages), self._settled)
        if messages:
            self._offer(messages, group)
        else:
            group.deferred.callback([])
        return group.deferred

    def ready(self) -> Deferred:
        """
        @return: Deferred firing with None as soon as a send would not
            wait (at once if it would not now).
        """
        d = Deferred()
        if self.in_flight + self._waiting_count < self.window:
            d.callback(None)
        else:
            self._ready.append(d)
        return d

    def _offer(self, messages: list, target) -> None:
        if not self._waiting and self.in_flight + len(messages) <= self.window:
            self.in_flight += len(messages)
            self._sends.send_later(messages, target)
            return
        self._waiting.append([messages, target, 0])
        self._waiting_count += len(messages)
        self._hand_over()

    def _settled(self, count: int) -> None:
        """
        C{count} sends got their outcome: hand over what now fits, then
        wake the loops waiting for room.
        """
        self.in_flight -= count
        if self._waiting:
            self._hand_over()
        if self._ready and self._wake_call is None:
            # At the end of the turn: the loops waiting for room then find
            # every answer of the turn's frames counted, and fill the room
            # with one call rather than a send per answer.
            self._wake_call = self._clock.callLater(0, self._wake)

    def _wake(self) -> None:
        self._wake_call = None
        ready = self._ready
        while ready and self.in_flight + self._waiting_count < self.window:
            ready.popleft().callback(None)

    def _hand_over(self) -> None:
        waiting = self._waiting
        while waiting and self.in_flight < self.window:
            entry = waiting[0]
            messages, target, taken = entry
            part = messages[taken:taken + self.window - self.in_flight]
            if taken + len(part) == len(messages):
                waiting.popleft()
            else:
                entry[2] = taken + len(part)
            self._waiting_count -= len(part)
            self.in_flight += len(part)
            self._sends.send_later(part, target, taken)
