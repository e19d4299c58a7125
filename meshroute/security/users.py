"""
The users file: one user per line, C{NAME SCRAM-SHA-256$I:SALT$STOREDKEY:SERVERKEY}
(PostgreSQL's SCRAM verifier layout, base64 fields), C{#} comments and
blank lines allowed.

It is written by C{meshroute user} (L{write_users}), never by hand, and
read by the router at start and on SIGHUP (L{read_users}); a file that
group or others may read or write, or any malformed line, stops the
router with an error naming the file and the line, because a router that
skipped a bad line would silently lock that user out (or, worse, keep
serving a user the operator meant to change).
"""

import binascii
import re
from base64 import b64decode, b64encode
from collections.abc import Mapping

from meshroute.errors import ConfigError
from meshroute.security.credentials import DEFAULT_ITERATIONS, Credentials
from meshroute.security.files import read_private, write_private

#: What a user may be called: the name characters of router names and
#: permission patterns, so that a pattern can name any user.
USER_NAME = re.compile(r"[A-Za-z0-9._-]{1,64}")

MECHANISM = "SCRAM-SHA-256"

#: Iterations a stored verifier may ask for: at least RFC 7677's minimum
#: (fewer makes guessing cheap), and a bound so that a login cannot be
#: made to cost minutes.
MIN_ITERATIONS = DEFAULT_ITERATIONS
MAX_ITERATIONS = 10_000_000

_KEY_SIZE = 32
_B64 = "[A-Za-z0-9+/]+={0,2}"
_VERIFIER = re.compile(
    rf"{MECHANISM}\$(?P<iterations>[0-9]{{1,9}}):(?P<salt>{_B64})"
    rf"\$(?P<stored>{_B64}):(?P<server>{_B64})")

_HEADER = ("# meshroute users: written by `meshroute user`, not by hand.\n"
           "# NAME SCRAM-SHA-256$ITERATIONS:SALT$STOREDKEY:SERVERKEY\n")


def format_verifier(credentials: Credentials) -> str:
    """
    C{credentials} in PostgreSQL's SCRAM verifier layout.
    """
    def b64(data: bytes) -> str:
        return b64encode(data).decode("ascii")

    return (f"{MECHANISM}${credentials.iterations}:{b64(credentials.salt)}"
            f"${b64(credentials.stored_key)}:{b64(credentials.server_key)}")


def parse_verifier(text: str) -> Credentials:
    """
    The credentials a verifier holds.

    @raise ValueError: saying what is wrong, without repeating the text.
    """
    match = _VERIFIER.fullmatch(text)
    if match is None:
        raise ValueError(f"expected {MECHANISM}$ITERATIONS:SALT$STOREDKEY:SERVERKEY "
                         "with base64 fields")
    iterations = int(match["iterations"])
    if not MIN_ITERATIONS <= iterations <= MAX_ITERATIONS:
        raise ValueError(f"iterations must be {MIN_ITERATIONS}..{MAX_ITERATIONS}, "
                         f"got {iterations}")
    try:
        salt, stored, server = (b64decode(match[field], validate=True)
                                for field in ("salt", "stored", "server"))
    except binascii.Error as e:
        raise ValueError(f"invalid base64 ({e})") from None
    if len(stored) != _KEY_SIZE or len(server) != _KEY_SIZE:
        raise ValueError(f"the stored and server keys must be {_KEY_SIZE} bytes each")
    return Credentials(iterations, salt, stored, server)


def parse_users(text: str, path: str) -> dict[str, Credentials]:
    """
    The users that C{text}, the contents of C{path}, holds.

    @raise ConfigError: naming C{path} and the line (and its user, when
        the name can be read) for the first malformed line.
    """
    users: dict[str, Credentials] = {}
    for number, line in enumerate(text.splitlines(), 1):
        entry = line.strip()
        if not entry or entry.startswith("#"):
            continue
        fields = entry.split()
        where = f"line {number}"
        if not USER_NAME.fullmatch(fields[0]):
            raise ConfigError(path, where,
                              "the user name must be 1 to 64 of A-Z a-z 0-9 . _ -")
        name = fields[0]
        where = f"line {number} (user {name})"
        if len(fields) != 2:
            raise ConfigError(path, where, f"expected NAME {MECHANISM}$..., "
                              f"got {len(fields)} fields")
        if name in users:
            raise ConfigError(path, where, "the user is already named on an earlier line")
        try:
            users[name] = parse_verifier(fields[1])
        except ValueError as e:
            raise ConfigError(path, where, str(e)) from None
    return users


def read_users(path: str) -> dict[str, Credentials]:
    """
    The users of the users file C{path}.

    @raise ConfigError: naming C{path}: it cannot be read, group or others
        may read or write it, or a line is malformed (named by number).
    """
    return parse_users(read_private(path), path)


def write_users(path: str, users: Mapping[str, Credentials]) -> None:
    """
    Replace the users file C{path} with C{users} (mode 0600, atomically).
    """
    lines = [_HEADER]
    for name, credentials in users.items():
        if not USER_NAME.fullmatch(name):
            raise ValueError(f"{name!r} is not a user name (1 to 64 of A-Z a-z 0-9 . _ -)")
        lines.append(f"{name} {format_verifier(credentials)}\n")
    write_private(path, "".join(lines))
