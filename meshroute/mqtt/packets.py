"""
Sans-IO MQTT 3.1.1 and 5.0 packets (the OASIS specifications):
L{PacketReader} turns a connection's bytes into packets, L{encode} turns
a packet into bytes.  Nothing here does I/O or knows Twisted.

Every packet is a frozen dataclass with the same fields in both
versions (L{meshroute.mqtt.packet_types}, all importable from here);
what 3.1.1 lacks (properties, most reason codes) is empty or 0 when read
and left out when written.  Reason codes are 5.0's in both
(L{meshroute.mqtt.reason_codes}): a 3.1.1 CONNACK's return code is read
as the reason code it stands for, and written back from it.

A packet is a fixed header (type and flags in one byte, then the
remaining length as a variable byte integer of at most four bytes) and
that many bytes.  The reader checks what it can from the fixed header
before it holds the body: the type is one the peer may send
(L{PacketReader}'s C{peer}), its flags are the spec's, the remaining
length fits in four bytes and the whole packet within C{max_packet_size}
(0x95 packet too large), and a client's first packet is a CONNECT; so a
peer can never make the reader hold more than one packet of at most that
size.  Then the body is read field by field, with every rule of the
specs that a packet alone can break (each rule's check names it where
it is made).  Anything wrong raises L{MalformedPacket}, the one error of
this module: the stream has lost its framing, or the peer broke the
protocol, and the caller closes the connection.

What needs a connection's state (topic aliases, receive maximum, packet
identifiers in use, a DISCONNECT's session expiry against the CONNECT's)
is the connection's to check, not the codec's.
"""

from collections.abc import Mapping
from typing import Literal

from meshroute.mqtt.fields import (
    MAX_VARIABLE_INTEGER,
    Cursor,
    read_variable_integer,
    write_binary,
    write_string,
    write_u16,
    write_variable_integer,
)
from meshroute.mqtt.packet_types import (
    MQTT_3_1,
    MQTT_3_1_1,
    MQTT_5,
    PROTOCOL_NAMES,
    SUPPORTED_LEVELS,
    Auth,
    Connack,
    Connect,
    Disconnect,
    Pingreq,
    Pingresp,
    Puback,
    Pubcomp,
    Publish,
    Pubrec,
    Pubrel,
    Suback,
    Subscribe,
    SubscriptionRequest,
    Unsuback,
    Unsubscribe,
    Will,
)
from meshroute.mqtt.properties import read_properties, write_properties
from meshroute.mqtt.reason_codes import (
    ALLOWED,
    MalformedPacket,
    ReasonCode,
    connack_reason_code,
    connack_return_code,
    malformed,
    protocol_error,
    suback_return_code,
)
from meshroute.mqtt.topic_syntax import (
    shared_subscription,
    topic_filter_problem,
    topic_name_problem,
)

__all__ = [
    "MQTT_3_1", "MQTT_3_1_1", "MQTT_5", "MalformedPacket", "ReasonCode",
    "Connect", "Will", "Connack", "Publish", "Puback", "Pubrec", "Pubrel", "Pubcomp",
    "Subscribe", "SubscriptionRequest", "Suback", "Unsubscribe", "Unsuback",
    "Pingreq", "Pingresp", "Disconnect", "Auth", "PacketReader", "encode",
]


_NAMES = {1: "CONNECT", 2: "CONNACK", 3: "PUBLISH", 4: "PUBACK", 5: "PUBREC",
          6: "PUBREL", 7: "PUBCOMP", 8: "SUBSCRIBE", 9: "SUBACK", 10: "UNSUBSCRIBE",
          11: "UNSUBACK", 12: "PINGREQ", 13: "PINGRESP", 14: "DISCONNECT", 15: "AUTH"}
