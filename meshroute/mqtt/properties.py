"""
MQTT 5.0 properties (section 2.2.2): a packet's optional fields, read
into and written from a mapping of snake_case names to values.

Every property of the table in section 2.2.2.2 is known, with its type
and the packets it may appear in (C{"WILL"} stands for a CONNECT's will
properties).  Reading a property in a packet it does not belong to, one
twice that may appear once, or a value the spec rules out (a receive
maximum, maximum packet size, topic alias or subscription identifier of
0; a byte that is a yes or no other than 0 or 1) is a protocol error; an
unknown identifier, or a property running past its length, a malformed
packet.

Values are C{int}s, C{str}s or C{bytes} by the property's type.  The
two properties that may repeat are tuples wherever they appear, in the
order written: C{user_property}, a tuple of C{(name, value)} string
pairs (any packet but PINGREQ/PINGRESP), and C{subscription_identifier},
a tuple of integers (several in a PUBLISH to a client, at most one in a
SUBSCRIBE).  A mapping is written in identifier order.
"""

from collections.abc import Mapping
from dataclasses import dataclass

from meshroute.mqtt.fields import (
    MAX_VARIABLE_INTEGER,
    Cursor,
    write_binary,
    write_string,
    write_string_pair,
    write_u16,
    write_u32,
    write_variable_integer,
)
from meshroute.mqtt.reason_codes import malformed, protocol_error

_ACKS = ("PUBACK", "PUBREC", "PUBREL", "PUBCOMP")
_MESSAGE = ("PUBLISH", "WILL")


@dataclass(frozen=True)
class Property:
    """
    One property of the spec's table: its identifier, its name here,
    its data type (C{byte}, C{u16}, C{u32}, C{varint}, C{string},
    C{binary}, C{pair}), the packets it may appear in, and those it may
    appear in more than once.
    """

    identifier: int
    name: str
    kind: str
    packets: frozenset[str]
    repeats_in: frozenset[str] = frozenset()
    #: For a byte that is a yes or no: only 0 and 1 are allowed.
    yes_or_no: bool = False
    #: Whether 0 is a protocol error.
    nonzero: bool = False


def _property(identifier, name, kind, packets, **options) -> Property:
    return Property(identifier, name, kind, frozenset(packets), **options)


PROPERTIES = (
    _property(0x01, "payload_format_indicator", "byte", _MESSAGE, yes_or_no=True),
    _property(0x02, "message_expiry_interval", "u32", _MESSAGE),
    _property(0x03, "content_type", "string", _MESSAGE),
    _property(0x08, "response_topic", "string", _MESSAGE),
    _property(0x09, "correlation_data", "binary", _MESSAGE),
    _property(0x0B, "subscription_identifier", "varint", ("PUBLISH", "SUBSCRIBE"),
              repeats_in=frozenset({"PUBLISH"}), nonzero=True),
    _property(0x11, "session_expiry_interval", "u32", ("CONNECT", "CONNACK", "DISCONNECT")),
    _property(0x12, "assigned_client_identifier", "string", ("CONNACK",)),
    _property(0x13, "server_keep_alive", "u16", ("CONNACK",)),
    _property(0x15, "authentication_method", "string", ("CONNECT", "CONNACK", "AUTH")),
    _property(0x16, "authentication_data", "binary", ("CONNECT", "CONNACK", "AUTH")),
    _property(0x17, "request_problem_information", "byte", ("CONNECT",), yes_or_no=True),
    _property(0x18, "will_delay_interval", "u32", ("WILL",)),
    _property(0x19, "request_response_information", "byte", ("CONNECT",), yes_or_no=True),
    _property(0x1A, "response_information", "string", ("CONNACK",)),
    _property(0x1C, "server_reference", "string", ("CONNACK", "DISCONNECT")),
    _property(0x1F, "reason_string", "string",
              ("CONNACK", *_ACKS, "SUBACK", "UNSUBACK", "DISCONNECT", "AUTH")),
    _property(0x21, "receive_maximum", "u16", ("CONNECT", "CONNACK"), nonzero=True),
    _property(0x22, "topic_alias_maximum", "u16", ("CONNECT", "CONNACK")),
    _property(0x23, "topic_alias", "u16", ("PUBLISH",), nonzero=True),
    _property(0x24, "maximum_qos", "byte", ("CONNACK",), yes_or_no=True),
    _property(0x25, "retain_available", "byte", ("CONNACK",), yes_or_no=True),
    _property(0x26, "user_property", "pair",
              ("CONNECT", "CONNACK", *_MESSAGE, *_ACKS, "SUBSCRIBE", "SUBACK",
               "UNSUBSCRIBE", "UNSUBACK", "DISCONNECT", "AUTH"),
              repeats_in=frozenset({"CONNECT", "CONNACK", *_MESSAGE, *_ACKS, "SUBSCRIBE",
                                    "SUBACK", "UNSUBSCRIBE", "UNSUBACK", "DISCONNECT",
                                    "AUTH"})),
    _property(0x27, "maximum_packet_size", "u32", ("CONNECT", "CONNACK"), nonzero=True),
    _property(0x28, "wildcard_subscription_available", "byte", ("CONNACK",),
              yes_or_no=True),
    _property(0x29, "subscription_identifier_available", "byte", ("CONNACK",),
              yes_or_no=True),
    _property(0x2A, "shared_subscription_available", "byte", ("CONNACK",),
              yes_or_no=True),
)
BY_IDENTIFIER = {prop.identifier: prop for prop in PROPERTIES}
BY_NAME = {prop.name: prop for prop in PROPERTIES}
#: The properties that are tuples of values (module docstring).
REPEATABLE = frozenset(prop.name for prop in PROPERTIES if prop.repeats_in)

