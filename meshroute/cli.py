"""
The C{meshroute} command: operator tools around running routers.

C{twistd -n meshroute --config FILE} runs a router; this command checks
configurations, inspects routers through their admin API, and sends and
receives messages through a router's client listener (L{meshroute.client}).
"""

import json
import sys
import urllib.error
import urllib.request

from twisted.internet import defer, task
from twisted.python import usage

from meshroute.config import format_config, load_config
from meshroute.errors import ConfigError

#: Sends C{meshroute send} keeps in flight (sent, not yet confirmed).
SEND_WINDOW = 1000


class CheckConfigOptions(usage.Options):
    synopsis = "FILE"
    longdesc = "Validate a router configuration and print it with every default filled in."

    def parseArgs(self, path: str) -> None:
        self["path"] = path


class StatusOptions(usage.Options):
    synopsis = "--admin URL [--json]"
    longdesc = "Show a running router's identity and links, from its admin API."
    optParameters = [["admin", "a", None, "The router's admin base URL, e.g. http://127.0.0.1:8001"]]
    optFlags = [["json", None, "Print the raw JSON instead of a table."]]

    def postOptions(self) -> None:
        if not self["admin"]:
            raise usage.UsageError("--admin URL is required")


def _positive_int(name: str):
    def coerce(value: str) -> int:
        try:
            number = int(value)
        except ValueError:
            raise ValueError(f"{name} must be an integer, not {value!r}") from None
        if number < 1:
            raise ValueError(f"{name} must be at least 1")
        return number

    coerce.coerceDoc = "(an integer, at least 1)"
    return coerce


def _non_negative_int(value: str) -> int:
    number = int(value)
    if number < 0:
        raise ValueError("--size must not be negative")
    return number


def _positive_float(value: str) -> float:
    number = float(value)
    if not number > 0:
        raise ValueError("--timeout must be positive")
    return number


class SendOptions(usage.Options):
    synopsis = ("--connect ENDPOINT --to QUEUE[@ROUTER] [--count N] "
                "[--size BYTES | --body TEXT] [--non-persistent]")
    longdesc = (
        "Send messages through a router's client listener and exit 0 once every "
        "one is durably accepted (non-persistent: accepted).  Without --body or "
        "--size, message N has the body 'message N'.  Sends are pipelined, at most "
        f"{SEND_WINDOW} unconfirmed at a time; the first refusal stops the command "
        "with exit status 1."
    )
    optParameters = [
        ["connect", "c", None, "The router's client endpoint, e.g. tcp:127.0.0.1:6001"],
        ["to", "t", None, "The address: QUEUE@ROUTER, or QUEUE on the router connected to."],
        ["count", "n", 1, "How many messages to send.", _positive_int("--count")],
        ["size", "s", None, "Every body is BYTES bytes long.", _non_negative_int],
        ["body", "b", None, "Every body is TEXT (UTF-8)."],
        ["client-id", None, None, "How the router names this client (default meshroute-PID)."],
    ]
    optFlags = [["non-persistent", None, "Send non-persistent messages (memory only)."]]

    def postOptions(self) -> None:
        for name in ("connect", "to"):
            if not self[name]:
                raise usage.UsageError(f"--{name} is required")
        if self["size"] is not None and self["body"] is not None:
            raise usage.UsageError("--size and --body exclude each other")

    def body(self, n: int) -> bytes:
        """
        The body of message C{n} (from 1).
        """
        if self["body"] is not None:
            return self["body"].encode("utf-8")
        if self["size"] is not None:
            return b"x" * self["size"]
        return f"message {n}".encode()


class ReceiveOptions(usage.Options):
    synopsis = "--connect ENDPOINT --queue NAME [--count N] [--timeout SECONDS] [--json]"
    longdesc = (
        "Consume messages from a queue of the router connected to, print each one "
        "and acknowledge it after printing.  Exit 0 when --count messages were "
        "received, or at --timeout with what was received; exit 1 if --count was "
        "given and not reached by the timeout.  With --json, one JSON object per "
        'message per line: {"id", "body", "headers", "redelivered"}, the body as '
        'text when it is UTF-8, else base64 with "encoding": "base64".'
    )
    optParameters = [
        ["connect", "c", None, "The router's client endpoint, e.g. tcp:127.0.0.1:6001"],
        ["queue", "q", None, "The local queue to consume from."],
        ["count", "n", None, "Stop after N messages.", _positive_int("--count")],
        ["timeout", None, None, "Stop after SECONDS.", _positive_float],
        ["prefetch", None, 100, "Messages held unacknowledged at most.",
         _positive_int("--prefetch")],
        ["client-id", None, None, "How the router names this client (default meshroute-PID)."],
    ]
    optFlags = [["json", None, "Print one JSON object per message."]]

    def postOptions(self) -> None:
        for name in ("connect", "queue"):
            if not self[name]:
                raise usage.UsageError(f"--{name} is required")


