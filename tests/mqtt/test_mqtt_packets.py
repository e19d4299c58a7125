"""
The MQTT packet reader and encoder as a whole: every packet of both
versions round trips through any split of its bytes, arbitrary bytes
raise nothing but MalformedPacket, and the remaining length's edge
cases (the rules one by one: test_mqtt_packet_rules.py).
"""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from meshroute.mqtt.fields import read_variable_integer, write_variable_integer
from meshroute.mqtt.packets import (
    MQTT_3_1_1,
    MQTT_5,
    Connect,
    MalformedPacket,
    PacketReader,
    Publish,
    ReasonCode,
    encode,
)
from support.mqtt_strategies import client_packets, connects, server_packets

FUZZ = settings(max_examples=300, deadline=None)
#: Fewer examples of whole streams: each is up to seven packets.
STREAMS = settings(max_examples=120, deadline=None)
# Hypothesis draws the level: under pytest-twisted, the second case of a
# parametrized hypothesis test fails in its greenlet.
levels = st.sampled_from((MQTT_3_1_1, MQTT_5))
BIG = 1 << 29


def chunks(data: bytes, cuts: list[int]) -> list[bytes]:
    """C{data} cut at C{cuts} (positions, any order, repeats allowed)."""
    points = sorted({0, len(data), *(cut % (len(data) + 1) for cut in cuts)})
    return [data[a:b] for a, b in zip(points, points[1:])]


def read_all(reader: PacketReader, pieces) -> list:
    packets = []
    for piece in pieces:
        packets += reader.feed(piece)
    return packets


@STREAMS
@given(level=levels, data=st.data())
def test_what_a_client_sends_round_trips_through_any_split(level, data):
    connect = data.draw(connects(level))
    packets = data.draw(st.lists(client_packets(level), max_size=6))
    stream = b"".join(encode(packet, level) for packet in [connect, *packets])
    cuts = data.draw(st.lists(st.integers(0, len(stream)), max_size=8))
    reader = PacketReader(BIG)
    assert read_all(reader, chunks(stream, cuts)) == [connect, *packets]
    assert reader.protocol_level == level


@STREAMS
@given(level=levels, data=st.data())
def test_what_a_server_sends_round_trips_through_any_split(level, data):
    packets = data.draw(st.lists(server_packets(level), min_size=1, max_size=6))
    stream = b"".join(encode(packet, level) for packet in packets)
    cuts = data.draw(st.lists(st.integers(0, len(stream)), max_size=8))
    reader = PacketReader(BIG, protocol_level=level, peer="server")
    assert read_all(reader, chunks(stream, cuts)) == packets


def _fresh(level):
    return PacketReader(4096)


def _connected(level):
    reader = PacketReader(4096)
    reader.feed(encode(Connect(level, "fuzz", True, 30), level))
    return reader


def _client_of(level):
    return PacketReader(4096, protocol_level=level, peer="server")


@FUZZ
@given(level=levels, reader_of=st.sampled_from([_fresh, _connected, _client_of]),
       data=st.binary(max_size=300))
def test_arbitrary_bytes_raise_nothing_but_malformed_packet(level, reader_of, data):
    reader = reader_of(level)
    try:
        reader.feed(data)
    except MalformedPacket as failure:
        assert isinstance(failure.reason, str)
        assert failure.reason_code >= 0x80


@STREAMS
@given(level=levels, data=st.data())
def test_damaged_packets_raise_nothing_but_malformed_packet(level, data):
    """Valid packets with bytes changed reach deeper than random bytes do."""
    packets = data.draw(st.lists(client_packets(level), min_size=1, max_size=3))
    stream = bytearray(b"".join(encode(packet, level) for packet in packets))
    for _ in range(data.draw(st.integers(1, 4))):
        stream[data.draw(st.integers(0, len(stream) - 1))] = data.draw(st.integers(0, 255))
    reader = _connected(level)
    try:
        reader.feed(bytes(stream))
    except MalformedPacket:
        pass


@pytest.mark.parametrize("length, size", [
    (0, 1), (127, 1), (128, 2), (16383, 2), (16384, 3), (2097151, 3), (2097152, 4),
    (268435455, 4),
])
def test_remaining_lengths_at_each_edge(length, size):
    written = write_variable_integer(length)
    assert len(written) == size
    assert read_variable_integer(written, 0, "remaining length") == (length, size)


@given(st.integers(0, 268_435_455))
def test_every_remaining_length_round_trips_in_its_fewest_bytes(length):
    written = write_variable_integer(length)
    assert read_variable_integer(written, 0, "remaining length") == (length, len(written))
    assert len(written) == 1 + (length >= 128) + (length >= 16384) + (length >= 2097152)
    if length < 2097152:  # the same value in one byte more is refused
        longer = written[:-1] + bytes((written[-1] | 0x80, 0))
        with pytest.raises(MalformedPacket):
            read_variable_integer(longer, 0, "remaining length")


