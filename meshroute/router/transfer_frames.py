"""
How persistent messages travel in link frames: a message as a transfer's
fields (L{on_the_wire}) and back (L{message_from_frame},
L{message_from_item}), a bound on its size in a frame (L{wire_size}),
whether a peer takes it at all (L{fits_a_link}), and transfers gathered
into frames as a link sends them (L{TransferFrames}).
"""

from typing import Callable

from meshroute.messages import Message, message_of
from meshroute.wire.codec import (
    MAX_CLIENT_FRAME_SIZE,
    MAX_MESSAGE_FRAME_SIZE,
    body_size,
    size_bound,
)
from meshroute.wire.frames import (
    BATCH_MAX_BYTES,
    BATCH_MAX_MESSAGES,
    BATCH_VERSION,
    Transfer,
    TransferBatch,
)


def message_from_item(msg_id: str, origin: str, dest_router: str, dest_queue: str, hops: int,
             accepted_at: float, headers: dict, body: bytes, persistent: bool) -> Message:
    """
    The message a transfer carries (its fields in the frames' order).
    """
    return message_of(msg_id, origin, dest_router, dest_queue, body, headers, hops, persistent,
                      accepted_at)


def message_from_frame(frame, persistent: bool) -> Message:
    return message_from_item(frame.msg_id, frame.origin, frame.dest_router, frame.dest_queue,
                    frame.hops, frame.accepted_at, frame.headers, frame.body, persistent)


def on_the_wire(message: Message) -> tuple:
    """
    C{message} as the next hop receives it (one more hop), in the order
    of a transfer's fields: a batch frame's item, or the fields of a
    L{FastTransfer} (after the seq, of a L{Transfer}).
    """
    return (message.msg_id, message.origin, message.dest_router, message.dest_queue,
            message.hops + 1, message.accepted_at, message.headers, message.body)


def wire_size(item: tuple) -> int:
    """
    A bound on the bytes C{item} (L{on_the_wire}) takes in a frame: what
    batches are bounded by (L{BATCH_MAX_BYTES}).
    """
    headers = item[6]
    text = len(item[0]) + len(item[1]) + len(item[2]) + len(item[3])
    if headers:
        text += sum(len(k) + len(v) for k, v in headers.items())
    return size_bound(item[7], text, 2 * len(headers) + 9)


def fits_a_link(size: int, frame: Transfer) -> bool:
    """
    Whether a peer takes C{frame}, the Transfer of a message of
    L{wire_size} C{size}: certainly when that is within a client Send
    (see L{meshroute.wire.codec}), else measured.
    """
    return size <= MAX_CLIENT_FRAME_SIZE or body_size(frame) <= MAX_MESSAGE_FRAME_SIZE


class TransferFrames:
    """
    Transfers gathered into frames as they are sent, in seq order: at
    version 4 one L{TransferBatch} per run of consecutive numbers, up to a
    batch's count and bytes; before, a L{Transfer} each.
    """

    def __init__(self, send: Callable[[object], None], version: int) -> None:
        """
        @param send: writes a frame on the link.
        @param version: the link protocol version the peer speaks.
        """
        self._send = send
        self._limit = BATCH_MAX_MESSAGES if version >= BATCH_VERSION else 1
        self._batch: list[tuple] = []
        self._first = self._bytes = 0

    def add(self, seq: int, item: tuple, size: int) -> None:
        """
        Send C{item} (L{on_the_wire}, of L{wire_size} C{size}) as
        transfer C{seq}, in the frame being gathered if it continues it.
        """
        batch = self._batch
        if batch and (seq != self._first + len(batch) or len(batch) == self._limit
                      or self._bytes + size > BATCH_MAX_BYTES):
            self.flush()
            batch = self._batch
        if not batch:
            self._first, self._bytes = seq, 0
        batch.append(item)
        self._bytes += size

    def flush(self) -> None:
        "Send the frame gathered, if any."
        items, self._batch = self._batch, []
        if len(items) > 1:
            self._send(TransferBatch(self._first, items))
        elif items:
            self._send(Transfer(self._first, *items[0]))
