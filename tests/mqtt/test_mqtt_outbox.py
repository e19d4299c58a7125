"""
Tests for L{meshroute.mqtt.outbox}: packet ids and the receive maximum.
"""

from meshroute.mqtt.outbox import MAX_PACKET_ID, InFlight, Outbox


def make(packet_id: int) -> int:
    return packet_id


def test_no_more_than_the_receive_maximum_are_in_flight_the_rest_wait_in_order():
    outbox = Outbox(receive_maximum=2)
    assert [outbox.offer(InFlight(d, 1), make) for d in (1, 2, 3, 4)] == [1, 2, None, None]
    delivery, released = outbox.acked(1)
    assert delivery.delivery_id == 1 and released == [3]
    delivery, released = outbox.acked(99)
    assert delivery is None and released == []
    assert outbox.acked(2)[1] == [4]
    assert sorted(outbox.in_flight) == [3, 4]


def test_packet_ids_wrap_and_skip_those_in_use():
    outbox = Outbox()
    outbox._last_id = MAX_PACKET_ID - 1
    assert outbox.offer(InFlight(1, 1), make) == MAX_PACKET_ID
    assert outbox.offer(InFlight(2, 1), make) == 1
    outbox.acked(MAX_PACKET_ID)
    outbox._last_id = MAX_PACKET_ID
    assert outbox.offer(InFlight(3, 1), make) == 2  # 1 is in use