#: What each side may send (section 2.1.2).
_FROM_CLIENTS = frozenset({1, 3, 4, 5, 6, 7, 8, 10, 12, 14, 15})
_FROM_SERVERS = frozenset({2, 3, 4, 5, 6, 7, 9, 11, 13, 14, 15})
#: The fixed flags of the packets that have them (section 2.1.3): the
#: other packets' are 0; PUBLISH's are its own.
_FIXED_FLAGS = {6: 0b0010, 8: 0b0010, 10: 0b0010}

Peer = Literal["client", "server"]


class PacketReader:
    """
    Reads the packets one peer sends, from a stream split anywhere.

    @ivar protocol_level: 4 (3.1.1) or 5, learned from a client's CONNECT
        unless given; C{None} until then.
    """

    def __init__(self, max_packet_size: int, protocol_level: int | None = None,
                 peer: Peer = "client") -> None:
        """
        @param max_packet_size: the largest packet taken, fixed header
            included (what a 5.0 server announces as its maximum packet
            size); a larger one raises L{MalformedPacket} (0x95) before
            its body is held.
        @param protocol_level: the level spoken, for a reader of a
            server's packets (a client knows what it asked for).
        @param peer: whose packets are read: a client's (the router's
            reader) or a server's (a client's, in tests and benchmarks).
        """
        if peer == "server" and protocol_level not in SUPPORTED_LEVELS:
            raise ValueError("a reader of a server's packets is given the protocol level")
        if max_packet_size < 2:
            raise ValueError(f"a packet is at least 2 bytes, not {max_packet_size}")
        self.max_packet_size = max_packet_size
        self.protocol_level = protocol_level
        self._peer = peer
        self._allowed = _FROM_CLIENTS if peer == "client" else _FROM_SERVERS
        self._chunks: list[bytes] = []
        self._held = 0
        self._needed = 1
        self._failure: MalformedPacket | None = None

    @property
    def pending(self) -> int:
        """
        The bytes held of a packet not yet complete (what a listener
        counts against its buffer bound).
        """
        return self._held

    def feed(self, data: bytes) -> list:
        """
        The packets C{data} completes, in order; the bytes of one not yet
        complete are kept for the next call.

        @raise MalformedPacket: at the first broken packet; the reader
            then refuses any more bytes with the same error (the caller
            closes the connection).
        """
        if self._failure is not None:
            raise self._failure
        if data:
            self._chunks.append(bytes(data))
            self._held += len(data)
        if self._held < self._needed:
            return []
        buffer = b"".join(self._chunks)
        packets: list = []
        position = 0
        try:
            while True:
                header = self._fixed_header(buffer, position)
                if header is None:
                    self._needed = len(buffer) - position + 1
                    break
                first, start, end = header
                if end > len(buffer):
                    self._needed = end - position
                    break
                packets.append(self._packet(first, Cursor(buffer[start:end])))
                position = end
        except MalformedPacket as failure:
            self._failure = failure
            self._chunks = []
            raise
        rest = buffer[position:]
        self._chunks = [rest] if rest else []
        self._held = len(rest)
        return packets

    def _fixed_header(self, buffer: bytes, position: int) -> tuple[int, int, int] | None:
        """
        The first byte, and where the body starts and ends, of the packet
        at C{position}; C{None} while its fixed header is incomplete.
        """
        if position >= len(buffer):
            return None
        first = buffer[position]
        kind, flags = first >> 4, first & 0x0F
        self._check_kind(kind, flags)
        try:
            length, start = read_variable_integer(buffer, position + 1, "remaining length")
        except MalformedPacket:
            # Incomplete, or broken: which one, only the bytes there say.
            if len(buffer) - position - 1 >= 4 or _ends_length(buffer, position + 1):
                raise
            return None
        if start - position + length > self.max_packet_size:
            raise MalformedPacket(
                ReasonCode.PACKET_TOO_LARGE,
                f"a {_NAMES[kind]} of {start - position + length} bytes is over the "
                f"maximum packet size, {self.max_packet_size}")
        return first, start, start + length

    def _check_kind(self, kind: int, flags: int) -> None:
        if kind not in _NAMES or (kind == Auth.TYPE and self.protocol_level == MQTT_3_1_1):
            raise malformed(f"packet type {kind} is reserved")
        name = _NAMES[kind]
        if kind not in self._allowed:
            raise protocol_error(f"a {self._peer} does not send {name}")
        if self.protocol_level is None and kind != Connect.TYPE:
            raise protocol_error(f"a client's first packet is CONNECT, not {name}")
        if self.protocol_level is not None and kind == Connect.TYPE:
            raise protocol_error("a second CONNECT")  # [MQTT-3.1.0-2]
        if kind != Publish.TYPE and flags != _FIXED_FLAGS.get(kind, 0):
            raise malformed(f"reserved flags 0b{flags:04b} on {name}")  # [MQTT-2.1.3-1]

    def _packet(self, first: int, cursor: Cursor):
        kind = first >> 4
        if kind == Connect.TYPE:
            packet = _read_connect(cursor)
            self.protocol_level = packet.protocol_level
            return packet
        level = self.protocol_level
        if kind == Publish.TYPE:
            return _read_publish(cursor, first & 0x0F, level, self._peer)
        return _READERS[kind](cursor, level)


