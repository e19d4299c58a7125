"""
Each rule of the MQTT 3.1.1 and 5.0 specifications the packet reader
enforces, with the reason code it answers; and what the encoder writes
for each version.
"""

import pytest

from meshroute.mqtt.fields import write_string, write_variable_integer
from meshroute.mqtt.packets import (
    MQTT_3_1,
    MQTT_3_1_1,
    MQTT_5,
    Auth,
    Connack,
    Connect,
    Disconnect,
    MalformedPacket,
    PacketReader,
    Pingreq,
    Puback,
    Pubrel,
    Publish,
    ReasonCode,
    Suback,
    Subscribe,
    SubscriptionRequest,
    Unsuback,
    Unsubscribe,
    Will,
    encode,
)

R = ReasonCode


def raw(first: int, body: bytes) -> bytes:
    """A packet of fixed header byte C{first} and body C{body}."""
    return bytes((first,)) + write_variable_integer(len(body)) + body


def connected(level: int) -> PacketReader:
    reader = PacketReader(1 << 20)
    assert reader.feed(encode(Connect(level, "c", True, 30), level))
    return reader


def refusal(data: bytes, level: int | None = MQTT_5, reader=None) -> MalformedPacket:
    """The error reading C{data} raises, after a CONNECT of C{level}."""
    reader = reader or (connected(level) if level else PacketReader(1 << 20))
    with pytest.raises(MalformedPacket) as raised:
        reader.feed(data)
    return raised.value


def read(data: bytes, level: int = MQTT_5):
    [packet] = connected(level).feed(data)
    return packet


# -- the fixed header -------------------------------------------------------------


@pytest.mark.parametrize("first", [0x00, 0x01])
def test_packet_type_0_is_reserved(first):
    assert refusal(raw(first, b""), None).reason_code == R.MALFORMED_PACKET


def test_auth_is_reserved_in_3_1_1():
    assert refusal(raw(0xF0, b""), MQTT_3_1_1).reason_code == R.MALFORMED_PACKET


@pytest.mark.parametrize("first", [
    0x13,  # CONNECT
    0x41, 0x48,  # PUBACK
    0x60, 0x62 | 0x08,  # PUBREL must be 0b0010
    0x80, 0x83,  # SUBSCRIBE must be 0b0010
    0xA0,  # UNSUBSCRIBE must be 0b0010
    0xC1,  # PINGREQ
    0xE2,  # DISCONNECT
])
def test_reserved_flags_are_malformed(first):
    data = raw(first, b"\x00\x01") if first >> 4 != 1 else raw(first, b"")
    level = None if first >> 4 == 1 else MQTT_5
    failure = refusal(data, level)
    assert failure.reason_code == R.MALFORMED_PACKET
    assert "reserved flags" in failure.reason


def test_the_first_packet_of_a_client_is_connect():
    failure = refusal(encode(Pingreq(), MQTT_5), None)
    assert failure.reason_code == R.PROTOCOL_ERROR
    assert "first packet" in failure.reason


def test_a_second_connect_is_a_protocol_error():
    failure = refusal(encode(Connect(MQTT_5, "c", True, 30), MQTT_5))
    assert failure.reason_code == R.PROTOCOL_ERROR


@pytest.mark.parametrize("packet", [Connack(False, 0), Suback(1, (0,)), Unsuback(1)])
def test_a_client_does_not_send_what_a_server_does(packet):
    assert refusal(encode(packet, MQTT_5)).reason_code == R.PROTOCOL_ERROR


def test_a_server_does_not_send_what_a_client_does():
    reader = PacketReader(1000, protocol_level=MQTT_5, peer="server")
    data = encode(Subscribe(1, (SubscriptionRequest("a", 0),)), MQTT_5)
    assert refusal(data, reader=reader).reason_code == R.PROTOCOL_ERROR


def test_a_reader_of_a_server_is_told_the_level():
    with pytest.raises(ValueError):
        PacketReader(1000, peer="server")


def test_a_remaining_length_in_more_bytes_than_it_needs_is_malformed():
    failure = refusal(b"\xc0\x80\x00")
    assert failure.reason_code == R.MALFORMED_PACKET
    assert "fewest bytes" in failure.reason


