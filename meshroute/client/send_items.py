"""
What a send is made of: its arguments checked and made the item of a
C{SendBatch} (a C{Send}'s fields after the command id), the one shape
every send of the client takes on its way (L{meshroute.client.Client.send},
C{send_many}, C{publish}, a L{meshroute.client.producer.Producer}'s),
and why a message cannot be sent at all (too large for a frame, a time
to live or a topic for a router that is too old).
"""

from meshroute.client.errors import TOO_LARGE, SendError, unsupported
from meshroute.messages import TOPIC_PREFIX
from meshroute.wire import client_frames as f


def send_item(address: str, body: bytes, headers: dict | None, persistent: bool,
               duplicate_id: str | None, ttl: float | None = None,
               notify_expiry: bool = False) -> tuple:
    """
    A send's SendBatch item (a Send's fields after the command id), its
    arguments checked: with a C{ttl}, followed by its milliseconds and
    C{notify_expiry} (version 6).

    @raise TypeError: C{address} is not a string, C{body} is not bytes,
        C{headers} does not map strings to strings, or C{duplicate_id} is
        not a string.
    @raise ValueError: C{ttl} is not above 0.
    """
    if type(address) is not str:
        raise TypeError(f"address must be a string, not {type(address).__name__}")
    if isinstance(body, (bytearray, memoryview)):
        body = bytes(body)
    if type(body) is not bytes:
        raise TypeError(f"body must be bytes, not {type(body).__name__}")
    if duplicate_id is None:
        duplicate_id = ""
    elif type(duplicate_id) is not str:
        raise TypeError("duplicate_id must be a string")
    item = (address, _checked_headers(headers), body, bool(persistent), duplicate_id)
    return item + _expiry_fields(ttl, notify_expiry)


def _expiry_fields(ttl: float | None, notify_expiry: bool) -> tuple:
    """
    The fields a send with time to live C{ttl} (seconds) adds to its
    item: none without one.

    @raise ValueError: C{ttl} is not above 0.
    """
    if ttl is None:
        return ()
    if not ttl > 0:
        raise ValueError(f"ttl must be above 0 seconds, not {ttl!r}")
    return (max(1, round(ttl * 1000)), bool(notify_expiry))


def send_refusal(version: int, message: tuple) -> SendError | None:
    """
    Why C{message} (a send's item) cannot be sent, if it cannot: too large
    for one frame, a time to live for a router older than version 6, or a
    publication for one older than version 8.

    @param version: the router's client protocol version (0: not known yet).
    """
    refusal = None
    if len(message) > 5:
        refusal = unsupported(version, f.EXPIRY_VERSION, "a time to live", SendError)
    if refusal is None and message[0].startswith(TOPIC_PREFIX):
        refusal = unsupported(version, f.TOPICS_VERSION, "publishing to a topic", SendError)
    if refusal is not None:
        return refusal
    oversized = f.oversized_send(*message[:5])
    if oversized is not None:
        return SendError(TOO_LARGE, oversized)
    return None


def _checked_headers(headers: dict | None) -> dict:
    """
    A copy of C{headers} (none: empty).

    @raise TypeError: they do not map strings to strings.
    """
    headers = {} if headers is None else dict(headers)
    if not all(type(k) is str and type(v) is str for k, v in headers.items()):
        raise TypeError("headers must map strings to strings")
    return headers


def send_items(version: int, address: str, bodies, headers: dict | None, persistent: bool,
                ttl: float | None = None, notify_expiry: bool = False) -> list[tuple]:
    """
    The SendBatch items of C{send_many}: the address and headers checked
    once, the bodies' types, and the largest body's size.

    @raise TypeError: as L{send_item}.
    @raise ValueError: as L{send_item}.
    @raise SendError: C{too-large}: a body does not fit in one client frame;
        C{unsupported}: a C{ttl} for a router older than version 6.
    """
    if type(address) is not str:
        raise TypeError(f"address must be a string, not {type(address).__name__}")
    headers = _checked_headers(headers)
    bodies = list(bodies)
    if set(map(type, bodies)) - {bytes}:
        bodies = [bytes(body) if isinstance(body, (bytearray, memoryview)) else body
                  for body in bodies]
        for body in bodies:
            if type(body) is not bytes:
                raise TypeError(f"body must be bytes, not {type(body).__name__}")
    if not bodies:
        return []
    persistent = bool(persistent)
    expiry = _expiry_fields(ttl, notify_expiry)
    refusal = send_refusal(version, (address, headers, max(bodies, key=len), persistent, "", *expiry))
    if refusal is not None:
        raise refusal
    return [(address, headers, body, persistent, "", *expiry) for body in bodies]