def _ends_length(buffer: bytes, position: int) -> bool:
    """Whether a remaining length ends in C{buffer} from C{position}."""
    return any(not byte & 0x80 for byte in buffer[position:position + 4])


def _properties_in(cursor: Cursor, level: int, name: str) -> dict:
    """The 5.0 properties at C{cursor} in a packet C{name}; none below 5.0."""
    return read_properties(cursor, name) if level == MQTT_5 else {}


def _end(cursor: Cursor, name: str) -> None:
    if not cursor.at_end():
        raise malformed(f"{cursor.left()} bytes after the end of a {name}")


def _packet_id(cursor: Cursor, name: str) -> int:
    packet_id = cursor.u16(f"{name} packet identifier")
    if packet_id == 0:
        raise protocol_error(f"a {name}'s packet identifier cannot be 0")  # [MQTT-2.2.1-3]
    return packet_id


def _reason_code(cursor: Cursor, name: str) -> int:
    code = cursor.byte(f"{name} reason code")
    if code not in ALLOWED[name]:
        raise protocol_error(f"0x{code:02X} is not a reason code of {name}")
    return ReasonCode(code)


def _check_qos(qos: int, what: str) -> int:
    if qos == 3:
        raise malformed(f"QoS 3 in a {what}")  # [MQTT-3.3.1-4]
    return qos


def _check_topic_name(topic: str, what: str) -> str:
    problem = topic_name_problem(topic)
    if problem is not None:
        raise MalformedPacket(ReasonCode.TOPIC_NAME_INVALID, f"{what}: {problem}")
    return topic


def _check_response_topic(properties: Mapping, what: str) -> None:
    topic = properties.get("response_topic")
    problem = None if topic is None else topic_name_problem(topic)
    if problem is not None:
        raise protocol_error(f"{what}'s response topic: {problem}")  # [MQTT-3.3.2-14]


def _check_topic_filter(topic_filter: str) -> str:
    problem = topic_filter_problem(topic_filter)
    if problem is not None:
        raise MalformedPacket(ReasonCode.TOPIC_FILTER_INVALID, problem)
    return topic_filter


