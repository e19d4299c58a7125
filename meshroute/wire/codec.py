"""
Sans-IO framing: a 4-byte big-endian body length, then a msgpack body.

L{encode} is a pure function; L{FrameDecoder} is fed whatever bytes the
transport delivered and returns the complete frames they finish.  Limits
are explicit: a length above C{max_frame_size} is refused before any body
is buffered, so a hostile peer cannot make us allocate more than one
frame's worth of memory.
"""

import struct

import msgpack

from meshroute.errors import WireError
from meshroute.wire.frames import LINK_FRAMES
from meshroute.wire.frameset import FrameSet, frame_to_list

_LENGTH = struct.Struct(">I")

# The frame size rule (docs/protocol.md, docs/client-protocol.md): a
# message enters the mesh in a client Send of at most MAX_CLIENT_FRAME_SIZE
# bytes, and every frame it becomes on its way (a link Transfer or
# FastTransfer, a client Deliver) is larger by what it gains: sequence and
# delivery ids, message id, origin, destination router and queue, hop
# count, time, and the dead-letter headers.  Router names are at most 64
# characters and queue names at most 128 (meshroute.messages), so that gain
# is well under ENVELOPE_ALLOWANCE, and every such frame fits in
# MAX_MESSAGE_FRAME_SIZE, which links and clients accept.

#: The largest frame a client may send a router (a Send).
MAX_CLIENT_FRAME_SIZE = 4 * 1024 * 1024
#: Room above a client Send for the fields a message gains on its way.
ENVELOPE_ALLOWANCE = 64 * 1024
#: The largest frame a router accepts on a link, and a client from its
#: router: every frame a legal Send becomes fits.
MAX_MESSAGE_FRAME_SIZE = MAX_CLIENT_FRAME_SIZE + ENVELOPE_ALLOWANCE
#: Default ceiling for one frame body on a link.
DEFAULT_MAX_FRAME_SIZE = MAX_MESSAGE_FRAME_SIZE

# A replication connection carries the active's store transactions
# (meshroute.ha.feed): one group-committed transaction may hold many
# messages, so one Changes frame may be larger than any message frame.

#: What a Changes frame carries at most, unless one transaction alone is
#: larger (it then travels alone).
CHANGES_FRAME_SIZE = 1024 * 1024
#: The largest frame a follower accepts from the active; a transaction
#: larger than this reaches the follower in a snapshot instead.
MAX_REPLICATION_FRAME_SIZE = 64 * 1024 * 1024


def encode(frame) -> bytes:
    """
    The bytes of C{frame} on the wire, length prefix included.
    """
    return encode_items(frame_to_list(frame))


def encode_items(items: list) -> bytes:
    """
    The bytes of a frame already in its wire form (C{frame_to_list}'s: the
    type code, then the fields), length prefix included: for a sender that
    built a large frame's fields from values it checked itself, and
    spares the frame class's check of each of them.
    """
    body = msgpack.packb(items, use_bin_type=True)
    return _LENGTH.pack(len(body)) + body


def size_bound(body: bytes, text_chars: int, fields: int) -> int:
    """
    An upper bound on the body size of a frame that carries C{body}, text
    of C{text_chars} characters in all, and C{fields} fields (headers'
    keys and values count one each): a character is at most 4 bytes of
    UTF-8, and a msgpack header or small value at most 9.  Below a limit it
    spares encoding a frame to learn that it fits.
    """
    return len(body) + 4 * text_chars + 9 * fields


def body_size(frame) -> int:
    """
    The length of C{frame}'s body on the wire (what the limits count).
    """
    return len(msgpack.packb(frame_to_list(frame), use_bin_type=True))


class FrameDecoder:
    """
    Incremental decoder for one connection's byte stream.

    After it raises L{WireError} the stream is unusable (framing is lost);
    the caller closes the connection.
    """

    def __init__(
        self, frames: FrameSet = LINK_FRAMES, max_frame_size: int = DEFAULT_MAX_FRAME_SIZE
    ) -> None:
        self._frames = frames
        self._max = max_frame_size
        self._buffer = bytearray()

    def feed(self, data: bytes) -> list:
        """
        Add C{data} to the stream and return the frames it completes, in
        order.

        @raise WireError: the stream holds an oversized, empty, undecodable
            or ill-typed frame.
        """
        buffer = self._buffer
        buffer += data
        frames = []
        offset = 0
        while len(buffer) - offset >= _LENGTH.size:
            (size,) = _LENGTH.unpack_from(buffer, offset)
            if size == 0 or size > self._max:
                raise WireError(
                    f"frame length {size} outside 1..{self._max} bytes"
                )
            end = offset + _LENGTH.size + size
            if len(buffer) < end:
                break
            frames.append(self._decode_body(bytes(buffer[offset + _LENGTH.size : end])))
            offset = end
        del buffer[:offset]
        return frames

    @property
    def pending(self) -> int:
        """
        Bytes received but not yet part of a complete frame; non-zero at
        connection close means the peer sent a truncated frame.
        """
        return len(self._buffer)

    def _decode_body(self, body: bytes):
        try:
            items = msgpack.unpackb(body, raw=False, strict_map_key=True)
        except (ValueError, msgpack.ExtraData, msgpack.FormatError,
                msgpack.StackError, TypeError, UnicodeDecodeError) as e:
            raise WireError(f"undecodable frame body: {e}") from None
        return self._frames.from_list(items)