@pytest.mark.parametrize("length", [0, 127, 128, 16383, 16384, 2097151, 2097152])
def test_a_publish_of_each_edge_length_is_read_however_it_arrives(length):
    # A topic of one character: 3 bytes of topic name, 2 of packet id.
    publish = Publish("t", b"p" * (length - 5), 1, packet_id=1) if length >= 5 else None
    reader = PacketReader(BIG, protocol_level=MQTT_3_1_1, peer="server")
    if publish is None:
        raw = bytes((0x32,)) + write_variable_integer(length) + b"\0" * length
        with pytest.raises(MalformedPacket):
            reader.feed(raw)
        return
    raw = encode(publish, MQTT_3_1_1)
    assert len(raw) == 1 + len(write_variable_integer(length)) + length
    assert reader.feed(raw[:-1]) == []
    assert reader.feed(raw[-1:]) == [publish]


def test_pending_counts_the_bytes_of_the_packet_not_yet_complete():
    raw = encode(Publish("t", b"p" * 20, 1, packet_id=1), MQTT_3_1_1)
    reader = PacketReader(BIG, protocol_level=MQTT_3_1_1, peer="server")
    assert reader.feed(raw + raw[:7]) != []
    assert reader.pending == 7
    assert len(reader.feed(raw[7:])) == 1
    assert reader.pending == 0


def test_the_largest_remaining_length_is_taken_and_waited_for_when_allowed():
    reader = PacketReader(BIG, protocol_level=MQTT_5, peer="server")
    assert reader.feed(b"\x30\xff\xff\xff\x7f" + b"\0\x01t") == []


def test_the_largest_remaining_length_is_refused_from_its_header_past_the_maximum():
    reader = PacketReader(1 << 20, protocol_level=MQTT_5, peer="server")
    with pytest.raises(MalformedPacket) as raised:
        reader.feed(b"\x30\xff\xff\xff\x7f")
    assert raised.value.reason_code == ReasonCode.PACKET_TOO_LARGE


def test_a_fifth_byte_of_remaining_length_is_malformed():
    reader = PacketReader(BIG, protocol_level=MQTT_5, peer="server")
    with pytest.raises(MalformedPacket) as raised:
        reader.feed(b"\x30\xff\xff\xff\xff\x01")
    assert raised.value.reason_code == ReasonCode.MALFORMED_PACKET


def test_four_continued_bytes_of_remaining_length_are_malformed_before_the_fifth_arrives():
    reader = PacketReader(BIG, protocol_level=MQTT_5, peer="server")
    with pytest.raises(MalformedPacket):
        reader.feed(b"\x30\x80\x80\x80\x80")


def test_an_incomplete_remaining_length_waits_for_its_next_byte():
    reader = PacketReader(BIG, protocol_level=MQTT_3_1_1, peer="server")
    assert reader.feed(b"\x30\x85") == []
    assert reader.feed(b"\x01") == []
    assert reader.feed(b"\x00\x01t" + b"x" * 130) == [Publish("t", b"x" * 130, 0)]


def test_a_packet_over_the_maximum_is_refused_before_its_body_arrives():
    reader = PacketReader(100)
    with pytest.raises(MalformedPacket) as raised:
        reader.feed(b"\x10\x63")  # a CONNECT of 2 + 99 bytes
    assert raised.value.reason_code == ReasonCode.PACKET_TOO_LARGE
    assert "101 bytes" in raised.value.reason


def test_a_packet_of_exactly_the_maximum_is_taken():
    connect = encode(Connect(MQTT_5, "c" * 20, True, 10), MQTT_5)
    assert PacketReader(len(connect)).feed(connect)
    with pytest.raises(MalformedPacket):
        PacketReader(len(connect) - 1).feed(connect)


def test_after_an_error_the_reader_refuses_everything_with_it():
    reader = PacketReader(100)
    with pytest.raises(MalformedPacket) as first:
        reader.feed(b"\x00\x00")
    with pytest.raises(MalformedPacket) as again:
        reader.feed(encode(Connect(MQTT_5, "c", True, 10), MQTT_5))
    assert again.value is first.value


def test_packets_in_one_chunk_are_all_read_in_order():
    level = MQTT_5
    packets = [Connect(level, "a", True, 5), *(Publish("t", bytes([i]), 0) for i in range(50))]
    assert PacketReader(1000).feed(b"".join(encode(p, level) for p in packets)) == packets
