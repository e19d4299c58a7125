"""
Sans-IO STOMP 1.2, 1.1 and 1.0 framing: L{StompParser} turns a
connection's bytes into L{StompFrame}s and heart-beats, L{encode} turns a
frame into bytes.  Nothing here does I/O or knows Twisted.

The grammar (STOMP 1.2, "Augmented BNF")::

    frame    = command EOL *( header EOL ) EOL *OCTET NUL *( EOL )
    header   = name ":" value          ; first ":" splits; repeats: first wins
    EOL      = [CR] LF                 ; 1.2; in 1.1 and 1.0 a line ends at LF alone

An EOL between frames is a heart-beat (L{HEARTBEAT}).  A body is read up
to the first NUL, or, when the frame carries C{content-length}, exactly
that many bytes (NUL bytes included) which must then be followed by a
NUL.  Header names and values are UTF-8 with four escapes, C{\\\\}
C{\\n} C{\\c} (colon) and C{\\r} (1.2 only); any other escape is a protocol
error.  CONNECT and CONNECTED headers are never escaped, in any version,
for STOMP 1.0 peers' sake.

STOMP 1.0 has no escapes: a backslash is a backslash, and a value is
what follows the first colon, its leading blanks dropped (1.0 clients
write C{login: NAME}; RabbitMQ reads their values so).  A header that cannot be written without escapes (a line
break in it, a colon in its name) is written with 1.1's, as RabbitMQ
writes every header: the frame stays whole, and the clients that unescape
get it back.

Limits (L{StompLimits}) are explicit and checked as bytes arrive: the
parser never holds more than C{max_frame_size} bytes of one frame, and a
frame that passes a bound raises L{StompProtocolError}, the one error
this module raises, naming the bound.  After an error the stream has lost
its framing: the caller closes the connection.
"""

import enum
from dataclasses import dataclass
from typing import Literal

from meshroute.errors import MeshrouteError

#: What a client may send a server.
CLIENT_COMMANDS = frozenset({
    "CONNECT", "STOMP", "SEND", "SUBSCRIBE", "UNSUBSCRIBE", "ACK", "NACK",
    "BEGIN", "COMMIT", "ABORT", "DISCONNECT",
})
#: What a server may send a client.
SERVER_COMMANDS = frozenset({"CONNECTED", "MESSAGE", "RECEIPT", "ERROR"})
#: The frames whose headers are never escaped.
UNESCAPED_COMMANDS = frozenset({"CONNECT", "CONNECTED"})
#: The protocol versions this module speaks.
VERSIONS = ("1.0", "1.1", "1.2")
#: What STOMP 1.0 drops before a header value.
_BLANKS_1_0 = " \t"

#: What a peer writes for one heart-beat.
HEARTBEAT_BYTES = b"\n"

_LONGEST_COMMAND = max(len(c) for c in CLIENT_COMMANDS | SERVER_COMMANDS)

# Escapes per version: the encoder's character → sequence, and the
# decoder's escaped character → character.
_ENCODE_ESCAPES = {
    "1.1": {"\\": "\\\\", "\n": "\\n", ":": "\\c"},
    "1.2": {"\\": "\\\\", "\n": "\\n", ":": "\\c", "\r": "\\r"},
}
_DECODE_ESCAPES = {
    "1.1": {"\\": "\\", "n": "\n", "c": ":"},
    "1.2": {"\\": "\\", "n": "\n", "c": ":", "r": "\r"},
}


class StompProtocolError(MeshrouteError):
    """
    Bytes from a STOMP peer do not form a valid frame, or a frame passes
    a limit.  The one error of this module.

    @ivar reason: a short text naming the problem, fit for an ERROR
        frame's C{message} header and the log.
    """

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class _Heartbeat(enum.Enum):
    HEARTBEAT = "heart-beat"

    def __repr__(self) -> str:
        return "HEARTBEAT"


#: What L{StompParser.feed} yields for each EOL received between frames:
#: a sign of life that is not a frame.
HEARTBEAT = _Heartbeat.HEARTBEAT

Heartbeat = Literal[_Heartbeat.HEARTBEAT]


