"""
What C{meshroute send} and C{receive} share: the options of a client
session that survives failures (L{meshroute.client.ClientOptions}), the
check of C{--connect}, the failures told to the operator, and running
the command on the reactor.
"""

import os
import re
import sys

from twisted.internet import defer, task
from twisted.python import usage

from meshroute.cli.command_options import CommandOptions
from meshroute.config_keys import endpoint_problem, parse_duration_ms
from meshroute.errors import ConfigError

#: The environment variable C{meshroute send} and C{receive} read
#: C{--user}'s password from when no C{--password-file} is given.
PASSWORD_VARIABLE = "MESHROUTE_PASSWORD"


def positive_float(value: str) -> float:
    number = float(value)
    if not number > 0:
        raise ValueError("--timeout must be positive")
    return number


def _ms(name: str, *, lowest: int = 0, never: bool = False):
    """
    A duration option: integer milliseconds or a string with a unit
    (C{"500ms"}, C{"15s"}, C{"2m"}), at least C{lowest}; -1 too if C{never}.
    """

    def coerce(value: str) -> int:
        if never and value.strip() == "-1":
            return -1
        try:
            number = int(value)
        except ValueError:
            try:
                number = parse_duration_ms(value, path="command line", key=name)
            except ConfigError as e:
                raise ValueError(e.message) from None
        if number < lowest:
            raise ValueError(f"{name} must be {'-1 or ' if never else ''}at least {lowest} ms")
        return number

    coerceDoc = "(milliseconds, or with a unit: 500ms, 15s, 2m"
    coerce.coerceDoc = coerceDoc + ("; -1: never)" if never else ")")
    return coerce


def integer_option(name: str, *, lowest: int, never: bool = False):
    """
    An integer option: at least C{lowest}, or -1 too (forever, or none) if
    C{never}.
    """

    def coerce(value: str) -> int:
        try:
            number = int(value)
        except ValueError:
            raise ValueError(f"{name} must be an integer, not {value!r}") from None
        if number < lowest and not (never and number == -1):
            raise ValueError(f"{name} must be {'-1 or ' if never else ''}at least {lowest}")
        return number

    coerce.coerceDoc = f"(an integer, {'-1 or ' if never else ''}at least {lowest})"
    return coerce


def _multiplier(value: str) -> float:
    number = float(value)
    if not number > 0:
        raise ValueError("--retry-interval-multiplier must be positive")
    return number


class SessionOptions(CommandOptions):
    """
    The options of a session that survives failures, shared by C{send} and
    C{receive}: L{meshroute.client.ClientOptions}, Artemis' names and
    defaults.
    """

    def __init__(self) -> None:
        super().__init__()
        self["connect"] = []

    def opt_connect(self, endpoint: str) -> None:
        """
        A router's client endpoint, e.g. tcp:127.0.0.1:6001.  Repeat it for
        a router reachable at several endpoints (the two instances of a
        pair): they are tried in turn, one round is one attempt at each,
        and the waits come between rounds.
        """
        self["connect"].append(endpoint)

    opt_c = opt_connect

    def check_connect(self) -> None:
        """
        @raise usage.UsageError: no C{--connect}, or one given twice.
        """
        endpoints = self["connect"]
        if not endpoints:
            raise usage.UsageError("--connect is required")
        repeated = sorted({e for e in endpoints if endpoints.count(e) > 1})
        if repeated:
            raise usage.UsageError(f"--connect {repeated[0]} is given more than once")

    optParameters = [
        ["ttl", None, 60000,
         "Connection TTL: the router closes the connection when it heard nothing "
         "from this client for that long; the client pings at a third of it.",
         _ms("--ttl", lowest=1, never=True)],
        ["client-failure-check-period", None, 30000,
         "Treat a connection that brought nothing at all for that long as failed "
         "(and reconnect, if --reconnect-attempts allows).",
         _ms("--client-failure-check-period", lowest=1, never=True)],
        ["reconnect-attempts", None, 0,
         "Reconnection attempts in a row after a connection failure before giving up "
         "(0: none, the command fails at once; -1: forever).  With several --connect, "
         "an attempt is a round: each endpoint once, starting after the one that failed.",
         integer_option("--reconnect-attempts", lowest=0, never=True)],
        ["retry-interval", None, 2000,
         "Wait before each reconnection round; the first one comes at once after a "
         "connection that served this long was closed (EOF or reset).",
         _ms("--retry-interval")],
        ["retry-interval-multiplier", None, 1.0,
         "Each further wait is this many times the previous one ...", _multiplier],
        ["max-retry-interval", None, None,
         "... and never longer than this; by default 2000 ms, or --retry-interval if "
         "longer", _ms("--max-retry-interval")],
        ["initial-connect-attempts", None, 1,
         "Attempts to make the first connection, with the same waits (-1: forever); "
         "with several --connect, rounds over them (1: each endpoint once).",
         integer_option("--initial-connect-attempts", lowest=1, never=True)],
        ["confirmation-window-size", None, -1,
         "Bytes of sent commands kept until the router has them, to replay them when the "
         "session is resumed after a reconnection, so a short cut is invisible; when "
         "full, the command waits.  -1: none: a reconnection always makes a new "
         "session (sends in flight then fail, see --duplicate-id-prefix).",
         integer_option("--confirmation-window-size", lowest=0, never=True)],
        ["client-id", None, None, "How the router names this client (default meshroute-PID)."],
        ["user", None, None,
         "Authenticate as this user (SCRAM-SHA-256: the password never crosses the wire), "
         "with the password from --password-file or the environment variable "
         f"{PASSWORD_VARIABLE}; never from the command line.  Without it, a router with "
         "users accepts only a TLS client certificate (tls:...:certificate=...:privateKey=... "
         "in --connect)."],
        ["password-file", None, None,
         f"The file whose first line is --user's password (else ${PASSWORD_VARIABLE})."],
    ]

    def password(self) -> str | None:
        """
        --user's password: the first line of --password-file, else
        C{$MESHROUTE_PASSWORD}; None without --user.

        @raise usage.UsageError: --user without a password, or a password
            without --user.
        """
        path = self["password-file"]
        if self["user"] is None:
            if path is not None:
                raise usage.UsageError("--password-file needs --user")
            return None
        if path is None:
            password = os.environ.get(PASSWORD_VARIABLE)
            if password is None:
                raise usage.UsageError(f"--user {self['user']} needs its password: "
                                       f"--password-file FILE or ${PASSWORD_VARIABLE}")
            return password
        try:
            with open(path, encoding="utf-8") as f:
                return f.readline().rstrip("\r\n")
        except (OSError, UnicodeDecodeError) as e:
            raise usage.UsageError(f"--password-file {path}: "
                                   f"{getattr(e, 'strerror', None) or e}") from None

    def client_options(self):
        """
        The L{meshroute.client.ClientOptions} these options ask for.

        @raise usage.UsageError: they contradict each other.
        """
        # The client library is imported by the commands that connect,
        # when they run: the others start without it.
        from meshroute.client import ClientOptions

        retry = self["retry-interval"]
        longest = self["max-retry-interval"]
        if longest is None:
            longest = max(2000, retry)
        try:
            return ClientOptions(
                client_id=self["client-id"], ttl_ms=self["ttl"],
                client_failure_check_period_ms=self["client-failure-check-period"],
                confirmation_window_size=self["confirmation-window-size"],
                retry_interval_ms=retry,
                retry_interval_multiplier=self["retry-interval-multiplier"],
                max_retry_interval_ms=longest, reconnect_attempts=self["reconnect-attempts"],
                initial_connect_attempts=self["initial-connect-attempts"],
                user=self["user"], password=self.password(),
            )
        except ValueError as e:
            raise usage.UsageError(
                str(e).replace("max_retry_interval_ms", "--max-retry-interval")
                .replace("retry_interval_ms", "--retry-interval")) from None