def _read_connect(cursor: Cursor) -> Connect:
    name = cursor.string("protocol name")
    level = cursor.byte("protocol level")
    if name != "MQTT" or level not in SUPPORTED_LEVELS:
        raise MalformedPacket(
            ReasonCode.UNSUPPORTED_PROTOCOL_VERSION,
            f"protocol {name!r} level {level} is not spoken here: MQTT 3.1.1 (level 4) "
            f"and 5.0 (level 5) are", protocol_level=level)
    flags = cursor.byte("connect flags")
    if flags & 0x01:
        raise malformed("the reserved connect flag is set")  # [MQTT-3.1.2-3]
    has_will, will_qos, will_retain = bool(flags & 0x04), (flags >> 3) & 0x03, bool(flags & 0x20)
    has_password, has_username = bool(flags & 0x40), bool(flags & 0x80)
    _check_qos(will_qos, "will")
    if not has_will and (will_qos or will_retain):
        raise malformed("a will's QoS or retain without a will")  # [MQTT-3.1.2-11, -13, -15]
    if level == MQTT_3_1_1 and has_password and not has_username:
        raise malformed("a password without a user name")  # [MQTT-3.1.2-22]
    keep_alive = cursor.u16("keep alive")
    properties = _properties_in(cursor, level, "CONNECT")
    if "authentication_data" in properties and "authentication_method" not in properties:
        raise protocol_error("authentication data without an authentication method")
    client_id = cursor.string("client identifier")
    will = None
    if has_will:
        will_properties = _properties_in(cursor, level, "WILL")
        _check_response_topic(will_properties, "a will")
        topic = _check_topic_name(cursor.string("will topic"), "the will topic")
        will = Will(topic, cursor.binary("will payload"), will_qos, will_retain,
                    will_properties)
    username = cursor.string("user name") if has_username else None
    password = cursor.binary("password") if has_password else None
    _end(cursor, "CONNECT")
    return Connect(level, client_id, bool(flags & 0x02), keep_alive, username, password,
                   will, properties)


def _read_connack(cursor: Cursor, level: int) -> Connack:
    flags = cursor.byte("connect acknowledge flags")
    if flags & 0xFE:
        raise malformed("reserved connect acknowledge flags are set")  # [MQTT-3.2.2-1]
    if level == MQTT_5:
        code = _reason_code(cursor, "CONNACK")
        properties = read_properties(cursor, "CONNACK")
    else:
        return_code = cursor.byte("connect return code")
        if return_code > 5:
            raise malformed(f"CONNACK return code {return_code} is reserved")
        code, properties = connack_reason_code(return_code), {}
    _end(cursor, "CONNACK")
    return Connack(bool(flags & 0x01), code, properties)


def _read_publish(cursor: Cursor, flags: int, level: int, peer: Peer) -> Publish:
    dup, qos, retain = bool(flags & 0x08), _check_qos((flags >> 1) & 0x03, "PUBLISH"), bool(flags & 0x01)
    if dup and not qos:
        raise malformed("DUP on a QoS 0 PUBLISH")  # [MQTT-3.3.1-2]
    topic = cursor.string("topic name")
    packet_id = _packet_id(cursor, "PUBLISH") if qos else None
    properties = _properties_in(cursor, level, "PUBLISH")
    if topic or level != MQTT_5:
        _check_topic_name(topic, "a PUBLISH")  # [MQTT-3.3.2-1, -2], [MQTT-4.7.3-1]
    elif "topic_alias" not in properties:
        raise protocol_error("a PUBLISH without a topic name or a topic alias")  # [MQTT-3.3.2-8]
    _check_response_topic(properties, "a PUBLISH")
    if peer == "client" and "subscription_identifier" in properties:
        raise protocol_error("a subscription identifier in a client's PUBLISH")  # [MQTT-3.3.4-6]
    return Publish(topic, cursor.rest(), qos, retain, dup, packet_id, properties)


def _reason_to_end(cursor: Cursor, level: int, name: str) -> tuple[int, dict]:
    """
    The reason code and properties that end a 5.0 acknowledgement,
    DISCONNECT or AUTH, either of which it may leave out (success, none);
    below 5.0 there are none.
    """
    code, properties = ReasonCode.SUCCESS, {}
    if level == MQTT_5 and not cursor.at_end():
        code = _reason_code(cursor, name)
        if not cursor.at_end():
            properties = read_properties(cursor, name)
    _end(cursor, name)
    return code, properties