def test_bytes_after_the_end_of_a_packet_are_malformed():
    assert refusal(raw(0xC0, b"\x00")).reason_code == R.MALFORMED_PACKET
    assert refusal(raw(0x40, b"\x00\x01\x00"), MQTT_3_1_1).reason_code == R.MALFORMED_PACKET


def test_a_packet_ending_inside_a_field_is_malformed():
    failure = refusal(raw(0x30, b"\x00\x05ab"))
    assert failure.reason_code == R.MALFORMED_PACKET
    assert "ends inside its topic name" in failure.reason


# -- CONNECT --------------------------------------------------------------------------


def connect_bytes(flags: int, level: int = MQTT_5, name: str = "MQTT", rest: bytes = b"") -> bytes:
    properties = b"\x00" if level == MQTT_5 else b""
    return raw(0x10, write_string(name) + bytes((level, flags)) + b"\x00\x1e" + properties
               + write_string("c") + rest)


def test_mqtt_3_1_is_refused_as_an_unsupported_version_of_its_level():
    data = encode(Connect(MQTT_3_1, "c", True, 30), MQTT_3_1)
    assert data[2:10] == b"\x00\x06MQIsdp"
    failure = refusal(data, None)
    assert failure.reason_code == R.UNSUPPORTED_PROTOCOL_VERSION
    assert failure.protocol_level == MQTT_3_1


@pytest.mark.parametrize("name, level", [("MQTT", 6), ("MQTT", 3), ("MQIsdp", 4), ("HTTP", 4)])
def test_other_protocols_and_levels_are_unsupported_versions(name, level):
    body = write_string(name) + bytes((level, 0x02)) + b"\x00\x1e" + write_string("c")
    failure = refusal(raw(0x10, body), None)
    assert failure.reason_code == R.UNSUPPORTED_PROTOCOL_VERSION
    assert failure.protocol_level == level


def test_the_reserved_connect_flag_is_malformed():
    assert refusal(connect_bytes(0x03), None).reason_code == R.MALFORMED_PACKET


@pytest.mark.parametrize("flags", [0x08, 0x10, 0x20])
def test_a_will_qos_or_retain_without_a_will_is_malformed(flags):
    assert refusal(connect_bytes(0x02 | flags), None).reason_code == R.MALFORMED_PACKET


def test_a_will_of_qos_3_is_malformed():
    data = connect_bytes(0x1E, rest=b"\x00" + write_string("w") + b"\x00\x00")
    assert refusal(data, None).reason_code == R.MALFORMED_PACKET


def test_a_password_without_a_user_name_is_malformed_in_3_1_1_only():
    data = encode(Connect(MQTT_3_1_1, "c", True, 30, password=b"secret"), MQTT_3_1_1)
    assert refusal(data, None).reason_code == R.MALFORMED_PACKET
    connect = Connect(MQTT_5, "c", True, 30, password=b"secret")
    assert PacketReader(1000).feed(encode(connect, MQTT_5)) == [connect]


def test_a_will_topic_with_a_wildcard_is_an_invalid_topic_name():
    data = encode(Connect(MQTT_3_1_1, "c", True, 30, will=Will("a/#", b"", 0, False)), MQTT_3_1_1)
    assert refusal(data, None).reason_code == R.TOPIC_NAME_INVALID


def test_authentication_data_without_a_method_is_a_protocol_error():
    connect = Connect(MQTT_5, "c", True, 30, properties={"authentication_data": b"x"})
    assert refusal(encode(connect, MQTT_5), None).reason_code == R.PROTOCOL_ERROR


def test_an_empty_client_id_and_a_zero_keep_alive_are_allowed():
    connect = Connect(MQTT_3_1_1, "", False, 0)
    assert PacketReader(1000).feed(encode(connect, MQTT_3_1_1)) == [connect]


@pytest.mark.parametrize("client_id, why", [
    (b"\xff", "not well-formed UTF-8"),
    (b"\xed\xa0\x80", "not well-formed UTF-8"),  # a surrogate, U+D800
    (b"\xc0\x80", "not well-formed UTF-8"),  # an overlong U+0000
    (b"a\x00b", "contains U+0000"),
])
def test_strings_are_well_formed_utf_8_without_nul(client_id, why):
    body = (write_string("MQTT") + bytes((4, 0x02)) + b"\x00\x1e"
            + len(client_id).to_bytes(2, "big") + client_id)
    failure = refusal(raw(0x10, body), None)
    assert failure.reason_code == R.MALFORMED_PACKET
    assert why in failure.reason