class Options(usage.Options):
    synopsis = "COMMAND [options]"
    subCommands = [
        ["check-config", None, CheckConfigOptions, "Validate a configuration file."],
        ["status", None, StatusOptions, "Show a router's links."],
        ["send", None, SendOptions, "Send messages through a router."],
        ["receive", None, ReceiveOptions, "Consume messages from a router's queue."],
    ]

    def postOptions(self) -> None:
        if self.subCommand is None:
            raise usage.UsageError("a command is required")


def check_config(options, out) -> int:
    try:
        config = load_config(options["path"])
    except ConfigError as e:
        print(f"meshroute: {e}", file=sys.stderr)
        return 1
    out.write(f"# effective configuration of {config.path}\n")
    out.write(format_config(config))
    return 0


def fetch_json(base: str, path: str):
    with urllib.request.urlopen(base.rstrip("/") + path, timeout=5) as response:
        return json.load(response)


def format_links(router: dict, links: list[dict]) -> str:
    """
    The human-readable status table.
    """
    lines = [f"router {router['name']} (meshroute {router['version']}, up {router['uptime_s']:.0f} s)"]
    if not links:
        lines.append("  no links")
    header = f"  {'peer':<16} {'direction':<10} {'stage':<15} {'keepalive':>10} {'counter':>8}"
    if links:
        lines.append(header)
    for link in links:
        interval = link["keepalive_interval_ms"]
        counter = link["keepalive_counter"]
        lines.append(
            f"  {link['peer'] or '?':<16} {link['direction']:<10} {link['stage']:<15} "
            f"{str(interval) + ' ms' if interval else '-':>10} "
            f"{counter if counter is not None else '-':>8}"
        )
    return "\n".join(lines) + "\n"


def status(options, out) -> int:
    try:
        router = fetch_json(options["admin"], "/api/v1/router")
        links = fetch_json(options["admin"], "/api/v1/links")
    except (urllib.error.URLError, OSError, ValueError) as e:
        print(f"meshroute: cannot read {options['admin']}: {e}", file=sys.stderr)
        return 1
    if options["json"]:
        out.write(json.dumps({"router": router, "links": links}, indent=1) + "\n")
    else:
        out.write(format_links(router, links))
    return 0


async def run_send(reactor, options, out, err, connect=None) -> int:
    """
    C{meshroute send} on C{reactor}; returns the exit status.

    @param connect: L{meshroute.client.connect} or a substitute with its
        signature (tests use an in-memory connection).
    """
    from meshroute.client import ClientError
    from meshroute.client import connect as default_connect

    connect = connect or default_connect
    try:
        client = await connect(reactor, options["connect"], client_id=options["client-id"])
    except ClientError as e:
        err.write(f"meshroute: cannot open a session at {options['connect']}: {e}\n")
        return 1
    count, address = options["count"], options["to"]
    persistent = not options["non-persistent"]
    window = _Window(SEND_WINDOW)
    try:
        for n in range(1, count + 1):
            await window.room()
            if window.error is not None:
                break
            try:
                d = client.send(address, options.body(n), persistent=persistent)
            except TypeError as e:
                window.error = f"message {n}: {e}"
                break
            window.track(d, n)
        await window.drained()
    finally:
        await client.close()
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
        self.error: str | None = None

    def room(self) -> defer.Deferred:
        if self._in_flight < self._size or self.error is not None:
            return defer.succeed(None)
        self._waiting = defer.Deferred()
        return self._waiting

    def drained(self) -> defer.Deferred:
        if not self._in_flight:
            return defer.succeed(None)
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
        waiting, self._waiting = self._waiting, None
        if waiting is not None:
            waiting.callback(None)


def format_received(message, as_json: bool) -> str:
    """
    One line of C{meshroute receive}'s output for C{message}.
    """
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
    from meshroute.client import ClientError
    from meshroute.client import connect as default_connect

    connect = connect or default_connect
    try:
        client = await connect(reactor, options["connect"], client_id=options["client-id"])
    except ClientError as e:
        err.write(f"meshroute: cannot open a session at {options['connect']}: {e}\n")
        return 1
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
        await client.subscribe(options["queue"], on_message, prefetch=options["prefetch"],
                               max_messages=count)
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


def _react(run, options, out) -> int:
    """
    Run C{run(reactor, options, out, err)} under L{task.react} and return
    its exit status.
    """

    async def main(reactor):
        code = await run(reactor, options, out, sys.stderr)
        if code:
            raise SystemExit(code)

    try:
        task.react(lambda reactor: defer.ensureDeferred(main(reactor)))
    except SystemExit as e:
        return e.code
    return 0


def send(options, out) -> int:
    return _react(run_send, options, out)


def receive(options, out) -> int:
    return _react(run_receive, options, out)


COMMANDS = {"check-config": check_config, "status": status, "send": send, "receive": receive}


def main(argv=None, out=sys.stdout) -> int:
    options = Options()
    try:
        options.parseOptions(sys.argv[1:] if argv is None else argv)
    except usage.UsageError as e:
        print(f"meshroute: {e}\n\n{options}", file=sys.stderr)
        return 2
    return COMMANDS[options.subCommand](options.subOptions, out)


if __name__ == "__main__":
    sys.exit(main())