def _acknowledgement(packet_class, name: str):
    def read(cursor: Cursor, level: int):
        packet_id = _packet_id(cursor, name)
        return packet_class(packet_id, *_reason_to_end(cursor, level, name))
    return read


def _listing(packet_class, name: str, read_item, needs_one: bool = False):
    """
    The reader of a packet that is a packet identifier, its 5.0
    properties, then items to its end (SUBSCRIBE, SUBACK, UNSUBSCRIBE,
    5.0's UNSUBACK), each read by C{read_item(cursor, level)}.

    @param needs_one: whether a packet without an item is a protocol
        error (it is for those that list topic filters).
    """
    def read(cursor: Cursor, level: int):
        packet_id = _packet_id(cursor, name)
        properties = _properties_in(cursor, level, name)
        items = []
        while not cursor.at_end():
            items.append(read_item(cursor, level))
        if needs_one and not items:
            raise protocol_error(f"a {name} without a topic filter")
        return packet_class(packet_id, tuple(items), properties)
    return read


def _subscription_request(cursor: Cursor, level: int) -> SubscriptionRequest:
    topic_filter = _check_topic_filter(cursor.string("topic filter"))
    options = cursor.byte("subscription options")
    if options & (0xC0 if level == MQTT_5 else 0xFC):
        raise malformed("reserved subscription options are set")  # [MQTT-3.8.3-5]
    request = SubscriptionRequest(
        topic_filter, _check_qos(options & 0x03, "subscription"),
        bool(options & 0x04), bool(options & 0x08), (options >> 4) & 0x03)
    if request.retain_handling == 3:
        raise protocol_error("retain handling 3 is reserved")
    if request.no_local and shared_subscription(topic_filter):
        raise protocol_error("no local on a shared subscription")  # [MQTT-3.8.3-4]
    return request


def _suback_code(cursor: Cursor, level: int) -> ReasonCode:
    if level == MQTT_5:
        return _reason_code(cursor, "SUBACK")
    code = cursor.byte("SUBACK return code")
    if code not in (0, 1, 2, 0x80):
        raise malformed(f"SUBACK return code 0x{code:02X} is reserved")
    return ReasonCode(code)


def _unsubscribed_filter(cursor: Cursor, level: int) -> str:
    return _check_topic_filter(cursor.string("topic filter"))


# [MQTT-3.8.3-3], [MQTT-3.10.3-2]: at least one topic filter.
_read_subscribe = _listing(Subscribe, "SUBSCRIBE", _subscription_request, needs_one=True)
_read_unsubscribe = _listing(Unsubscribe, "UNSUBSCRIBE", _unsubscribed_filter, needs_one=True)
_read_suback = _listing(Suback, "SUBACK", _suback_code)
_read_unsuback_5 = _listing(Unsuback, "UNSUBACK",
                            lambda cursor, level: _reason_code(cursor, "UNSUBACK"))


def _read_unsuback(cursor: Cursor, level: int) -> Unsuback:
    if level == MQTT_5:
        return _read_unsuback_5(cursor, level)
    packet_id = _packet_id(cursor, "UNSUBACK")
    _end(cursor, "UNSUBACK")  # 3.1.1's is its packet identifier alone
    return Unsuback(packet_id)


def _empty(packet_class, name: str):
    def read(cursor: Cursor, level: int):
        _end(cursor, name)
        return packet_class()
    return read


def _ending(packet_class, name: str):
    """A DISCONNECT's or an AUTH's reader: both may be empty in 5.0."""
    def read(cursor: Cursor, level: int):
        return packet_class(*_reason_to_end(cursor, level, name))
    return read