# -- PUBLISH --------------------------------------------------------------------------


def test_publish_of_qos_3_is_malformed():
    assert refusal(raw(0x36, write_string("t") + b"\x00\x01\x00")).reason_code == R.MALFORMED_PACKET


def test_dup_on_qos_0_is_malformed():
    assert refusal(raw(0x38, write_string("t") + b"\x00")).reason_code == R.MALFORMED_PACKET


@pytest.mark.parametrize("topic", ["a/+", "#", "a/b#", "+"])
def test_a_wildcard_in_a_publish_topic_is_an_invalid_topic_name(topic):
    data = raw(0x30, write_string(topic))
    assert refusal(data, MQTT_3_1_1).reason_code == R.TOPIC_NAME_INVALID


def test_an_empty_topic_is_invalid_in_3_1_1():
    assert refusal(raw(0x30, write_string("")), MQTT_3_1_1).reason_code == R.TOPIC_NAME_INVALID


def test_an_empty_topic_stands_for_a_topic_alias_in_5_0():
    publish = Publish("", b"x", 0, properties={"topic_alias": 3})
    assert read(encode(publish, MQTT_5)) == publish
    failure = refusal(raw(0x30, write_string("") + b"\x00x"))
    assert failure.reason_code == R.PROTOCOL_ERROR


@pytest.mark.parametrize("first", [0x32, 0x34])
def test_a_publish_of_qos_1_or_2_has_a_nonzero_packet_id(first):
    failure = refusal(raw(first, write_string("t") + b"\x00\x00\x00"))
    assert failure.reason_code == R.PROTOCOL_ERROR


def test_a_client_does_not_send_a_subscription_identifier():
    publish = Publish("t", b"", 0, properties={"subscription_identifier": (1,)})
    assert refusal(encode(publish, MQTT_5)).reason_code == R.PROTOCOL_ERROR
    reader = PacketReader(1000, protocol_level=MQTT_5, peer="server")
    publish = Publish("t", b"", 0, properties={"subscription_identifier": (1, 7)})
    assert reader.feed(encode(publish, MQTT_5)) == [publish]


def test_a_response_topic_has_no_wildcard():
    publish = Publish("t", b"", 0, properties={"response_topic": "replies/#"})
    assert refusal(encode(publish, MQTT_5)).reason_code == R.PROTOCOL_ERROR


def test_an_empty_payload_and_a_retained_publish_are_read():
    publish = Publish("a/b", b"", 1, retain=True, dup=True, packet_id=9)
    assert read(encode(publish, MQTT_3_1_1), MQTT_3_1_1) == publish


# -- acknowledgements -----------------------------------------------------------------


def test_an_acknowledgement_of_packet_id_0_is_a_protocol_error():
    assert refusal(raw(0x40, b"\x00\x00")).reason_code == R.PROTOCOL_ERROR


def test_a_5_0_acknowledgement_may_leave_out_its_reason_code_and_properties():
    assert read(raw(0x40, b"\x00\x07")) == Puback(7)
    assert read(raw(0x40, b"\x00\x07\x10")) == Puback(7, R.NO_MATCHING_SUBSCRIBERS)
    assert encode(Puback(7), MQTT_5) == b"\x40\x02\x00\x07"
    assert encode(Puback(7, 0x10), MQTT_5) == b"\x40\x03\x00\x07\x10"


def test_a_reason_code_an_acknowledgement_does_not_have_is_a_protocol_error():
    assert refusal(raw(0x40, b"\x00\x07\x8f")).reason_code == R.PROTOCOL_ERROR
    assert refusal(raw(0x62, b"\x00\x07\x10")).reason_code == R.PROTOCOL_ERROR


def test_a_5_0_disconnect_may_carry_its_reason_code_alone():
    assert read(raw(0xE0, b"\x04")) == Disconnect(R.DISCONNECT_WITH_WILL_MESSAGE)
    assert refusal(raw(0xE0, b"\x10")).reason_code == R.PROTOCOL_ERROR
    assert refusal(raw(0xE0, b"\x04"), MQTT_3_1_1).reason_code == R.MALFORMED_PACKET


