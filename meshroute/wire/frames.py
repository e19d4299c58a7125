"""
The frames of the routing link, protocol version 1.

Each frame is a small frozen dataclass.  On the wire a frame body is a
msgpack array whose first element is the frame's C{TYPE} code and whose
remaining elements are the dataclass fields in declaration order; the
field annotations are the wire schema and are checked on decode, so a
frame object that exists is always well-typed.

docs/protocol.md narrates the stages in which each frame may be sent.
"""

from dataclasses import dataclass, fields
from typing import ClassVar

from meshroute.errors import WireError

#: The link protocol versions this build speaks, newest last.
SUPPORTED_VERSIONS = (1,)

#: Size of the random challenges exchanged during authentication.
CHALLENGE_SIZE = 32


@dataclass(frozen=True)
class Hello:
    """
    Connector → listener, first frame of the connect stage: who I am and
    which protocol versions I speak.
    """

    TYPE: ClassVar[int] = 1
    versions: list
    router: str

    def __post_init__(self) -> None:
        if not all(type(v) is int for v in self.versions):
            raise WireError("Hello.versions must be a list of integers")


@dataclass(frozen=True)
class Welcome:
    """
    Listener → connector, ends the connect stage: the chosen version, the
    listener's name, the keepalive interval both sides will use, and the
    challenge the connector must answer to authenticate.
    """

    TYPE: ClassVar[int] = 2
    version: int
    router: str
    keepalive_interval_ms: int
    challenge: bytes


@dataclass(frozen=True)
class Reject:
    """
    Either side, any stage before delivery: the handshake is refused.
    C{code} is one of L{meshroute.link.rejection.REASONS}.
    """

    TYPE: ClassVar[int] = 3
    code: str
    detail: str


@dataclass(frozen=True)
class Authenticate:
    """
    Connector → listener: proof that the connector knows the shared secret
    (an HMAC over both challenges and both names), and the connector's own
    challenge for the listener.
    """

    TYPE: ClassVar[int] = 4
    proof: bytes
    challenge: bytes


@dataclass(frozen=True)
class Authenticated:
    """
    Listener → connector: the connector's proof was good; here is the
    listener's proof, so that authentication is mutual.
    """

    TYPE: ClassVar[int] = 5
    proof: bytes


@dataclass(frozen=True)
class Recovery:
    """
    Both directions, the recovery stage: the last message sequence number
    this side has durably received from the peer on this link.
    """

    TYPE: ClassVar[int] = 6
    last_received: int


@dataclass(frozen=True)
class Keepalive:
    """
    Both directions, delivery stage: I am alive.
    """

    TYPE: ClassVar[int] = 7


FRAME_TYPES: dict[int, type] = {
    cls.TYPE: cls
    for cls in (Hello, Welcome, Reject, Authenticate, Authenticated, Recovery, Keepalive)
}

#: Python types a msgpack decode may yield for each annotation.  bool is a
#: subclass of int and must not pass as one.
_WIRE_TYPES = {int: int, str: str, bytes: bytes, list: list}


def frame_to_list(frame) -> list:
    """
    The msgpack array for C{frame}: its type code, then its fields.
    """
    return [frame.TYPE, *(getattr(frame, f.name) for f in fields(frame))]


def frame_from_list(items) -> object:
    """
    Rebuild a frame from a decoded msgpack array, checking every field.

    @raise WireError: unknown type code, wrong number of fields, or a field
        of the wrong type.
    """
    if not isinstance(items, list) or not items:
        raise WireError("frame body is not a non-empty array")
    code = items[0]
    cls = FRAME_TYPES.get(code) if type(code) is int else None
    if cls is None:
        raise WireError(f"unknown frame type {code!r}")
    spec = fields(cls)
    values = items[1:]
    if len(values) != len(spec):
        raise WireError(
            f"{cls.__name__} frame has {len(values)} fields, expected {len(spec)}"
        )
    for field, value in zip(spec, values):
        expected = _WIRE_TYPES[field.type]
        if type(value) is not expected:
            raise WireError(
                f"{cls.__name__}.{field.name} is {type(value).__name__}, "
                f"expected {expected.__name__}"
            )
    return cls(*values)
