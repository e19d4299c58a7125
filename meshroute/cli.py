"""
The C{meshroute} command: operator tools around running routers.

C{twistd -n meshroute --config FILE} runs a router; this command checks
configurations, inspects routers through their admin API, and sends and
receives messages through a router's client listener (L{meshroute.client}).
"""

import http.client
import json
import os
import re
import sqlite3
import sys
import urllib.error
import urllib.request

from twisted.internet import defer, task
from twisted.python import usage

from meshroute import __version__
from meshroute.wire.client_frames import MAX_FRAME_SIZE
from meshroute.config import config_warnings, endpoint_problem, format_config, load_config
from meshroute.errors import ConfigError
from meshroute.security.users import USER_NAME, read_users, write_users
from meshroute.status import VIEWS as STATUS_VIEWS
from meshroute.status import format_view, last_topology_change

#: Sends C{meshroute send} keeps in flight (sent, not yet confirmed).
SEND_WINDOW = 1000

#: The environment variable C{meshroute send} and C{receive} read
#: C{--user}'s password from when no C{--password-file} is given.
PASSWORD_VARIABLE = "MESHROUTE_PASSWORD"


class _Options(usage.Options):
    """
    The options of every C{meshroute} command: C{--version} is meshroute's
    (C{usage.Options} would print Twisted's).
    """

    def opt_version(self) -> None:
        """
        Print meshroute's version and exit.
        """
        print(f"meshroute {__version__}")
        sys.exit(0)


class CheckConfigOptions(_Options):
    synopsis = "FILE [FILE...]"
    longdesc = ("Validate router configurations and print each with every default filled in; "
                "warnings (settings that work, but probably not as hoped) go to stderr.  "
                "Given the files of both instances of an HA pair, also check that they "
                "agree on what pairs them (router name, group name, roles, each peer "
                "endpoint reaching the other's listener, the password files' secret, "
                "witnesses, lease-timeout, client endpoints).")

    def parseArgs(self, path: str, *paths: str) -> None:
        self["paths"] = [path, *paths]


#: Where admin API commands find the token when no --token-file is given.
ADMIN_TOKEN_VARIABLE = "MESHROUTE_ADMIN_TOKEN"


class StatusOptions(_Options):
    synopsis = ("(--admin URL | CONFIG) [VIEW] [--router NAME | --all-routers] [--json] "
                "[--token-file FILE] [--ca-file PEM]")
    longdesc = ("Show a running router's identity and links, or one VIEW of it: "
                f"{', '.join(STATUS_VIEWS)}; from its admin API, found with --admin or in "
                "the router's CONFIG file ([admin] endpoint).  --router NAME shows router "
                "NAME instead, asked through the mesh; --all-routers gathers the view from "
                "every router known.  A router with [admin] token-file wants its token: "
                "from --token-file (a file only you may read), the environment variable "
                f"{ADMIN_TOKEN_VARIABLE}, or CONFIG's token-file; never from the command "
                "line.  Exit status 1 when the router (or NAME) cannot be read.")
    optParameters = [
        ["admin", "a", None, "The router's admin base URL, e.g. http://127.0.0.1:8001"],
        ["router", "r", None, "Show this router, asked through the mesh."],
        ["token-file", None, None, "The file holding the admin API's bearer token."],
        ["ca-file", None, None,
         "For an https URL: the CA certificates (PEM) to verify the router's with, "
         "instead of the system's."],
    ]
    optFlags = [["json", None, "Print the raw JSON instead of a table."],
                ["all-routers", None, "Gather the view from every router known."]]

    def __init__(self) -> None:
        super().__init__()
        self["view"] = None
        self["config"] = None

    def parseOptions(self, options=None) -> None:
        # An operator writes the VIEW first (meshroute status links
        # --router NAME), which getopt does not allow: options go first.
        import getopt

        try:
            found, args = getopt.gnu_getopt(list(options or []), self.shortOpt, self.longOpt)
        except getopt.GetoptError as e:
            raise usage.UsageError(str(e)) from None
        takes_value = {f"--{name[:-1]}" for name in self.longOpt if name.endswith("=")}
        takes_value |= {f"-{letter}" for letter, colon
                        in zip(self.shortOpt, self.shortOpt[1:] + " ") if colon == ":"}
        ordered = [token for option, value in found
                   for token in ((option, value) if option in takes_value else (option,))]
        super().parseOptions([*ordered, "--", *args])

    def parseArgs(self, *args: str) -> None:
        for arg in args:
            if arg in STATUS_VIEWS and self["view"] is None:
                self["view"] = arg
            elif self["config"] is None and (os.path.sep in arg or arg.endswith(".toml")
                                             or os.path.exists(arg)):
                self["config"] = arg
            else:
                raise usage.UsageError(
                    f"{arg!r} is neither a view ({', '.join(STATUS_VIEWS)}) nor a "
                    "configuration file")

    def postOptions(self) -> None:
        if bool(self["admin"]) == bool(self["config"]):
            raise usage.UsageError("give the router's --admin URL or its CONFIG file (one)")
        if self["router"] and self["all-routers"]:
            raise usage.UsageError("--router and --all-routers exclude each other")
        if self["all-routers"] and self["view"] is None:
            raise usage.UsageError(f"--all-routers needs a VIEW ({', '.join(STATUS_VIEWS)})")


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


