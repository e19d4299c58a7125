"""
MQTT's data representations (5.0 section 1.5, 3.1.1 section 1.5): bits
of one byte, two and four byte integers, the variable byte integer,
UTF-8 strings, binary data and string pairs; read from a packet's body
by a L{Cursor}, written by the C{write_*} functions.

Strings are checked as the specs ask: well-formed UTF-8 (no surrogate
code points, no overlong forms) without U+0000, else the packet is
malformed [MQTT-1.5.4-1, -2].  Other control characters and
non-characters are allowed (the specs say a receiver I{may} refuse them).
"""

import struct

from meshroute.mqtt.reason_codes import malformed

#: The largest value of a variable byte integer (four bytes).
MAX_VARIABLE_INTEGER = 268_435_455
#: The longest string or binary data (its length is two bytes).
MAX_FIELD_LENGTH = 65_535

_U16 = struct.Struct("!H")
_U32 = struct.Struct("!I")


class Cursor:
    """
    Reads fields from the body of one packet, front to back; running past
    its end is a malformed packet.
    """

    __slots__ = ("data", "position")

    def __init__(self, data: bytes) -> None:
        self.data = data
        self.position = 0

    def at_end(self) -> bool:
        return self.position == len(self.data)

    def left(self) -> int:
        return len(self.data) - self.position

    def take(self, count: int, what: str) -> bytes:
        end = self.position + count
        if end > len(self.data):
            raise malformed(f"the packet ends inside its {what}")
        chunk = self.data[self.position:end]
        self.position = end
        return chunk

    def rest(self) -> bytes:
        chunk = self.data[self.position:]
        self.position = len(self.data)
        return chunk

    def byte(self, what: str) -> int:
        if self.position >= len(self.data):
            raise malformed(f"the packet ends before its {what}")
        value = self.data[self.position]
        self.position += 1
        return value

    def u16(self, what: str) -> int:
        return _U16.unpack(self.take(2, what))[0]

    def u32(self, what: str) -> int:
        return _U32.unpack(self.take(4, what))[0]

    def variable_integer(self, what: str) -> int:
        value, self.position = read_variable_integer(self.data, self.position, what)
        return value

    def binary(self, what: str) -> bytes:
        return self.take(self.u16(what), what)

    def string(self, what: str) -> str:
        return decode_string(self.binary(what), what)

    def string_pair(self, what: str) -> tuple[str, str]:
        return self.string(what), self.string(what)


def read_variable_integer(data, position: int, what: str) -> tuple[int, int]:
    """
    The variable byte integer at C{position} of C{data} and the position
    after it.

    @raise MalformedPacket: if it takes more than four bytes, or more than
        it needs (the specs ask for the fewest [MQTT-1.5.5-1]), or if
        C{data} ends inside it.
    """
    value, shift = 0, 0
    for count in range(4):
        if position + count >= len(data):
            raise malformed(f"the packet ends inside its {what}")
        byte = data[position + count]
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            if byte == 0 and count:
                raise malformed(f"the {what} is not written in its fewest bytes")
            return value, position + count + 1
        shift += 7
    raise malformed(f"the {what} takes more than four bytes")


def decode_string(raw: bytes, what: str) -> str:
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise malformed(f"the {what} is not well-formed UTF-8") from None
    if "\0" in text:
        raise malformed(f"the {what} contains U+0000")
    return text


def write_u16(value: int) -> bytes:
    return _U16.pack(value)


def write_u32(value: int) -> bytes:
    return _U32.pack(value)


def write_variable_integer(value: int) -> bytes:
    if not 0 <= value <= MAX_VARIABLE_INTEGER:
        raise ValueError(f"a variable byte integer is 0 to {MAX_VARIABLE_INTEGER}, "
                         f"not {value}")
    out = bytearray()
    while True:
        byte, value = value & 0x7F, value >> 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def write_binary(value: bytes) -> bytes:
    if len(value) > MAX_FIELD_LENGTH:
        raise ValueError(f"a field has at most {MAX_FIELD_LENGTH} bytes, "
                         f"not {len(value)}")
    return _U16.pack(len(value)) + value


def write_string(value: str) -> bytes:
    if "\0" in value:
        raise ValueError(f"an MQTT string cannot hold U+0000: {value!r}")
    return write_binary(value.encode("utf-8"))


def write_string_pair(pair: tuple[str, str]) -> bytes:
    name, value = pair
    return write_string(name) + write_string(value)