# -- SUBSCRIBE and UNSUBSCRIBE -------------------------------------------------------


def subscribe_bytes(filters_and_options: bytes, level: int = MQTT_5) -> bytes:
    return raw(0x82, b"\x00\x01" + (b"\x00" if level == MQTT_5 else b"") + filters_and_options)


@pytest.mark.parametrize("topic_filter", ["a/#/b", "a+", "#a", "a/b#", "+a/b", "", "$share/g",
                                          "$share//a", "$share/g+/a", "$share/g/a/#/b"])
def test_malformed_topic_filters_are_invalid(topic_filter):
    failure = refusal(subscribe_bytes(write_string(topic_filter) + b"\x00"))
    assert failure.reason_code == R.TOPIC_FILTER_INVALID
    failure = refusal(raw(0xA2, b"\x00\x01" + write_string(topic_filter)), MQTT_3_1_1)
    assert failure.reason_code == R.TOPIC_FILTER_INVALID


@pytest.mark.parametrize("topic_filter", ["#", "+", "a/+/b", "a/#", "+/+", "/", "a//b", "$SYS/#",
                                          "$share/g/a/+", "$share/g/#"])
def test_well_formed_topic_filters_are_read(topic_filter):
    subscribe = Subscribe(1, (SubscriptionRequest(topic_filter, 1),))
    assert read(encode(subscribe, MQTT_3_1_1), MQTT_3_1_1) == subscribe


def test_a_subscribe_or_unsubscribe_without_a_filter_is_a_protocol_error():
    assert refusal(subscribe_bytes(b"")).reason_code == R.PROTOCOL_ERROR
    assert refusal(raw(0xA2, b"\x00\x01"), MQTT_3_1_1).reason_code == R.PROTOCOL_ERROR


def test_a_subscribe_of_packet_id_0_is_a_protocol_error():
    data = raw(0x82, b"\x00\x00" + write_string("a") + b"\x00")
    assert refusal(data, MQTT_3_1_1).reason_code == R.PROTOCOL_ERROR


@pytest.mark.parametrize("level, options", [
    (MQTT_3_1_1, 0x04), (MQTT_3_1_1, 0x80), (MQTT_5, 0x40), (MQTT_5, 0x80), (MQTT_5, 0x03),
    (MQTT_3_1_1, 0x03),
])
def test_reserved_subscription_options_and_qos_3_are_malformed(level, options):
    data = subscribe_bytes(write_string("a") + bytes((options,)), level)
    assert refusal(data, level).reason_code == R.MALFORMED_PACKET


def test_retain_handling_3_is_a_protocol_error():
    assert refusal(subscribe_bytes(write_string("a") + b"\x30")).reason_code == R.PROTOCOL_ERROR


def test_no_local_on_a_shared_subscription_is_a_protocol_error():
    data = subscribe_bytes(write_string("$share/g/a") + b"\x04")
    assert refusal(data).reason_code == R.PROTOCOL_ERROR


def test_the_5_0_subscription_options_are_read():
    [request] = read(subscribe_bytes(write_string("a") + b"\x2e")).requests
    assert request == SubscriptionRequest("a", 2, no_local=True, retain_as_published=True,
                                          retain_handling=2)


def test_an_unsubscribe_is_read():
    unsubscribe = Unsubscribe(5, ("a/+", "b/#"), {"user_property": (("k", "v"),)})
    assert read(encode(unsubscribe, MQTT_5)) == unsubscribe


# -- what a server sends, read by a client -------------------------------------------


def server_reader(level: int) -> PacketReader:
    return PacketReader(1000, protocol_level=level, peer="server")


def test_a_3_1_1_connack_return_code_is_read_as_its_reason_code():
    [connack] = server_reader(MQTT_3_1_1).feed(b"\x20\x02\x00\x04")
    assert connack == Connack(False, R.BAD_USER_NAME_OR_PASSWORD)


@pytest.mark.parametrize("data", [b"\x20\x02\x02\x00", b"\x20\x02\x00\x06"])
def test_reserved_connack_flags_and_return_codes_are_malformed(data):
    failure = refusal(data, reader=server_reader(MQTT_3_1_1))
    assert failure.reason_code == R.MALFORMED_PACKET