def _ms(name: str, *, lowest: int = 0, never: bool = False):
    """
    A duration option: integer milliseconds or a string with a unit
    (C{"500ms"}, C{"15s"}, C{"2m"}), at least C{lowest}; -1 too if C{never}.
    """
    from meshroute.config import parse_duration_ms

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


def _count(name: str, *, lowest: int, never: bool):
    """
    A count option: an integer, at least C{lowest}, or -1 (forever/none).
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


class _SessionOptions(_Options):
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
         _count("--reconnect-attempts", lowest=0, never=True)],
        ["retry-interval", None, 2000, "Wait before the first reconnection attempt.",
         _ms("--retry-interval")],
        ["retry-interval-multiplier", None, 1.0,
         "Each further wait is this many times the previous one ...", _multiplier],
        ["max-retry-interval", None, None,
         "... and never longer than this; by default 2000 ms, or --retry-interval if "
         "longer", _ms("--max-retry-interval")],
        ["initial-connect-attempts", None, 1,
         "Attempts to make the first connection, with the same waits (-1: forever); "
         "with several --connect, rounds over them (1: each endpoint once).",
         _count("--initial-connect-attempts", lowest=1, never=True)],
        ["confirmation-window-size", None, -1,
         "Bytes of sent commands kept until the router has them, to replay them when the "
         "session is resumed after a reconnection, so a short cut is invisible; when "
         "full, the command waits.  -1: none: a reconnection always makes a new "
         "session (sends in flight then fail, see --duplicate-id-prefix).",
         _count("--confirmation-window-size", lowest=0, never=True)],
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


class SendOptions(_SessionOptions):
    synopsis = ("--connect ENDPOINT [--connect ENDPOINT]... --to QUEUE[@ROUTER] [--count N] "
                "[--size BYTES | --body TEXT] [--non-persistent] [--duplicate-id-prefix P] "
                "[--message-ttl SECONDS] [reconnection options]")
    longdesc = (
        "Send messages through a router's client listener and exit 0 once every "
        "one is durably accepted (non-persistent: accepted).  Without --body or "
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
        ["count", "n", 1, "How many messages to send.", _positive_int("--count")],
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
         "ran out.", _positive_float],
    ]
    optFlags = [["non-persistent", None, "Send non-persistent messages (memory only)."]]

    def postOptions(self) -> None:
        self.check_connect()
        if not self["to"]:
            raise usage.UsageError("--to is required")
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
        from meshroute.wire.client_frames import oversized_send

        body = self.body(self["count"])
        reason = oversized_send(self["to"], {}, body, True,
                                self.duplicate_id(self["count"]) or "")
        if reason is not None:
            raise usage.UsageError(reason)

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


class ReceiveOptions(_SessionOptions):
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
        ["count", "n", None, "Stop after N messages.", _positive_int("--count")],
        ["timeout", None, None, "Stop after SECONDS.", _positive_float],
        ["prefetch", None, 100, "Messages held unacknowledged at most.",
         _positive_int("--prefetch")],
    ]
    optFlags = [["json", None, "Print one JSON object per message."]]

    def postOptions(self) -> None:
        self.check_connect()
        if not self["queue"]:
            raise usage.UsageError("--queue is required")
        self.client_options()


class AuditOptions(_Options):
    synopsis = ("EVENTS... --out DIR [--master URL] [--conf KEY=VALUE]... "
                "[--in-flight-grace SECONDS] [--keepalive-limit INTERVALS] [--quiet]")
    longdesc = (
        "Audit the mesh from its routers' event logs on Spark (PySpark, the 'audit' extra). "
        "See meshroute audit --help and docs/events.md, 'Audit'."
    )

    def parseOptions(self, options=None) -> None:
        # Options may follow EVENTS, which getopt does not allow, so the
        # job's own parser reads them.  A usage error is bad input (exit
        # status 1): status 2 means the mesh broke its promises.
        from meshroute.audit.job import UsageProblem, settings_from_args

        try:
            self["settings"] = settings_from_args(list(options or []))
        except UsageProblem as e:
            self["error"] = str(e)


class ForceActivateOptions(_Options):
    synopsis = "--data-dir DIR --accept-data-loss"
    longdesc = (
        "Make the stopped HA instance of DIR activate at its next start without asking the "
        "voters, in an epoch above every epoch it knows: the one way around the start-up "
        "rule, for when the instance that holds the newest data is gone for good.  Changes "
        "that were confirmed to clients and that this instance lacks are lost.  Refused "
        "while a router runs on DIR.  Written to DIR/ha.db and logged (ha.force-activate)."
    )
    optParameters = [["data-dir", "d", None, "The stopped instance's data dir."]]
    optFlags = [["accept-data-loss", None,
                 "Say that you accept losing confirmed changes this instance lacks."]]

    def postOptions(self) -> None:
        if not self["data-dir"]:
            raise usage.UsageError("--data-dir DIR is required")
        if not self["accept-data-loss"]:
            raise usage.UsageError(
                "refused without --accept-data-loss: a forced activation skips the voters, "
                "so this instance serves even if it lacks changes that were confirmed to "
                "clients, which are then lost for good; start the instance normally unless "
                "the instance with the newest data cannot come back")


class HAOptions(_Options):
    synopsis = "force-activate [options]"
    longdesc = "Operate an HA instance (docs/ha.md)."
    subCommands = [
        ["force-activate", None, ForceActivateOptions,
         "Activate a stopped instance at its next start, accepting data loss."],
    ]

    def postOptions(self) -> None:
        if self.subCommand is None:
            raise usage.UsageError("an ha command is required: force-activate")


class _UsersFileOptions(_Options):
    """
    The C{--file} every C{meshroute user} command needs.
    """

    optParameters = [["file", "f", None, "The users file (created by the first add)."]]

    def check_file(self) -> None:
        if not self["file"]:
            raise usage.UsageError("--file FILE is required")


class UserAddOptions(_UsersFileOptions):
    synopsis = "--file FILE [--password-stdin] [--replace] NAME"
    longdesc = ("Add user NAME to the users file, with a password prompted for twice (or "
                "read from the first line of standard input with --password-stdin; never "
                "from the command line).  The file keeps SCRAM-SHA-256 credentials, never "
                "the password, and is written with mode 0600.  A running router reads it "
                "again on SIGHUP.")
    optFlags = [["password-stdin", None, "Read the password from standard input."],
                ["replace", None, "Change the password of a user the file already holds."]]

    def parseArgs(self, name: str) -> None:
        self["name"] = name

    def postOptions(self) -> None:
        self.check_file()
        if not USER_NAME.fullmatch(self["name"]):
            raise usage.UsageError(f"{self['name']!r} is not a user name "
                                   "(1 to 64 of A-Z a-z 0-9 . _ -)")


class UserRemoveOptions(_UsersFileOptions):
    synopsis = "--file FILE NAME"
    longdesc = ("Remove user NAME from the users file.  A running router closes the user's "
                "connections when it reads the file again (SIGHUP).")

    def parseArgs(self, name: str) -> None:
        self["name"] = name

    def postOptions(self) -> None:
        self.check_file()


class UserListOptions(_UsersFileOptions):
    synopsis = "--file FILE"
    longdesc = "List the names of the users file's users, one a line (never their hashes)."

    def postOptions(self) -> None:
        self.check_file()


class UserOptions(_Options):
    synopsis = "add|remove|list --file FILE [options]"
    longdesc = "Manage a users file ([security] users-file, docs/security.md)."
    subCommands = [
        ["add", None, UserAddOptions, "Add a user, or change its password with --replace."],
        ["remove", None, UserRemoveOptions, "Remove a user."],
        ["list", None, UserListOptions, "List the users' names."],
    ]

    def postOptions(self) -> None:
        if self.subCommand is None:
            raise usage.UsageError("a user command is required: add, remove or list")


class Options(_Options):
    synopsis = "COMMAND [options]"
    subCommands = [
        ["check-config", None, CheckConfigOptions, "Validate a configuration file."],
        ["status", None, StatusOptions, "Show a router's links."],
        ["send", None, SendOptions, "Send messages through a router."],
        ["receive", None, ReceiveOptions, "Consume messages from a router's queue."],
        ["audit", None, AuditOptions, "Audit the mesh from its event logs (PySpark)."],
        ["ha", None, HAOptions, "Operate an HA instance: force-activate."],
        ["user", None, UserOptions, "Manage a users file: add, remove, list."],
    ]

    def postOptions(self) -> None:
        if self.subCommand is None:
            raise usage.UsageError("a command is required")


def check_config(options, out) -> int:
    """
    Each file on its own, then the HA pairs among them (a disagreement
    between the two files of a pair is an error: the instances would
    refuse each other, or worse, each serve).
    """
    from meshroute.harules.settings import InstanceSettings, pair_problems
    from meshroute.security.load import load_policy

    status = 0
    instances = []
    for path in options["paths"]:
        try:
            config = load_config(path)
            if config.security is not None:
                load_policy(config)
        except ConfigError as e:
            print(f"meshroute: {e}", file=sys.stderr)
            status = 1
            continue
        for warning in config_warnings(config):
            print(f"meshroute: warning: {warning}", file=sys.stderr)
        out.write(f"# effective configuration of {config.path}\n")
        out.write(format_config(config))
        if config.ha is not None:
            instances.append(InstanceSettings(config.path, config.name, config.ha))
    for problem in pair_problems(instances):
        print(f"meshroute: {', '.join(problem.paths)}: {problem.key}: {problem.message}",
              file=sys.stderr)
        status = 1
    return status


def admin_token(options) -> bytes | None:
    """
    The admin token: the contents of C{--token-file}, else the
    environment's C{MESHROUTE_ADMIN_TOKEN}, else None.

    @raise ConfigError: the token file cannot be read, or others may.
    """
    from meshroute.security.files import read_private

    if options["token-file"]:
        return read_private(options["token-file"]).strip("\r\n").encode("utf-8")
    token = os.environ.get(ADMIN_TOKEN_VARIABLE)
    return token.encode("utf-8") if token else None


def fetch_json(base: str, path: str, token: bytes | None = None, cafile: str | None = None,
               timeout: float = 5.0, answer_headers: dict | None = None):
    """
    GET C{base + path} and decode its JSON.

    @param token: sent as C{Authorization: Bearer TOKEN}.
    @param cafile: the CA certificates an https router's certificate is
        verified with (the system's by default).
    @param timeout: seconds to wait for the answer.
    @param answer_headers: if given, filled with the answer's headers
        (lower-case names).
    @raise ValueError: the answer is not an admin API's (not HTTP, or not
        JSON), or the API refused (its error code and detail).
    @raise OSError: no answer (C{urllib.error.URLError} is one).
    """
    import ssl

    request = urllib.request.Request(base.rstrip("/") + path)
    if token is not None:
        request.add_header("Authorization", "Bearer " + token.decode("utf-8"))
    context = ssl.create_default_context(cafile=cafile) if cafile else None
    try:
        with urllib.request.urlopen(request, timeout=timeout, context=context) as response:
            if answer_headers is not None:
                answer_headers.update((k.lower(), v) for k, v in response.headers.items())
            return json.load(response)
    except urllib.error.HTTPError as e:
        try:
            answer = json.load(e)
        except ValueError:
            raise e from None
        raise ValueError(f"{e.code} {answer.get('error')}: {answer.get('detail')}") from None
    except http.client.HTTPException as e:
        raise ValueError(f"not an HTTP server, or not a meshroute admin API "
                         f"({type(e).__name__}: {str(e).strip()[:80]!r})") from None
    except json.JSONDecodeError as e:
        raise ValueError(f"not a meshroute admin API (the answer is not JSON: {e})") from None


def format_links(router: dict, links: list[dict]) -> str:
    """
    The human-readable status table.
    """
    lines = [f"router {router['name']} (meshroute {router['version']}, up {router['uptime_s']:.0f} s)"]
    ha = router.get("ha")
    if ha is not None:
        lag = "-" if ha["lag"] is None else ha["lag"]
        peer = "connected" if ha["peer"]["connected"] else "not connected"
        lines.append(
            f"  ha: {ha['role']}, {ha['state']}, epoch {ha['epoch']}, position "
            f"{ha['position']['epoch']}/{ha['position']['position']}, lag {lag}, peer {peer}"
            + ("" if router.get("serving", True) else "; not serving"))
        if ha["peer"].get("refusal"):
            lines.append(f"  ha: the pair is refused: {ha['peer']['refusal']}")
        if not router.get("serving", True):
            # An HA instance that is not the active one has no router to
            # show links of (its admin API answers not-active for them).
            return "\n".join(lines) + "\n"
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


#: How long C{meshroute status} waits for a view asked through the mesh:
#: longer than the router waits for the answer, so that its own
#: C{unreachable} comes back rather than a timeout here.
ROUTED_TIMEOUT_S = 15.0


def admin_url(config) -> str:
    """
    The base URL of the admin API a router's configuration sets up
    (C{[admin] endpoint}), for reaching it on this host.

    @raise ConfigError: it has none, or one this command cannot reach
        (a UNIX socket).
    """
    if config.admin is None:
        raise ConfigError(config.path, "admin.endpoint",
                          "this router has no [admin] section: no admin API to ask")
    endpoint = config.admin.endpoint
    kind, _, rest = endpoint.partition(":")
    parts = [part.replace("\\:", ":") for part in re.split(r"(?<!\\):", rest)]
    fields = dict(part.split("=", 1) for part in parts if "=" in part)
    port = next((part for part in parts if "=" not in part), fields.get("port"))
    if kind not in ("tcp", "ssl") or port is None:
        raise ConfigError(config.path, "admin.endpoint",
                          f"{endpoint!r}: meshroute status reaches tcp: and ssl: admin "
                          "endpoints only; use --admin URL")
    host = fields.get("interface", "127.0.0.1")
    host = {"0.0.0.0": "127.0.0.1", "::": "::1", "": "127.0.0.1"}.get(host, host)
    if ":" in host:
        host = f"[{host}]"
    return f"{'https' if kind == 'ssl' else 'http'}://{host}:{port}"


def _status_access(options) -> tuple[str, bytes | None]:
    """
    The admin base URL C{meshroute status} asks, and the token it shows.

    @raise ConfigError: the configuration or the token cannot be read.
    """
    token = admin_token(options)
    if options["admin"]:
        return options["admin"], token
    config = load_config(options["config"])
    return admin_url(config), token if token is not None else config.admin.token


def _view_path(view: str, router: str | None) -> str:
    return f"/api/v1/routers/{router}/{view}" if router else f"/api/v1/{view}"


def _truncation_note(router: str, headers: dict) -> str:
    kept_total = headers.get("x-meshroute-truncated")
    if not kept_total:
        return ""
    kept, _, total = kept_total.partition("/")
    return (f"  ({router} answered {kept} of its {total} rows: the answer was cut to fit "
            "a message)\n")


def status(options, out) -> int:
    """
    C{meshroute status}: today's one screen (identity and links), or one
    view, of the router asked, of another through it, or of every router.
    """
    import time

    try:
        base, token = _status_access(options)
    except ConfigError as e:
        print(f"meshroute: {e}", file=sys.stderr)
        return 1
    view, router = options["view"], options["router"]
    routed = bool(router) or options["all-routers"]

    def fetch(path, headers=None):
        if not routed:
            return fetch_json(base, path, token, options["ca-file"])
        return fetch_json(base, path, token, options["ca-file"], timeout=ROUTED_TIMEOUT_S,
                          answer_headers=headers)

    where = f"{router} through {base}" if router else base
    try:
        if options["all-routers"]:
            return _status_of_all(fetch, view, options["json"], out)
        if view is None:
            info = fetch(_view_path("router", router))
            serving = info.get("serving", True) or "ha" not in info
            links = fetch(_view_path("links", router)) if serving else []
        else:
            headers: dict = {}
            rows = fetch(_view_path(view, router), headers)
    except (urllib.error.URLError, OSError, ValueError) as e:
        print(f"meshroute: cannot read {where}: {e}", file=sys.stderr)
        return 1
    if view is None:
        if options["json"]:
            out.write(json.dumps({"router": info, "links": links}, indent=1) + "\n")
        else:
            out.write(format_links(info, links))
        return 0
    if options["json"]:
        out.write(json.dumps(rows, indent=1) + "\n")
        return 0
    now = time.time()
    if view == "routers":
        out.write(last_topology_change(rows, now))
    out.write(format_view(view, {router or "": rows}, now))
    out.write(_truncation_note(router or "the router", headers))
    return 0


def _status_of_all(fetch, view: str, as_json: bool, out) -> int:
    """
    C{meshroute status VIEW --all-routers}: the view of every router the
    asked one knows, asked at once; one table with a router column, the
    routers that did not answer listed below it (exit status 0: the
    asked router answered).
    """
    import time
    from concurrent.futures import ThreadPoolExecutor

    names = [row["name"] for row in fetch("/api/v1/routers")]

    def ask(name: str):
        headers: dict = {}
        try:
            return fetch(_view_path(view, name), headers), headers
        except (urllib.error.URLError, OSError, ValueError) as e:
            return e, headers

    with ThreadPoolExecutor(max_workers=min(8, len(names))) as pool:
        answers = dict(zip(names, pool.map(ask, names)))
    if as_json:
        out.write(json.dumps(
            {name: rows if not isinstance(rows, Exception)
             else {"error": "unreachable", "detail": str(rows)}
             for name, (rows, _) in answers.items()}, indent=1) + "\n")
        return 0
    now = time.time()
    out.write(format_view(view, {name: rows for name, (rows, _) in answers.items()
                                 if not isinstance(rows, Exception)}, now,
                          router_column=True))
    for name, (rows, headers) in answers.items():
        if isinstance(rows, Exception):
            out.write(f"  {name}: unreachable ({rows})\n")
        else:
            out.write(_truncation_note(name, headers))
    return 0


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


async def run_send(reactor, options, out, err, connect=None) -> int:
    """
    C{meshroute send} on C{reactor}; returns the exit status.

    @param connect: L{meshroute.client.connect} or a substitute with its
        signature (tests use an in-memory connection).
    """
    from meshroute.client import DISCONNECT, ClientError, UnblockedError
    from meshroute.client import connect as default_connect

    if status := _usage_problem(reactor, options, err):
        return status
    connect = connect or default_connect
    try:
        client = await connect(reactor, options["connect"], options.client_options())
    except ClientError as e:
        err.write(f"meshroute: cannot open a session at {', '.join(options['connect'])}: "
                  f"{e}\n")
        return 1
    client.add_failure_listener(_report_failures(client, err))
    gave_up = []
    client.add_failure_listener(lambda event: event == DISCONNECT and gave_up.append(event))
    count, address = options["count"], options["to"]
    persistent = not options["non-persistent"]
    window = _Window(SEND_WINDOW)
    retried = 0

    def send(n: int):
        d = client.send(address, options.body(n), persistent=persistent,
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

    try:
        for n in range(1, count + 1):
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
    from meshroute.client import ClientError, UnblockedError
    from meshroute.client import connect as default_connect

    if status := _usage_problem(reactor, options, err):
        return status
    connect = connect or default_connect
    try:
        client = await connect(reactor, options["connect"], options.client_options())
    except ClientError as e:
        err.write(f"meshroute: cannot open a session at {', '.join(options['connect'])}: "
                  f"{e}\n")
        return 1
    client.add_failure_listener(_report_failures(client, err))
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


def audit(options, out) -> int:
    if options.get("error"):
        print(f"meshroute audit: {options['error']}", file=sys.stderr)
        return 1
    from meshroute.audit import job

    return job.run(options["settings"], out)


def force_activate(options, out) -> int:
    """
    C{meshroute ha force-activate}: record the forced activation in the
    stopped instance's C{ha.db} and log it.
    """
    import getpass
    import socket
    import time

    from twisted.internet import reactor

    from meshroute.events import EventLog
    from meshroute.ha import records
    from meshroute.ha.reporting import HAEventLog

    data_dir = options["data-dir"]
    if not os.path.isdir(data_dir):
        print(f"meshroute: {data_dir} is not a directory", file=sys.stderr)
        return 1
    try:
        lock = records.hold_data_dir(data_dir)
    except (records.RecordsError, OSError) as e:
        print(f"meshroute: {e}", file=sys.stderr)
        return 1
    try:
        identity = records.read_identity(data_dir)
        if identity is None:
            print(f"meshroute: {data_dir} holds no HA instance's records ({records.HA_DB}): "
                  "only an instance that has run with [ha] can be force-activated",
                  file=sys.stderr)
            return 1
        marker = records.ForcedActivation(f"{getpass.getuser()}@{socket.gethostname()}",
                                          time.time())
        records.record_forced_activation(data_dir, marker)
        event_log = EventLog(data_dir, identity.router, reactor)
        HAEventLog(event_log, reactor, identity.group, identity.role).force_activate(
            "recorded", requested_by=marker.requested_by, epoch=None)
        event_log.close()
    except (records.RecordsError, OSError, sqlite3.Error) as e:
        print(f"meshroute: cannot record the forced activation in {data_dir}: {e}",
              file=sys.stderr)
        return 1
    finally:
        lock.close()
    out.write(f"recorded in {os.path.join(data_dir, records.HA_DB)}: instance "
              f"{identity.router}/{identity.role} of group {identity.group} activates at its "
              "next start without asking the voters, in an epoch above every epoch it knows; "
              "confirmed changes it lacks are lost (event ha.force-activate logged)\n")
    return 0


def ha(options, out) -> int:
    return HA_COMMANDS[options.subCommand](options.subOptions, out)


HA_COMMANDS = {"force-activate": force_activate}


def _users_or_none(path: str, err) -> dict | None:
    """
    The users of C{path} (none if it does not exist yet), or None after
    reporting why it cannot be used.
    """
    if not os.path.exists(path):
        return {}
    try:
        return read_users(path)
    except ConfigError as e:
        err.write(f"meshroute: {e}\n")
        return None


def _read_password(options, err, stdin) -> str | None:
    """
    The new password: the first line of C{stdin} with C{--password-stdin},
    else prompted for twice; None after reporting an empty or mismatched
    one.
    """
    import getpass

    if options["password-stdin"]:
        password = stdin.readline().rstrip("\r\n")
    else:
        password = getpass.getpass(f"password for {options['name']}: ")
        if getpass.getpass("again: ") != password:
            err.write("meshroute: the passwords differ; nothing changed\n")
            return None
    if not password:
        err.write("meshroute: the password is empty; nothing changed\n")
        return None
    return password


def user_add(options, out, err=None, stdin=None) -> int:
    from meshroute.security.credentials import derive

    err, stdin = err or sys.stderr, stdin or sys.stdin
    path, name = options["file"], options["name"]
    users = _users_or_none(path, err)
    if users is None:
        return 1
    if name in users and not options["replace"]:
        err.write(f"meshroute: {path} already holds user {name}; "
                  "--replace changes its password\n")
        return 1
    password = _read_password(options, err, stdin)
    if password is None:
        return 1
    existed = name in users
    users[name] = derive(password)
    write_users(path, users)
    out.write(f"{'changed the password of' if existed else 'added'} user {name} in {path}\n")
    return 0


def user_remove(options, out, err=None) -> int:
    err = err or sys.stderr
    path, name = options["file"], options["name"]
    users = _users_or_none(path, err)
    if users is None:
        return 1
    if name not in users:
        err.write(f"meshroute: {path} holds no user {name}\n")
        return 1
    del users[name]
    write_users(path, users)
    out.write(f"removed user {name} from {path}\n")
    return 0


def user_list(options, out, err=None) -> int:
    err = err or sys.stderr
    path = options["file"]
    if not os.path.exists(path):
        err.write(f"meshroute: {path} does not exist\n")
        return 1
    users = _users_or_none(path, err)
    if users is None:
        return 1
    for name in users:
        out.write(f"{name}\n")
    return 0


def user(options, out) -> int:
    return USER_COMMANDS[options.subCommand](options.subOptions, out)


USER_COMMANDS = {"add": user_add, "remove": user_remove, "list": user_list}

COMMANDS = {"check-config": check_config, "status": status, "send": send, "receive": receive,
            "audit": audit, "ha": ha, "user": user}


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