_READERS = {
    2: _read_connack,
    4: _acknowledgement(Puback, "PUBACK"),
    5: _acknowledgement(Pubrec, "PUBREC"),
    6: _acknowledgement(Pubrel, "PUBREL"),
    7: _acknowledgement(Pubcomp, "PUBCOMP"),
    8: _read_subscribe,
    9: _read_suback,
    10: _read_unsubscribe,
    11: _read_unsuback,
    12: _empty(Pingreq, "PINGREQ"),
    13: _empty(Pingresp, "PINGRESP"),
    14: _ending(Disconnect, "DISCONNECT"),
    15: _ending(Auth, "AUTH"),
}


def encode(packet, protocol_level: int) -> bytes:
    """
    The bytes of C{packet} as protocol level C{protocol_level} (4 for
    3.1.1, 5 for 5.0) writes it: properties only in 5.0, reason codes as
    3.1.1 has them (a CONNACK's return code, a SUBACK's granted QoS or
    0x80) or not at all, and a failure the packet has no code for as
    0x80, unspecified error (L{_written_codes}).

    @raise ValueError: for a packet the level cannot carry (an AUTH in
        3.1.1), a field out of range, a property that does not belong, a
        success code the packet does not have.
    """
    if isinstance(packet, Connect):
        if protocol_level != packet.protocol_level:
            raise ValueError(f"a CONNECT of level {packet.protocol_level} written as "
                             f"level {protocol_level}")
    elif protocol_level not in SUPPORTED_LEVELS:
        raise ValueError(f"protocol level {protocol_level} is not spoken here")
    flags, body = _WRITERS[type(packet)](packet, protocol_level == MQTT_5)
    if len(body) > MAX_VARIABLE_INTEGER:
        raise ValueError(f"a packet's body is at most {MAX_VARIABLE_INTEGER} bytes, "
                         f"not {len(body)}")
    return bytes(((packet.TYPE << 4) | flags,)) + write_variable_integer(len(body)) + body


def _properties_of(packet, v5: bool, name: str) -> bytes:
    return write_properties(packet.properties, name) if v5 else b""


def _written_codes(codes, name: str) -> list[int]:
    """
    C{codes} as a packet C{name} can say them: a failure it has no code
    for is 0x80, unspecified error (as a 3.1.1 SUBACK says every
    failure), since a peer takes a code its packet does not have as a
    protocol error.

    @raise ValueError: for a success, or a failure where the packet has
        no 0x80 (PUBREL, PUBCOMP, AUTH): a bug here.
    """
    allowed = ALLOWED[name]
    written = []
    for code in codes:
        if code not in allowed:
            if code < 0x80 or ReasonCode.UNSPECIFIED_ERROR not in allowed:
                raise ValueError(f"0x{code:02X} is not a reason code of {name}")
            code = ReasonCode.UNSPECIFIED_ERROR
        written.append(code)
    return written


def _write_connect(packet: Connect, v5: bool) -> tuple[int, bytes]:
    will = packet.will
    flags = ((0x80 if packet.username is not None else 0)
             | (0x40 if packet.password is not None else 0)
             | (0x02 if packet.clean_start else 0))
    if will is not None:
        flags |= 0x04 | (will.qos << 3) | (0x20 if will.retain else 0)
    body = (write_string(PROTOCOL_NAMES[packet.protocol_level])
            + bytes((packet.protocol_level, flags)) + write_u16(packet.keep_alive)
            + _properties_of(packet, v5, "CONNECT") + write_string(packet.client_id))
    if will is not None:
        body += (_properties_of(will, v5, "WILL") + write_string(will.topic)
                 + write_binary(will.payload))
    if packet.username is not None:
        body += write_string(packet.username)
    if packet.password is not None:
        body += write_binary(packet.password)
    return 0, body


def _write_connack(packet: Connack, v5: bool) -> tuple[int, bytes]:
    [code] = _written_codes((packet.reason_code,), "CONNACK")
    code = code if v5 else connack_return_code(packet.reason_code)
    return 0, (bytes((1 if packet.session_present else 0, code))
               + _properties_of(packet, v5, "CONNACK"))