@dataclass(frozen=True)
class StompFrame:
    """
    One STOMP frame.

    @ivar command: e.g. C{"SEND"}.
    @ivar headers: C{(name, value)} pairs in wire order, unescaped;
        repeats are kept (L{header} reads the first, as the spec says).
    @ivar body: the body's bytes, possibly binary.
    """

    command: str
    headers: tuple[tuple[str, str], ...] = ()
    body: bytes = b""

    def header(self, name: str, default: str | None = None) -> str | None:
        """
        The value of the first header called C{name}, or C{default}.
        """
        for key, value in self.headers:
            if key == name:
                return value
        return default


@dataclass(frozen=True)
class StompLimits:
    """
    The bounds of one STOMP connection's frames.

    @ivar max_frame_size: bytes of one frame, from its command's first
        byte through its NUL.
    @ivar max_headers: header lines of one frame, repeats included.
    @ivar max_header_size: bytes of one frame's header names and values
        together, as they are on the wire (UTF-8, escaped): never fewer
        than the characters L{meshroute.sessions.limits.ClientLimits}
        counts for a native message, so a frame within this bound carries
        a message within that one.
    """

    max_frame_size: int
    max_headers: int
    max_header_size: int

    @classmethod
    def from_client_limits(cls, limits) -> "StompLimits":
        """
        The bounds a C{[stomp.listener]}'s limit keys set
        (L{meshroute.sessions.limits.ClientLimits}): its C{max-frame-size},
        C{max-headers} and C{max-header-size}.
        """
        return cls(
            max_frame_size=limits.max_frame_size,
            max_headers=limits.max_headers,
            max_header_size=limits.max_header_size,
        )


def _check_version(version: str) -> None:
    if version not in VERSIONS:
        raise ValueError(f"STOMP version {version!r} is not one of {', '.join(VERSIONS)}")


class _Stage(enum.Enum):
    """
    What the parser waits for.
    """

    #: A command line, or heart-beats before it.
    COMMAND = "command"
    #: Header lines, up to the blank line.
    HEADERS = "headers"
    #: The body and its NUL.
    BODY = "body"


