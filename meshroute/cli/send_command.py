"""
C{meshroute send}: messages through a router's client listener,
pipelined, each confirmed before the command exits 0.
"""

import os

from twisted.internet import defer, task
from twisted.python import usage

from meshroute.cli.session_commands import (
    SessionOptions,
    integer_option,
    open_client,
    positive_float,
    run_under_reactor,
)
from meshroute.messages import TOPIC_PREFIX
from meshroute.topics.retained import RETAIN_HEADER
from meshroute.wire.client_frames import MAX_FRAME_SIZE, oversized_send

#: Sends C{meshroute send} keeps in flight (sent, not yet confirmed).
SEND_WINDOW = 1000


def _non_negative_int(value: str) -> int:
    number = int(value)
    if number < 0:
        raise ValueError("--size must not be negative")
    return number


class SendOptions(SessionOptions):
    synopsis = ("--connect ENDPOINT [--connect ENDPOINT]... (--to QUEUE[@ROUTER] | --topic TOPIC "
                "[--retain]) [--count N] "
                "[--size BYTES | --body TEXT] [--non-persistent] [--duplicate-id-prefix P] "
                "[--message-ttl SECONDS] [--rate PER_SECOND] [reconnection options]")
    longdesc = (
        "Send messages through a router's client listener (or, with --topic, publish them "
        "to every subscription whose pattern matches the topic, across the mesh) and exit "
        "0 once every one is durably accepted (non-persistent: accepted).  Without --body or "
        "--size, message N has the body 'message N'.  A message travels in one "
        f"client frame of at most {MAX_FRAME_SIZE} bytes (the router's limit, "
        "meshroute.wire.client_frames.MAX_FRAME_SIZE) with its address and headers, "
        "so its body must be a little smaller; a larger one is a usage error.  "
        "Sends are pipelined, at most "
        f"{SEND_WINDOW} unconfirmed at a time; the first refusal stops the command "
        "with exit status 1.  With --reconnect-attempts the command rides out "
        "connection failures: with a --confirmation-window-size it resumes its "
        "session and nothing is lost or doubled; when the session has to be made "
        "anew, sends that were in flight have an unknown outcome, and with "
        "--duplicate-id-prefix the command sends them again (the router enqueues "
        "each duplicate id once), so every message is enqueued exactly once."
    )
    optParameters = [
        ["to", "t", None, "The address: QUEUE@ROUTER, or QUEUE on the router connected to."],
        ["topic", None, None, "Publish to TOPIC (words separated by dots: prices.eu.gbp) "
                              "instead of sending to a queue."],
        ["count", "n", 1, "How many messages to send.", integer_option("--count", lowest=1)],
        ["size", "s", None,
         f"Every body is BYTES bytes long (less than {MAX_FRAME_SIZE}, the frame limit).",
         _non_negative_int],
        ["body", "b", None,
         "Every body is TEXT: its bytes as given (UTF-8 text, or any bytes the shell "
         "passes)."],
        ["duplicate-id-prefix", None, None,
         "Message N carries the duplicate id PREFIX + N: the router enqueues it at most "
         "once (within its duplicate-id-window, across restarts), and a send whose "
         "outcome a failure made unknown is retried."],
        ["message-ttl", None, None,
         "Every message expires SECONDS after the router accepts it: one not delivered "
         "by then never is, and goes to the $expired queue of the router where its time "
         "ran out.", positive_float],
        ["rate", None, None,
         "Send at most PER_SECOND messages a second, evenly spaced (a steady load, to "
         "watch a failover under it); by default as fast as the window allows.",
         positive_float],
    ]
    optFlags = [["non-persistent", None, "Send non-persistent messages (memory only)."],
                ["retain", None, "With --topic: each publication is also kept as the topic's "
                                 "retained message, at every router (an empty --body clears "
                                 "it): docs/topics.md, \"Retained messages\"."]]

    def postOptions(self) -> None:
        self.check_connect()
        if bool(self["to"]) == bool(self["topic"]):
            raise usage.UsageError("one of --to and --topic is required")
        if self["retain"] and not self["topic"]:
            raise usage.UsageError("--retain needs --topic")
        if self["size"] is not None and self["body"] is not None:
            raise usage.UsageError("--size and --body exclude each other")
        self.client_options()
        self._check_frame_size()

    def _check_frame_size(self) -> None:
        """
        Refuse a message that cannot fit in one client frame: the router
        would close the connection on it as a protocol error, and the
        command would fail with a lost connection that says nothing of why.
        The longest body is the last message's.
        """
        body = self.body(self["count"])
        reason = oversized_send(self.address, self.headers, body, True,
                                self.duplicate_id(self["count"]) or "")
        if reason is not None:
            raise usage.UsageError(reason)

    @property
    def address(self) -> str:
        "Where the messages go: --to, or a publication's address, topic:TOPIC."
        return self["to"] or TOPIC_PREFIX + self["topic"]

    @property
    def headers(self) -> dict:
        "Every message's headers: a retained publication's flag."
        return {RETAIN_HEADER: "true"} if self["retain"] else {}

    def body(self, n: int) -> bytes:
        """
        The body of message C{n} (from 1).  C{--body} is sent as the bytes
        the shell passed: Python decoded them with the file-system encoding
        and surrogate escapes, and L{os.fsencode} gives them back.
        """
        if self["body"] is not None:
            return os.fsencode(self["body"])
        if self["size"] is not None:
            return b"x" * self["size"]
        return f"message {n}".encode()

    def duplicate_id(self, n: int) -> str | None:
        """
        The duplicate id of message C{n} (None without a prefix).
        """
        prefix = self["duplicate-id-prefix"]
        return None if prefix is None else f"{prefix}{n}"