def _write_publish(packet: Publish, v5: bool) -> tuple[int, bytes]:
    if (packet.packet_id is not None) != (packet.qos > 0):
        raise ValueError("a PUBLISH has a packet identifier exactly when its QoS is 1 or 2")
    if packet.qos not in (0, 1, 2):
        raise ValueError(f"QoS is 0, 1 or 2, not {packet.qos}")
    flags = (0x08 if packet.dup else 0) | (packet.qos << 1) | (0x01 if packet.retain else 0)
    body = write_string(packet.topic)
    if packet.packet_id is not None:
        body += write_u16(packet.packet_id)
    return flags, body + _properties_of(packet, v5, "PUBLISH") + packet.payload


def _write_acknowledgement(name: str, flags: int):
    def write(packet, v5: bool) -> tuple[int, bytes]:
        [code] = _written_codes((packet.reason_code,), name)
        body = write_u16(packet.packet_id)
        if v5 and (code or packet.properties):
            body += bytes((code,))
            if packet.properties:
                body += write_properties(packet.properties, name)
        return flags, body
    return write


def _write_subscribe(packet: Subscribe, v5: bool) -> tuple[int, bytes]:
    body = write_u16(packet.packet_id) + _properties_of(packet, v5, "SUBSCRIBE")
    for request in packet.requests:
        options = request.qos
        if v5:
            options |= ((0x04 if request.no_local else 0)
                        | (0x08 if request.retain_as_published else 0)
                        | (request.retain_handling << 4))
        body += write_string(request.topic_filter) + bytes((options,))
    return 0b0010, body


def _write_suback(packet: Suback, v5: bool) -> tuple[int, bytes]:
    codes = _written_codes(packet.reason_codes, "SUBACK")
    codes = codes if v5 else [suback_return_code(code) for code in codes]
    return 0, write_u16(packet.packet_id) + _properties_of(packet, v5, "SUBACK") + bytes(codes)


def _write_unsubscribe(packet: Unsubscribe, v5: bool) -> tuple[int, bytes]:
    body = write_u16(packet.packet_id) + _properties_of(packet, v5, "UNSUBSCRIBE")
    return 0b0010, body + b"".join(write_string(f) for f in packet.topic_filters)


def _write_unsuback(packet: Unsuback, v5: bool) -> tuple[int, bytes]:
    body = write_u16(packet.packet_id)
    if v5:
        body += (write_properties(packet.properties, "UNSUBACK")
                 + bytes(_written_codes(packet.reason_codes, "UNSUBACK")))
    return 0, body


def _write_empty(packet, v5: bool) -> tuple[int, bytes]:
    return 0, b""


def _write_ending(name: str):
    def write(packet, v5: bool) -> tuple[int, bytes]:
        [code] = _written_codes((packet.reason_code,), name)
        if not v5:
            if name == "AUTH":
                raise ValueError("MQTT 3.1.1 has no AUTH")
            return 0, b""
        if not code and not packet.properties:
            return 0, b""
        return 0, bytes((code,)) + write_properties(packet.properties, name)
    return write


_WRITERS = {
    Connect: _write_connect,
    Connack: _write_connack,
    Publish: _write_publish,
    Puback: _write_acknowledgement("PUBACK", 0),
    Pubrec: _write_acknowledgement("PUBREC", 0),
    Pubrel: _write_acknowledgement("PUBREL", 0b0010),
    Pubcomp: _write_acknowledgement("PUBCOMP", 0),
    Subscribe: _write_subscribe,
    Suback: _write_suback,
    Unsubscribe: _write_unsubscribe,
    Unsuback: _write_unsuback,
    Pingreq: _write_empty,
    Pingresp: _write_empty,
    Disconnect: _write_ending("DISCONNECT"),
    Auth: _write_ending("AUTH"),
}