class StompParser:
    """
    Incremental parser of one connection's STOMP byte stream.

    @ivar version: the negotiated protocol version, C{"1.2"} (the default,
        under which a CONNECT is read), C{"1.1"} or C{"1.0"}; set it once
        CONNECTED is sent.  It decides whether a line may end with CRLF,
        which escapes there are, and whether a value's leading blanks are
        part of it.
    """

    def __init__(self, limits: StompLimits, commands: frozenset[str] = CLIENT_COMMANDS) -> None:
        """
        @param limits: the bounds every frame must keep.
        @param commands: the commands accepted: L{CLIENT_COMMANDS} for a
            server's parser, L{SERVER_COMMANDS} for a client's.
        """
        self._limits = limits
        self._commands = commands
        self._version = "1.2"
        self._buffer = bytearray()
        self._stage = _Stage.COMMAND
        self._start = 0
        self._position = 0
        self._command = ""
        self._headers: list[tuple[str, str]] = []
        self._header_size = 0
        self._body_length: int | None = None

    @property
    def version(self) -> str:
        return self._version

    @version.setter
    def version(self, version: str) -> None:
        _check_version(version)
        self._version = version

    @property
    def pending(self) -> int:
        """
        Bytes held of a frame not yet complete: non-zero when the
        connection ends means the peer sent a truncated frame.
        """
        return len(self._buffer)

    def feed(self, data: bytes) -> list[StompFrame | Heartbeat]:
        """
        Add C{data} to the stream and return the frames and heart-beats it
        completes, in order.

        @raise StompProtocolError: the stream holds a malformed frame or
            one beyond a limit; raised as soon as the bytes show it.
        """
        self._buffer += data
        out: list[StompFrame | Heartbeat] = []
        while True:
            if self._stage is _Stage.COMMAND:
                position = self._read_command(self._position, out)
            elif self._stage is _Stage.HEADERS:
                position = self._read_header(self._position)
            else:
                position = self._read_body(self._position, out)
            if position < 0:
                break
            self._position = position
        del self._buffer[: self._start]
        self._position -= self._start
        self._start = 0
        return out

    # Each reader consumes what it can from position (where the frame's
    # next part starts in the buffer) and returns where the part after it
    # starts, or -1 when it needs more bytes.

    def _line_end(self, position: int) -> tuple[int, int] | None:
        """
        Where the line at C{position} ends: the index of its first
        terminator byte and of the byte after the line, or None if the
        buffer does not hold its end yet.  The search never looks past the
        frame size bound.
        """
        limit = self._start + self._limits.max_frame_size
        newline = self._buffer.find(b"\n", position, limit + 1)
        if newline < 0:
            self._check_size(len(self._buffer))
            return None
        end = newline
        if self._version == "1.2" and end > position and self._buffer[end - 1] == 0x0D:
            end -= 1
        return end, newline + 1

    def _check_size(self, reached: int) -> None:
        """
        Refuse the frame when its bytes, from its start to C{reached},
        pass C{max_frame_size}.
        """
        if reached - self._start > self._limits.max_frame_size:
            raise StompProtocolError(
                f"frame larger than max-frame-size {self._limits.max_frame_size} bytes")

    def _read_command(self, position: int, out: list) -> int:
        buffer = self._buffer
        while position < len(buffer):
            if buffer[position] == 0x0A:
                out.append(HEARTBEAT)
                position += 1
            elif (self._version == "1.2" and buffer[position] == 0x0D
                  and buffer[position + 1 : position + 2] == b"\n"):
                out.append(HEARTBEAT)
                position += 2
            else:
                break
        self._start = self._position = position
        if position == len(buffer):
            return -1
        line = self._line_end(position)
        if line is None:
            # No command is longer than this: refuse garbage early.
            if len(buffer) - position > _LONGEST_COMMAND + 1:
                raise _unknown_command(bytes(buffer[position : position + 32]))
            return -1
        end, after = line
        command = bytes(buffer[position:end]).decode("ascii", "replace")
        if command not in self._commands:
            raise _unknown_command(bytes(buffer[position:end]))
        self._command = command
        self._headers = []
        self._header_size = 0
        self._stage = _Stage.HEADERS
        return after

    def _read_header(self, position: int) -> int:
        line = self._line_end(position)
        if line is None:
            # The partial line's colon and a CR that may end it are not
            # names or values: a lower bound, so nothing within the bound
            # is refused.
            self._check_header_size(len(self._buffer) - position - 2)
            return -1
        end, after = line
        self._check_size(after)
        if end == position:
            self._end_headers()
            self._stage = _Stage.BODY
            return after
        raw = bytes(self._buffer[position:end])
        if len(self._headers) == self._limits.max_headers:
            raise StompProtocolError(
                f"too many headers ({len(self._headers) + 1} > {self._limits.max_headers})")
        colon = raw.find(b":")
        if colon <= 0:
            raise StompProtocolError("bad header line")
        self._check_header_size(len(raw) - 1)
        self._header_size += len(raw) - 1
        value = self._text(raw[colon + 1 :])
        if self._version == "1.0":
            value = value.lstrip(_BLANKS_1_0)
        self._headers.append((self._text(raw[:colon]), value))
        return after

    def _check_header_size(self, more: int) -> None:
        """
        Refuse the frame when C{more} bytes of names and values on top of
        those already read pass C{max_header_size}.
        """
        if self._header_size + more > self._limits.max_header_size:
            raise StompProtocolError(
                f"headers larger than max-header-size {self._limits.max_header_size} bytes")

    def _text(self, raw: bytes) -> str:
        """
        A header name or value: UTF-8, unescaped unless the frame is a
        CONNECT or CONNECTED, or the version 1.0.
        """
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError:
            raise StompProtocolError("header not UTF-8") from None
        if (self._command in UNESCAPED_COMMANDS or self._version == "1.0"
                or "\\" not in text):
            return text
        escapes = _DECODE_ESCAPES[self._version]
        pieces = []
        characters = iter(text)
        for character in characters:
            if character != "\\":
                pieces.append(character)
                continue
            escaped = next(characters, "")
            if escaped not in escapes:
                raise StompProtocolError(f"bad escape \\{escaped}")
            pieces.append(escapes[escaped])
        return "".join(pieces)

    def _end_headers(self) -> None:
        """
        Take the body's length from the first C{content-length}, if any,
        refusing at once a length that cannot fit the frame size bound.
        """
        length = None
        for name, value in self._headers:
            if name == "content-length":
                length = value
                break
        if length is None:
            self._body_length = None
            return
        if not (length.isascii() and length.isdigit()):
            raise StompProtocolError("content-length not a number")
        self._body_length = int(length)

    def _read_body(self, position: int, out: list) -> int:
        buffer = self._buffer
        if self._body_length is None:
            nul = buffer.find(b"\0", position, self._start + self._limits.max_frame_size)
            if nul < 0:
                self._check_size(len(buffer))
                return -1
        else:
            nul = position + self._body_length
            self._check_size(nul + 1)
            if len(buffer) <= nul:
                return -1
            if buffer[nul] != 0:
                raise StompProtocolError("missing NUL after body")
        out.append(StompFrame(self._command, tuple(self._headers), bytes(buffer[position:nul])))
        self._stage = _Stage.COMMAND
        self._start = nul + 1
        return nul + 1