async def run_send(reactor, options, out, err, connect=None) -> int:
    """
    C{meshroute send} on C{reactor}; returns the exit status.

    @param connect: L{meshroute.client.connect} or a substitute with its
        signature (tests use an in-memory connection).
    """
    # The client library is imported when the command runs: the commands
    # that do not connect start without it.
    from meshroute.client import DISCONNECT, UnblockedError

    client, status = await open_client(reactor, options, err, connect)
    if client is None:
        return status
    gave_up = []
    client.add_failure_listener(lambda event: event == DISCONNECT and gave_up.append(event))
    count, address = options["count"], options.address
    persistent = not options["non-persistent"]
    window = _Window(SEND_WINDOW)
    retried = 0

    def send(n: int):
        d = client.send(address, options.body(n), options.headers, persistent=persistent,
                        duplicate_id=options.duplicate_id(n), ttl=options["message-ttl"])
        d.addErrback(unblocked, n)
        return d

    def unblocked(failure, n: int):
        # The session was recreated (or given up) while message n was in
        # flight: the router may or may not have it.  With a duplicate id
        # sending it again is safe; the window waits for the retry.
        nonlocal retried
        if not failure.check(UnblockedError) or window.error is not None or gave_up:
            return failure
        if options.duplicate_id(n) is None:
            window.error = (f"message {n}: {failure.getErrorMessage()} (the router may or may "
                            "not have it; with --duplicate-id-prefix it is sent again safely)")
            return failure
        retried += 1
        return send(n)

    rate, started = options["rate"], reactor.seconds()
    try:
        for n in range(1, count + 1):
            if rate is not None:
                await task.deferLater(reactor, max(0.0, started + (n - 1) / rate
                                                   - reactor.seconds()), lambda: None)
            await window.room()
            if window.error is not None:
                break
            try:
                d = send(n)
            except TypeError as e:
                window.error = f"message {n}: {e}"
                break
            window.track(d, n)
        await window.drained()
    finally:
        await client.close()
    if retried:
        err.write(f"meshroute: sent {retried} message{'s' if retried != 1 else ''} again "
                  "after the session was recreated\n")
    if window.error is not None:
        err.write(f"meshroute: send to {address} failed: {window.error}\n")
        return 1
    kind = "accepted" if persistent else "accepted (non-persistent)"
    out.write(f"{count} message{'s' if count != 1 else ''} to {address} {kind}\n")
    return 0


class _Window:
    """
    At most C{size} sends in flight; remembers the first failure.
    """

    def __init__(self, size: int) -> None:
        self._size = size
        self._in_flight = 0
        self._waiting: defer.Deferred | None = None
        self._until = 0
        self._on_error = False
        self.error: str | None = None

    def room(self) -> defer.Deferred:
        if self._in_flight < self._size or self.error is not None:
            return defer.succeed(None)
        return self._wait(self._size - 1, on_error=True)

    def drained(self) -> defer.Deferred:
        """
        Fires once no send is in flight (a send retried after being
        unblocked is still in flight).
        """
        if not self._in_flight:
            return defer.succeed(None)
        return self._wait(0, on_error=False)

    def _wait(self, until: int, on_error: bool) -> defer.Deferred:
        self._until = until
        self._on_error = on_error
        self._waiting = defer.Deferred()
        return self._waiting

    def track(self, d: defer.Deferred, n: int) -> None:
        self._in_flight += 1
        d.addCallbacks(self._done, self._failed, errbackArgs=(n,))

    def _failed(self, failure, n: int) -> None:
        if self.error is None:
            self.error = f"message {n}: {failure.getErrorMessage()}"
        self._done(None)

    def _done(self, _) -> None:
        self._in_flight -= 1
        if self._waiting is not None and (
                self._in_flight <= self._until or (self._on_error and self.error is not None)):
            waiting, self._waiting = self._waiting, None
            waiting.callback(None)


def send(options, out) -> int:
    return run_under_reactor(run_send, options, out)