async def open_client(reactor, options, err, connect=None):
    """
    Open the session C{options} ask for, its failures told on C{err}.

    @param connect: L{meshroute.client.connect} or a substitute with its
        signature (tests use an in-memory connection).
    @return: C{(client, 0)}; or C{(None, status)} after saying why not: 2
        for a C{--connect} that cannot work, 1 when no session opens.
    """
    from meshroute.client import ClientError
    from meshroute.client import connect as default_connect

    if status := _usage_problem(reactor, options, err):
        return None, status
    connect = connect or default_connect
    try:
        client = await connect(reactor, options["connect"], options.client_options())
    except ClientError as e:
        err.write(f"meshroute: cannot open a session at {', '.join(options['connect'])}: "
                  f"{e}\n")
        return None, 1
    client.add_failure_listener(_report_failures(client, err))
    return client, 0


def _report_failures(client, err):
    """
    A failure listener that tells the operator how the session fared, and
    at which endpoint.
    """
    from meshroute.client import FAILOVER

    failed = client.endpoint

    def report(event: str) -> None:
        nonlocal failed
        if event == FAILOVER:
            how, now = client.last_failover, client.endpoint
            where = "" if now == failed else f" at {now}"
            err.write(f"meshroute: the connection to {failed} failed; session {how}{where} "
                      f"({event})\n")
            failed = now
        else:
            err.write(f"meshroute: the connection to {failed} failed; gave up "
                      f"reconnecting ({event})\n")

    return report


#: What an operator may type for C{--connect} when a TCP endpoint is meant.
_HOST_PORT = re.compile(r"(?P<host>[^:\s]+|\[[^\]]+\]):(?P<port>\d+)")


def _connect_problem(reactor, endpoint: str) -> str | None:
    """
    Why C{--connect endpoint} cannot work, or None: it must be a client
    endpoint string (C{tcp:HOST:PORT}, C{tls:...}, C{unix:PATH}), and
    C{HOST:PORT}, the usual mistake, gets the spelling it needs.
    """
    problem = endpoint_problem("client-endpoint", endpoint, reactor)
    if problem is None:
        return None
    if endpoint.isdigit() or not endpoint.startswith(("tcp:", "tls:", "ssl:", "unix:")):
        match = _HOST_PORT.fullmatch(endpoint)
        spelling = f"tcp:{match['host']}:{match['port']}" if match else "tcp:HOST:PORT"
        return f"not an endpoint string ({problem}); write {spelling}"
    return problem


def _usage_problem(reactor, options, err) -> int:
    """
    Report a C{--connect} that cannot work: exit status 2 (usage), or 0.
    """
    for endpoint in options["connect"]:
        problem = _connect_problem(reactor, endpoint)
        if problem is not None:
            err.write(f"meshroute: --connect {endpoint}: {problem}\n")
            return 2
    return 0


def run_under_reactor(run, options, out) -> int:
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

