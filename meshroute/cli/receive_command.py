"""
C{meshroute receive}: consume messages from a queue of a router, or the
publications of topics (durably or not), print each one and acknowledge
it after printing.
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
from meshroute.topics.retained import ALL, IF_NEW, NONE


class ReceiveOptions(SessionOptions):
    synopsis = ("--connect ENDPOINT [--connect ENDPOINT]... (--queue NAME | --topic PATTERN "
                "[--durable NAME --client-id ID [--shared] [--forget]] [--mesh-wide] "
                "[--retained all|if-new]) "
                "[--count N] [--timeout SECONDS] [--json] [reconnection options]")
    longdesc = (
        "Consume messages from a queue of the router connected to, or the publications "
        "whose topic matches a pattern (from anywhere in the mesh), print each one "
        "and acknowledge it after printing.  With --durable the topic subscription is "
        "durable: the router keeps it collecting after the command exits, for the next "
        "command of the same --durable and --client-id, until one with --forget.  Exit "
        "0 when --count messages were "
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
        ["topic", None, None,
         "Consume the publications whose topic matches PATTERN: words separated by dots, "
         "* one word, # zero or more (prices.*.gbp, prices.#)."],
        ["durable", None, None,
         "With --topic: the durable subscription NAME of --client-id, made if it does not "
         "exist, which keeps collecting when the command exits."],
        ["retained", None, None,
         "With --topic: first receive the retained messages whose topic matches PATTERN, "
         "all of them, or if-new (none if the --durable subscription exists already)."],
        ["count", "n", None, "Stop after N messages.", integer_option("--count", lowest=1)],
        ["timeout", None, None, "Stop after SECONDS.", positive_float],
        ["prefetch", None, 100, "Messages held unacknowledged at most.",
         integer_option("--prefetch", lowest=1)],
    ]
    optFlags = [
        ["json", None, "Print one JSON object per message."],
        ["shared", None, "With --durable: a shared durable subscription, which several "
                         "consumers take at once, each publication to one of them."],
        ["forget", None, "With --durable: end the durable subscription for good when the "
                         "command stops, deleting what it still holds (after --count "
                         "messages or at --timeout; with neither, at once, receiving "
                         "nothing)."],
        ["mesh-wide", None, "With --topic: start receiving only once the subscription's "
                            "interest has reached every router reachable now (fails "
                            "after 30 s otherwise)."],
    ]

    def postOptions(self) -> None:
        self.check_connect()
        if bool(self["queue"]) == bool(self["topic"]):
            raise usage.UsageError("one of --queue and --topic is required")
        if self["retained"] not in (None, ALL, IF_NEW):
            raise usage.UsageError(f"--retained is {ALL} or {IF_NEW}, not {self['retained']!r}")
        for option, needs in (("durable", "topic"), ("mesh-wide", "topic"), ("retained", "topic"),
                              ("shared", "durable"), ("forget", "durable"),
                              ("durable", "client-id")):
            if self[option] and not self[needs]:
                raise usage.UsageError(f"--{option} needs --{needs}")
        self.client_options()

    @property
    def source(self) -> str:
        "What the command consumes, as its messages say."
        return self["queue"] or f"topic:{self['topic']}"

    def subscribe(self, client, on_message, max_messages):
        """
        The subscription the options ask for, on C{client}.
        """
        if self["queue"]:
            return client.subscribe(self["queue"], on_message, prefetch=self["prefetch"],
                                    max_messages=max_messages)
        return client.subscribe_topic(self["topic"], on_message, durable=self["durable"],
                                      shared=self["shared"], mesh_wide=self["mesh-wide"],
                                      prefetch=self["prefetch"], max_messages=max_messages,
                                      retained=self["retained"] or NONE)


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
    # Forgetting, with no end given: at once, nothing received.
    at_once = options["forget"] and count is None and timeout is None

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
                subscription = await options.subscribe(client, on_message,
                                                       0 if at_once else count)
                break
            except UnblockedError:
                # The session was recreated before the router confirmed:
                # subscribe in the new one (once the client gave up, this
                # fails with a plain SessionError instead).
                continue
        if not at_once:
            await finished
        if options["forget"]:
            await subscription.unsubscribe(forget=True)
    except ClientError as e:
        err.write(f"meshroute: receive from {options.source} failed: {e}\n")
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

