"""
Tests that the PUBLISH packets the router reads from one chunk of a
client's bytes are carried out as one batch (L{meshroute.mqtt.connection}
over L{meshroute.sessions.connection_core.ConnectionCore.flush_sends}): one
store call, yet each packet answered on its own and in order, and any
other packet among them ending the batch.
"""

import pytest

from meshroute.errors import DiskFull
from meshroute.mqtt import packets as p
from meshroute.mqtt import refusals
from meshroute.mqtt.packets import MQTT_3_1_1, MQTT_5
from meshroute.mqtt.reason_codes import ReasonCode as R
from meshroute.wire import client_frames as f

from support.engine_calls import recorded_submits
from support.fake_router import FakeBacklogFull
from support.mqtt_ends import MqttEnd, make_factory, settle
from support.stomp_ends import auto_engine, started  # noqa: F401 (fixtures)

from mqtt.test_mqtt_connection import connected, secured


def pubacks(client) -> list[tuple[int, int]]:
    return [(packet.packet_id, packet.reason_code) for packet in client.received()
            if type(packet) is p.Puback]


@pytest.mark.parametrize("level", [MQTT_3_1_1, MQTT_5])
def test_a_read_of_publishes_is_one_store_call_answered_in_order(started, clock, level):
    factory = make_factory(started, clock)
    subscriber = connected(factory, level, "sub")
    subscriber.subscribe(("t/#", 1))
    settle(clock)
    subscriber.received()
    publisher = connected(factory, level, "pub")
    calls = recorded_submits(started)
    publisher.send_together(*(p.Publish(f"t/{n}", b"%d" % n, 1, packet_id=n)
                              for n in range(1, 6)),
                            p.Publish("t/q0", b"q0", 0))
    settle(clock)
    assert calls == [("submit_many", [f"topic:t.{n}" for n in (1, 2, 3, 4, 5, "q0")])]
    assert pubacks(publisher) == [(n, R.SUCCESS) for n in range(1, 6)]
    # (A QoS 0 publication is not stored: it may overtake the others.)
    got = [m.payload for m in subscriber.received()]
    assert [payload for payload in got if payload != b"q0"] == [b"1", b"2", b"3", b"4", b"5"]
    assert b"q0" in got


def test_a_packet_between_publishes_ends_their_batch(started, clock):
    factory = make_factory(started, clock)
    client = connected(factory)
    calls = recorded_submits(started)
    client.send_together(p.Publish("a/1", b"1", 1, packet_id=1),
                         p.Publish("a/2", b"2", 1, packet_id=2),
                         p.Subscribe(3, (p.SubscriptionRequest("a/#", 1),)),
                         p.Publish("a/3", b"3", 1, packet_id=4))
    settle(clock)
    assert calls == [("submit_many", ["topic:a.1", "topic:a.2"]), ("submit", "topic:a.3")]
    answers = [(type(packet).__name__, packet.packet_id) for packet in client.received()
               if type(packet) is not p.Publish]
    assert answers == [("Puback", 1), ("Puback", 2), ("Suback", 3), ("Puback", 4)]


def test_a_publication_refused_in_a_batch_is_answered_in_its_place(engine, clock):
    # The engine answers each publication of the batch: the second's
    # refusal is its own PUBACK, between the others'.
    client = connected(make_factory(engine, clock))
    calls = recorded_submits(engine)
    client.send_together(*(p.Publish(f"a/{n}", b"x", 1, packet_id=n) for n in (1, 2, 3)))
    assert calls == [("submit_many", ["topic:a.1", "topic:a.2", "topic:a.3"])]
    first, second, third = engine.submitted
    first.deferred.callback("router-a:1")
    assert client.received() == []
    third.deferred.callback("router-a:3")
    second.deferred.errback(FakeBacklogFull("the backlog is full"))
    assert pubacks(client) == [(1, R.SUCCESS), (2, refusals.reason_code(f.BACKLOG_FULL)),
                               (3, R.SUCCESS)]
    assert not client.closed


def test_a_publication_the_user_may_not_make_is_refused_in_its_place(started, clock):
    client = connected(secured(started, clock), username="sensor", password=b"sensor-pw")
    client.send_together(p.Publish("sensors/1", b"x", 1, packet_id=1),
                         p.Publish("secrets/2", b"x", 1, packet_id=2),
                         p.Publish("sensors/3", b"x", 1, packet_id=3))
    settle(clock)
    assert pubacks(client) == [(1, R.SUCCESS), (2, R.NOT_AUTHORIZED), (3, R.SUCCESS)]


def test_a_packet_that_ends_the_connection_ends_the_batch_after_the_publishes_before_it(
        started, clock):
    client = connected(make_factory(started, clock))
    calls = recorded_submits(started)
    client.send_together(p.Publish("a/1", b"1", 0),
                         p.Publish("a/2", b"2", 0),
                         p.Publish("a/dotted.level", b"x", 0),
                         p.Publish("a/3", b"3", 0))
    settle(clock)
    assert calls == [("submit_many", ["topic:a.1", "topic:a.2"])]
    assert client.closed
    (disconnect,) = client.received()
    assert type(disconnect) is p.Disconnect and disconnect.reason_code != R.SUCCESS


@pytest.mark.parametrize("qos", [0, 1])
def test_a_publisher_is_not_read_while_the_router_holds_topic_publishers(engine, clock, qos):
    # The fan-out is behind (meshroute.topics.backlog): the device's
    # connection is not read from its next PUBLISH until it caught up.
    client = connected(make_factory(engine, clock))
    engine.topic_backlog.measured(engine.topic_backlog.hold_at)
    client.send(p.Subscribe(1, (p.SubscriptionRequest("a/#", 1),)), p.Pingreq())
    assert client.transport.producerState == "producing"
    client.send(p.Publish("a/1", b"x", qos, packet_id=2 if qos else None))
    assert client.transport.producerState == "paused"
    engine.topic_backlog.measured(0)
    assert client.transport.producerState == "producing"


def test_a_publication_refused_for_a_full_disk_is_a_quota_exceeded(engine, clock):
    client = connected(make_factory(engine, clock))
    client.send_together(p.Publish("a/1", b"x", 1, packet_id=1))
    (sent,) = engine.submitted
    sent.deferred.errback(DiskFull("the router's disk has 1.0 MiB free"))
    assert pubacks(client) == [(1, R.QUOTA_EXCEEDED)]
    assert not client.closed
