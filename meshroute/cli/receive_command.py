"""
C{meshroute receive}: consume messages from a queue of a router, print
each one and acknowledge it after printing.
"""

import json

from twisted.internet import defer
from twisted.python import usage

from meshroute.cli.session_commands import (
    SessionOptions,
    integer_option,
    open_client,
    positive_float,
    run_under_reactor,
)


class ReceiveOptions(SessionOptions):
    synopsis = ("--connect ENDPOINT [--connect ENDPOINT]... --queue NAME [--count N] "
                "[--timeout SECONDS] [--json] "
                "[reconnection options]")
    longdesc = (
        "Consume messages from a queue of the router connected to, print each one "
        "and acknowledge it after printing.  Exit 0 when --count messages were "
        "received, or at --timeout with what was received; exit 1 if --count was "
        "given and not reached by the timeout.  With --json, one JSON object per "
        'message per line: {"id", "body", "headers", "redelivered"}, the body as '
        'text when it is UTF-8, else base64 with "encoding": "base64".  With '
        "--reconnect-attempts the command rides out connection failures: its "
        "session is resumed, or made anew with the subscription (messages "
        "delivered and not acknowledged then come again, marked redelivered)."
    )
    optParameters = [
        ["queue", "q", None, "The local queue to consume from."],
        ["count", "n", None, "Stop after N messages.", integer_option("--count", lowest=1)],
        ["timeout", None, None, "Stop after SECONDS.", positive_float],
        ["prefetch", None, 100, "Messages held unacknowledged at most.",
         integer_option("--prefetch", lowest=1)],
    ]
    optFlags = [["json", None, "Print one JSON object per message."]]

    def postOptions(self) -> None:
        self.check_connect()
        if not self["queue"]:
            raise usage.UsageError("--queue is required")
        self.client_options()


def format_received(message, as_json: bool) -> str:
    """
    One line of C{meshroute receive}'s output for C{message}.
    """
    # The client library is imported when the command runs: the commands
    # that do not connect start without it.
    from meshroute.client import describe_body

    if not as_json:
        return message.body.decode("utf-8", errors="backslashreplace") + "\n"
    record = {"id": message.msg_id}
    record.update(describe_body(message.body))
    record["headers"] = message.headers
    record["redelivered"] = message.redelivered
    return json.dumps(record, ensure_ascii=False) + "\n"


async def run_receive(reactor, options, out, err, connect=None) -> int:
    """
    C{meshroute receive} on C{reactor}; returns the exit status.
    """
    from meshroute.client import ClientError, UnblockedError

    client, status = await open_client(reactor, options, err, connect)
    if client is None:
        return status
    count, timeout = options["count"], options["timeout"]
    finished: defer.Deferred = defer.Deferred()
    received = 0

    def on_message(message) -> None:
        nonlocal received
        if count is not None and received >= count:
            return
        out.write(format_received(message, options["json"]))
        out.flush()
        message.ack()
        received += 1
        if count is not None and received >= count and not finished.called:
            finished.callback(None)

    def lost(failure) -> None:
        if not finished.called:
            finished.errback(failure)

    client.when_closed().addErrback(lost)
    def time_is_up() -> None:
        if not finished.called:
            finished.callback(None)

    timer = reactor.callLater(timeout, time_is_up) if timeout else None
    try:
        while True:
            try:
                await client.subscribe(options["queue"], on_message,
                                       prefetch=options["prefetch"], max_messages=count)
                break
            except UnblockedError:
                # The session was recreated before the router confirmed:
                # subscribe in the new one (once the client gave up, this
                # fails with a plain SessionError instead).
                continue
        await finished
    except ClientError as e:
        err.write(f"meshroute: receive from {options['queue']} failed: {e}\n")
        return 1
    finally:
        if timer is not None and timer.active():
            timer.cancel()
        await client.close()
    if count is not None and received < count:
        err.write(f"meshroute: received {received} of {count} messages before the timeout\n")
        return 1
    return 0


def receive(options, out) -> int:
    return run_under_reactor(run_receive, options, out)