_READERS = {
    "byte": lambda cursor, what: cursor.byte(what),
    "u16": Cursor.u16,
    "u32": Cursor.u32,
    "varint": Cursor.variable_integer,
    "string": Cursor.string,
    "binary": Cursor.binary,
    "pair": Cursor.string_pair,
}
_WRITERS = {
    "byte": lambda value: bytes((value,)),
    "u16": write_u16,
    "u32": write_u32,
    "varint": write_variable_integer,
    "string": write_string,
    "binary": write_binary,
    "pair": write_string_pair,
}


def read_properties(cursor: Cursor, packet: str) -> dict:
    """
    The properties at C{cursor}, in packet C{packet} (C{"CONNECT"},
    C{"WILL"}, ...): their length, then each as identifier and value.

    @raise MalformedPacket: as the module docstring says.
    """
    length = cursor.variable_integer(f"{packet} property length")
    inner = Cursor(cursor.take(length, f"{packet} properties"))
    found: dict = {}
    while not inner.at_end():
        identifier = inner.variable_integer("property identifier")
        prop = BY_IDENTIFIER.get(identifier)
        if prop is None:
            raise malformed(f"unknown property identifier 0x{identifier:02X} in {packet}")
        if packet not in prop.packets:
            raise protocol_error(f"{prop.name} is not a property of {packet}")
        value = _READERS[prop.kind](inner, prop.name)
        _check_value(prop, value)
        if prop.repeats_in:
            if prop.name in found and packet not in prop.repeats_in:
                raise protocol_error(f"{prop.name} appears twice in {packet}")
            found[prop.name] = found.get(prop.name, ()) + (value,)
        elif prop.name in found:
            raise protocol_error(f"{prop.name} appears twice in {packet}")
        else:
            found[prop.name] = value
    return found


def _check_value(prop: Property, value) -> None:
    if prop.yes_or_no and value > 1:
        raise protocol_error(f"{prop.name} is 0 or 1, not {value}")
    if prop.nonzero and value == 0:
        raise protocol_error(f"{prop.name} cannot be 0")


def write_properties(properties: Mapping, packet: str) -> bytes:
    """
    C{properties} written for packet C{packet}: their length, then each.

    @raise ValueError: for a name that is no property of C{packet}, or a
        value out of its type's range.
    """
    body = bytearray()
    for name in sorted(properties, key=_identifier_of):
        prop = BY_NAME[name]
        if packet not in prop.packets:
            raise ValueError(f"{name} is not a property of {packet}")
        values = properties[name]
        if prop.repeats_in:
            if len(values) > 1 and packet not in prop.repeats_in:
                raise ValueError(f"{name} appears at most once in {packet}")
        else:
            values = (values,)
        for value in values:
            _check_range(prop, value)
            body += bytes((prop.identifier,)) + _WRITERS[prop.kind](value)
    return write_variable_integer(len(body)) + bytes(body)


def _identifier_of(name: str) -> int:
    prop = BY_NAME.get(name)
    if prop is None:
        raise ValueError(f"{name!r} is not an MQTT 5.0 property")
    return prop.identifier


_RANGES = {"byte": 0xFF, "u16": 0xFFFF, "u32": 0xFFFF_FFFF, "varint": MAX_VARIABLE_INTEGER}


def _check_range(prop: Property, value) -> None:
    top = 1 if prop.yes_or_no else _RANGES.get(prop.kind)
    if top is not None and not (1 if prop.nonzero else 0) <= value <= top:
        raise ValueError(f"{prop.name} cannot be {value}")