def test_a_3_1_1_suback_has_granted_qos_or_failure():
    [suback] = server_reader(MQTT_3_1_1).feed(b"\x90\x04\x00\x01\x01\x80")
    assert suback == Suback(1, (1, 0x80))
    failure = refusal(b"\x90\x03\x00\x01\x03", reader=server_reader(MQTT_3_1_1))
    assert failure.reason_code == R.MALFORMED_PACKET


# -- 5.0 properties -------------------------------------------------------------------


def publish_with_properties(properties: bytes) -> bytes:
    return raw(0x30, write_string("t") + write_variable_integer(len(properties)) + properties)


def test_user_properties_repeat_in_order():
    properties = (b"\x26" + write_string("a") + write_string("1")
                  + b"\x26" + write_string("b") + write_string("2")
                  + b"\x26" + write_string("a") + write_string("3"))
    publish = read(publish_with_properties(properties))
    assert publish.properties == {"user_property": (("a", "1"), ("b", "2"), ("a", "3"))}
    assert encode(publish, MQTT_5) == publish_with_properties(properties)


def test_an_unknown_property_is_malformed():
    failure = refusal(publish_with_properties(b"\x05\x00"))
    assert failure.reason_code == R.MALFORMED_PACKET
    assert "0x05" in failure.reason


def test_a_property_in_a_packet_it_does_not_belong_to_is_a_protocol_error():
    failure = refusal(publish_with_properties(b"\x11\x00\x00\x00\x01"))
    assert failure.reason_code == R.PROTOCOL_ERROR
    assert "session_expiry_interval is not a property of PUBLISH" in failure.reason


def test_a_property_twice_is_a_protocol_error():
    failure = refusal(publish_with_properties(b"\x02\x00\x00\x00\x01\x02\x00\x00\x00\x02"))
    assert failure.reason_code == R.PROTOCOL_ERROR
    assert "twice" in failure.reason


def test_a_subscription_identifier_appears_once_in_a_subscribe():
    properties = b"\x0b\x01\x0b\x02"
    data = raw(0x82, b"\x00\x01" + bytes((len(properties),)) + properties + write_string("a") + b"\x00")
    assert refusal(data).reason_code == R.PROTOCOL_ERROR


@pytest.mark.parametrize("properties", [
    b"\x23\x00\x00",  # topic alias 0
    b"\x01\x02",  # payload format indicator 2
    b"\x0b\x00",  # subscription identifier 0 (in a PUBLISH a client sends: refused anyway)
])
def test_values_the_spec_rules_out_are_protocol_errors(properties):
    assert refusal(publish_with_properties(properties)).reason_code == R.PROTOCOL_ERROR


@pytest.mark.parametrize("name, value", [
    ("receive_maximum", 0), ("maximum_packet_size", 0), ("request_problem_information", 2),
])
def test_connect_values_the_spec_rules_out_are_protocol_errors(name, value):
    good = encode(Connect(MQTT_5, "c", True, 30, properties={name: 1}), MQTT_5)
    width = {"receive_maximum": 2, "maximum_packet_size": 4}.get(name, 1)
    bad = good.replace(b"\x01".rjust(width, b"\x00"), value.to_bytes(width, "big"), 1)
    failure = refusal(bad, None)
    assert failure.reason_code == R.PROTOCOL_ERROR
    assert name in failure.reason


def test_properties_running_past_their_length_are_malformed():
    assert refusal(publish_with_properties(b"\x02\x00\x00")).reason_code == R.MALFORMED_PACKET


def test_every_5_0_connect_property_is_read():
    properties = {
        "session_expiry_interval": 3600, "receive_maximum": 20, "maximum_packet_size": 1 << 20,
        "topic_alias_maximum": 10, "request_response_information": 1,
        "request_problem_information": 0, "user_property": (("site", "lab"),),
        "authentication_method": "SCRAM-SHA-256", "authentication_data": b"n,,n=user",
    }
    will = Will("last/will", b"gone", 1, True, {
        "will_delay_interval": 5, "payload_format_indicator": 1, "message_expiry_interval": 60,
        "content_type": "text/plain", "response_topic": "r", "correlation_data": b"\x01",
        "user_property": (("a", "b"),)})
    connect = Connect(MQTT_5, "device-1", False, 60, "user", b"pw", will, properties)
    assert PacketReader(1000).feed(encode(connect, MQTT_5)) == [connect]