def encode(frame: StompFrame, version: str = "1.2") -> bytes:
    """
    The bytes of C{frame} on the wire: headers escaped for C{version}
    (except a CONNECT's or CONNECTED's; in 1.0 only a header that cannot
    be written otherwise, with 1.1's escapes), and a C{content-length}
    added to a non-empty body that has none, so a body with NUL bytes
    arrives whole.

    @raise ValueError: a CONNECT or CONNECTED header that cannot be written
        unescaped (a line end in it, or a colon in its name), a header
        name that is empty, or a C{content-length} that is not the body's.
    """
    _check_version(version)
    headers = list(frame.headers)
    length = frame.header("content-length")
    if length is None:
        if frame.body:
            headers.append(("content-length", str(len(frame.body))))
    elif length != str(len(frame.body)):
        raise ValueError(f"content-length {length!r} is not the body's length {len(frame.body)}")
    lines = [frame.command]
    if frame.command in UNESCAPED_COMMANDS:
        for name, value in headers:
            if not name or ":" in name or _breaks_line(name) or _breaks_line(value):
                raise ValueError(
                    f"{frame.command} header {name!r}: {value!r} cannot be written unescaped")
            lines.append(f"{name}:{value}")
    else:
        escapes = str.maketrans(_ENCODE_ESCAPES["1.1" if version == "1.0" else version])
        for name, value in headers:
            if not name:
                raise ValueError("a header name cannot be empty")
            if version == "1.0" and not _needs_escapes(name, value):
                lines.append(f"{name}:{value}")
            else:
                lines.append(f"{name.translate(escapes)}:{value.translate(escapes)}")
    lines.append("\n")
    return "\n".join(lines).encode("utf-8") + frame.body + b"\0"


def read_as_1_0(frame: StompFrame) -> StompFrame:
    """
    C{frame}, parsed before its connection's version was known (a
    CONNECT), as STOMP 1.0 reads it: each value without its leading
    blanks.  (CONNECT headers have no escapes in any version.)
    """
    return StompFrame(frame.command,
                      tuple((name, value.lstrip(_BLANKS_1_0)) for name, value in frame.headers),
                      frame.body)


def parse_heart_beat(value: str) -> tuple[int, int]:
    """
    The two numbers of a C{heart-beat} header, C{"cx,cy"}: the smallest
    interval, in ms, at which its sender can send heart-beats, and the
    interval at which it wants to receive them (0: none).

    @raise StompProtocolError: C{value} is not two decimal numbers
        separated by a comma.
    """
    parts = value.split(",")
    if len(parts) != 2 or not all(p.isascii() and p.isdigit() for p in parts):
        raise StompProtocolError(f"heart-beat {value!r} is not two numbers cx,cy")
    return int(parts[0]), int(parts[1])


def _unknown_command(raw: bytes) -> StompProtocolError:
    return StompProtocolError(f"unknown command {raw[:32].decode('ascii', 'replace')}")


def _breaks_line(text: str) -> bool:
    return "\n" in text or text.endswith("\r")


def _needs_escapes(name: str, value: str) -> bool:
    """
    Whether a header cannot be written as it is: a line break in it, or a
    colon in its name.
    """
    return ":" in name or _breaks_line(name) or _breaks_line(value)