# -- the encoder ----------------------------------------------------------------------


@pytest.mark.parametrize("reason_code, return_code", [
    (R.SUCCESS, 0), (R.UNSUPPORTED_PROTOCOL_VERSION, 1), (R.CLIENT_IDENTIFIER_NOT_VALID, 2),
    (R.SERVER_UNAVAILABLE, 3), (R.SERVER_BUSY, 3), (R.BAD_USER_NAME_OR_PASSWORD, 4),
    (R.NOT_AUTHORIZED, 5), (R.MALFORMED_PACKET, 5), (R.BAD_AUTHENTICATION_METHOD, 5),
])
def test_a_3_1_1_connack_carries_the_return_code_of_its_reason_code(reason_code, return_code):
    assert encode(Connack(False, reason_code), MQTT_3_1_1) == bytes((0x20, 2, 0, return_code))


def test_a_3_1_1_suback_writes_every_failure_as_0x80():
    suback = Suback(3, (R.GRANTED_QOS_1, R.NOT_AUTHORIZED, R.TOPIC_FILTER_INVALID))
    assert encode(suback, MQTT_3_1_1) == b"\x90\x05\x00\x03\x01\x80\x80"


def test_3_1_1_acknowledgements_carry_no_reason_code_or_properties():
    assert encode(Puback(1, R.QUOTA_EXCEEDED, {"reason_string": "full"}), MQTT_3_1_1) \
        == b"\x40\x02\x00\x01"
    assert encode(Unsuback(1, (0,)), MQTT_3_1_1) == b"\xb0\x02\x00\x01"
    assert encode(Disconnect(R.SERVER_SHUTTING_DOWN), MQTT_3_1_1) == b"\xe0\x00"


@pytest.mark.parametrize("packet, written", [
    (Puback(1, R.TOPIC_FILTER_INVALID), b"\x40\x03\x00\x01\x80"),
    (Suback(1, (R.GRANTED_QOS_1, R.RECEIVE_MAXIMUM_EXCEEDED)), b"\x90\x05\x00\x01\x00\x01\x80"),
    (Connack(False, R.SESSION_TAKEN_OVER), b"\x20\x03\x00\x80\x00"),
    (Disconnect(R.UNSUPPORTED_PROTOCOL_VERSION), b"\xe0\x02\x80\x00"),
])
def test_a_failure_a_5_0_packet_has_no_code_for_is_written_unspecified(packet, written):
    assert encode(packet, MQTT_5) == written


def test_an_empty_5_0_disconnect_or_auth_is_two_bytes():
    assert encode(Disconnect(), MQTT_5) == b"\xe0\x00"
    assert encode(Auth(), MQTT_5) == b"\xf0\x00"
    assert encode(Disconnect(R.SESSION_TAKEN_OVER), MQTT_5) == b"\xe0\x02\x8e\x00"


@pytest.mark.parametrize("packet, level", [
    (Auth(), MQTT_3_1_1),
    (Publish("t", b"", 1), MQTT_5),
    (Publish("t", b"", 0, packet_id=1), MQTT_5),
    (Publish("t", b"", 3, packet_id=1), MQTT_5),
    (Puback(1, 0, {"topic_alias": 1}), MQTT_5),
    (Publish("t", b"", 0, properties={"no_such_property": 1}), MQTT_5),
    (Publish("t", b"", 0, properties={"topic_alias": 0}), MQTT_5),
    (Connack(False, 0, {"maximum_qos": 2}), MQTT_5),
    (Suback(1, (0,), {"subscription_identifier": (1, 2)}), MQTT_5),
    (Publish("a\0b", b"", 0), MQTT_5),
    (Suback(1, (R.NO_MATCHING_SUBSCRIBERS,)), MQTT_3_1_1),
    (Disconnect(R.CONTINUE_AUTHENTICATION), MQTT_5),
    (Pubrel(1, R.UNSPECIFIED_ERROR), MQTT_5),
    (Auth(R.NOT_AUTHORIZED), MQTT_5),
    (Publish("t", b"", 0), MQTT_3_1),
    (Connect(MQTT_5, "c", True, 30), MQTT_3_1_1),
])
def test_the_encoder_refuses_what_the_level_cannot_carry(packet, level):
    with pytest.raises(ValueError):
        encode(packet, level)
