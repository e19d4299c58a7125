"""
Tests for the router's side of MQTT connections
(L{meshroute.mqtt.connection}, L{meshroute.mqtt.listener}), without
sockets: each connection over a C{StringTransport}, every timer on a
C{task.Clock}, the real engine over the real store run inline.
CONNECT and its refusals, publications at QoS 0 and 1 (QoS 2 refused),
subscriptions and their deliveries, keep-alive, wills, takeovers and
persistent sessions.
"""

import pytest

from meshroute import events as event_names
from meshroute.messages import TOPIC_PREFIX
from meshroute.mqtt import packets as p
from meshroute.mqtt.packets import MQTT_3_1_1, MQTT_5
from meshroute.mqtt.reason_codes import ReasonCode as R
from meshroute.mqtt.settings import MqttListenerSettings
from meshroute.security.credentials import derive
from meshroute.security.policy import Permission, Security, SecurityPolicy
from meshroute.sessions.ha_view import HAView
from meshroute.sessions.limits import ClientLimits
from meshroute.sessions.liveness import PARTIAL_FRAME_TIMEOUT_S

from support.fake_router import ROUTER
from support.mqtt_ends import MqttEnd, make_factory, settle
from support.stomp_ends import auto_engine, started  # noqa: F401 (fixtures)


@pytest.fixture
def factory(started, clock):
    return make_factory(started, clock)


def connected(factory, level=MQTT_5, client_id="device-1", **more) -> MqttEnd:
    client = MqttEnd(factory, level)
    connack = client.connect(client_id, **more)
    assert connack.reason_code == R.SUCCESS, connack
    return client


def kinds(packets) -> list[str]:
    return [type(packet).__name__ for packet in packets]


# -- CONNECT ---------------------------------------------------------------------------


@pytest.mark.parametrize("level", [MQTT_3_1_1, MQTT_5])
def test_connect_opens_an_mqtt_session(factory, started, level):
    client = MqttEnd(factory, level)
    connack = client.connect("device-1", keep_alive=20)
    assert connack.reason_code == R.SUCCESS and not connack.session_present
    (described,) = factory.sessions.describe()
    assert described["protocol"] == "mqtt" and described["client_id"] == "device-1"
    assert described["ttl_ms"] == 30_000 and described["keep_alive_s"] == 20
    assert described["mqtt_version"] == ("5.0" if level == MQTT_5 else "3.1.1")
    (opened,) = started.events.named(event_names.SESSION_OPENED)
    assert opened["protocol"] == "mqtt"


def test_a_5_0_connack_says_what_the_router_does_not_serve(factory):
    connack = MqttEnd(factory).connect()
    assert connack.properties["maximum_qos"] == 1
    assert "retain_available" not in connack.properties  # available
    assert connack.properties["shared_subscription_available"] == 0
    assert connack.properties["topic_alias_maximum"] == 16


def test_keep_alive_zero_is_no_ttl_and_an_override_is_the_servers_keep_alive(started, clock):
    factory = make_factory(started, clock)
    MqttEnd(factory).connect("a", keep_alive=0)
    assert factory.sessions.describe()[0]["ttl_ms"] == -1
    overridden = make_factory(started, clock, settings={"connection_ttl_override": 30_000})
    connack = MqttEnd(overridden).connect("b", keep_alive=0)
    assert connack.properties["server_keep_alive"] == 20
    assert overridden.sessions.describe()[0]["ttl_ms"] == 30_000


def test_an_empty_client_id_is_assigned_one_or_refused_for_a_persistent_3_1_1_session(factory):
    connack = MqttEnd(factory).connect("")
    assert connack.properties["assigned_client_identifier"].startswith("auto-")
    client = MqttEnd(factory, MQTT_3_1_1)
    connack = client.connect("", clean=False)
    assert connack.reason_code == R.CLIENT_IDENTIFIER_NOT_VALID and client.closed


def test_an_unsupported_protocol_level_is_refused_as_3_1_1_refuses_it(factory):
    client = MqttEnd(factory, MQTT_3_1_1)
    # A 3.1 CONNECT ("MQIsdp", level 3), client id "a".
    body = b"\x00\x06MQIsdp\x03\x02\x00\x3c\x00\x01a"
    client.protocol.dataReceived(bytes([0x10, len(body)]) + body)
    assert client.transport.value() == b"\x20\x02\x00\x01"
    assert client.closed


@pytest.mark.parametrize("level, code", [(MQTT_3_1_1, R.SERVER_UNAVAILABLE),
                                         (MQTT_5, R.SERVER_UNAVAILABLE)])
def test_an_instance_that_is_not_active_is_unavailable(started, clock, level, code):
    factory = make_factory(started, clock,
                           ha_view=lambda: HAView(active=False, epoch=1, endpoints=()))
    client = MqttEnd(factory, level)
    assert client.connect().reason_code == code and client.closed


def test_max_sessions_makes_the_server_busy(started, clock):
    factory = make_factory(started, clock, settings={"limits": ClientLimits(max_sessions=1)})
    connected(factory, client_id="a")
    client = MqttEnd(factory)
    connack = client.connect("b")
    assert connack.reason_code == R.SERVER_BUSY and client.closed
    assert "max-sessions" in connack.properties["reason_string"]


def secured(engine, clock):
    users = {"sensor": derive("sensor-pw", iterations=4096)}
    permissions = (Permission(("sensor",), publish=("sensors.#",), subscribe=("sensors.#",)),)
    return make_factory(engine, clock, security=Security(SecurityPolicy(ROUTER, users,
                                                                        permissions)),
                        secret=b"s" * 32)


@pytest.mark.parametrize("level", [MQTT_3_1_1, MQTT_5])
@pytest.mark.parametrize("username, password", [(None, None), ("sensor", b"wrong"),
                                                ("nobody", b"sensor-pw")])
def test_a_router_with_users_refuses_a_wrong_or_missing_login(started, clock, level,
                                                              username, password):
    client = MqttEnd(secured(started, clock), level)
    connack = client.connect(username=username, password=password)
    assert connack.reason_code == R.BAD_USER_NAME_OR_PASSWORD and client.closed
    (denied,) = started.events.named(event_names.SECURITY_DENIED)
    assert denied["action"] == "connect"


def test_a_user_publishes_and_subscribes_as_its_permissions_allow(started, clock):
    factory = secured(started, clock)
    client = connected(factory, username="sensor", password=b"sensor-pw")
    client.subscribe(("sensors/#", 1), ("secrets/#", 1))
    settle(clock)
    (suback,) = client.received()
    assert suback.reason_codes == (1, R.NOT_AUTHORIZED)
    client.send(p.Publish("secrets/x", b"no", 1, packet_id=7))
    settle(clock)
    (puback,) = client.received()
    assert (puback.packet_id, puback.reason_code) == (7, R.NOT_AUTHORIZED)
    assert "may not" in puback.properties["reason_string"]


def test_a_will_the_user_may_not_publish_refuses_the_connect(started, clock):
    client = MqttEnd(secured(started, clock))
    connack = client.connect(username="sensor", password=b"sensor-pw",
                             will=p.Will("secrets/gone", b"x", 1, False))
    assert connack.reason_code == R.NOT_AUTHORIZED and client.closed


# -- publications and subscriptions -----------------------------------------------------


@pytest.mark.parametrize("level", [MQTT_3_1_1, MQTT_5])
def test_qos_0_and_1_across_wildcards(factory, clock, level):
    subscriber = connected(factory, level, "sub")
    subscriber.subscribe(("sensors/+/temp", 1), ("sensors/#", 0), ("other", 2))
    settle(clock)
    (suback,) = subscriber.received()
    assert suback.reason_codes == (1, 0, 1)
    publisher = connected(factory, level, "pub")
    publisher.send(p.Publish("sensors/kitchen/temp", b"21.5", 1, packet_id=3),
                   p.Publish("sensors/kitchen/humidity", b"40", 0))
    settle(clock)
    assert [(a.packet_id, a.reason_code) for a in publisher.received()] == [(3, 0)]
    got = sorted(((m.topic, m.qos, m.payload) for m in subscriber.received()))
    assert got == [("sensors/kitchen/humidity", 0, b"40"), ("sensors/kitchen/temp", 0, b"21.5"),
                   ("sensors/kitchen/temp", 1, b"21.5")]
    qos_1 = [m for m in got if m[1] == 1]
    assert len(qos_1) == 1


def test_a_puback_waits_for_the_publication_to_be_accepted(started, clock):
    # A router whose sends answer later: PUBACK comes with the answer.
    factory = make_factory(started, clock)
    client = connected(factory)
    held = []
    submit = started.submit
    started.submit = lambda *args, **kw: held.append((args, kw)) or _later(held, submit)
    client.send(p.Publish("a/b", b"x", 1, packet_id=9))
    assert client.received() == []
    released = held.pop()
    released.callback("msg-id")
    assert kinds(client.received()) == ["Puback"]


def _later(held, submit):
    from twisted.internet.defer import Deferred

    d = Deferred()
    held.append(d)
    return d


def test_qos_2_is_refused(factory, clock):
    v5 = connected(factory, MQTT_5, "five")
    v5.send(p.Publish("a", b"x", 2, packet_id=1))
    (disconnect,) = v5.received()
    assert disconnect.reason_code == R.QOS_NOT_SUPPORTED and v5.closed
    v3 = connected(factory, MQTT_3_1_1, "three")
    v3.send(p.Publish("a", b"x", 2, packet_id=1))
    assert v3.received() == [] and v3.closed


def test_a_qos_1_delivery_is_acknowledged_by_puback_within_the_receive_maximum(
        factory, started, clock):
    subscriber = connected(factory, properties={"receive_maximum": 2})
    subscriber.subscribe(("t", 1))
    settle(clock)
    subscriber.received()
    for body in (b"1", b"2", b"3"):
        started.submit(TOPIC_PREFIX + "t", body, {}, True)
    settle(clock)
    first = subscriber.received()
    assert [(m.payload, m.qos) for m in first] == [(b"1", 1), (b"2", 1)]
    subscriber.send(p.Puback(first[0].packet_id))
    settle(clock)
    (third,) = subscriber.received()
    assert third.payload == b"3" and third.packet_id not in (first[1].packet_id,)
    subscriber.send(p.Puback(first[1].packet_id), p.Puback(third.packet_id))
    settle(clock)
    (described,) = factory.sessions.describe()
    assert described["unacknowledged"] == 0


def test_a_qos_0_delivery_is_acknowledged_once_written(factory, started, clock):
    subscriber = connected(factory)
    subscriber.subscribe(("t", 0))
    settle(clock)
    subscriber.received()
    for i in range(150):
        started.submit(TOPIC_PREFIX + "t", b"%d" % i, {}, True)
        settle(clock)
    assert len(subscriber.received()) == 150
    assert factory.sessions.describe()[0]["unacknowledged"] == 0


def test_user_properties_content_type_and_expiry_are_the_messages(factory, clock):
    subscriber = connected(factory, client_id="sub")
    subscriber.subscribe(("t", 1))
    settle(clock)
    subscriber.received()
    publisher = connected(factory, client_id="pub")
    publisher.send(p.Publish("t", b"{}", 1, packet_id=1, properties={
        "user_property": (("trace", "abc"), ("unit", "C")), "content_type": "application/json",
        "message_expiry_interval": 60, "response_topic": "replies/pub",
        "correlation_data": b"req-1"}))
    settle(clock)
    (message,) = subscriber.received()
    assert message.properties["response_topic"] == "replies/pub"
    assert message.properties["correlation_data"] == b"req-1"
    assert message.properties["user_property"] == (("trace", "abc"), ("unit", "C"))
    assert message.properties["content_type"] == "application/json"
    assert 59 <= message.properties["message_expiry_interval"] <= 60


@pytest.mark.parametrize("level", [MQTT_3_1_1, MQTT_5])
def test_a_retained_publication_is_given_to_later_subscriptions_flagged(factory, clock, level):
    publisher = connected(factory, level, "pub")
    publisher.send(p.Publish("status/gw", b"online", 1, retain=True, packet_id=1))
    settle(clock)
    assert [a.reason_code for a in publisher.received()] == [0]
    subscriber = connected(factory, level, "sub")
    subscriber.subscribe(("status/#", 1))
    settle(clock)
    # The specifications let the PUBLISH come before the SUBACK.
    (retained,) = [m for m in subscriber.received() if isinstance(m, p.Publish)]
    assert (retained.topic, retained.payload, retained.retain) == ("status/gw", b"online", True)
    # A live copy of a retained publication: no RETAIN flag (3.1.1, and 5.0
    # without retain-as-published).
    publisher.send(p.Publish("status/gw", b"busy", 1, retain=True, packet_id=2))
    settle(clock)
    (live,) = subscriber.received()
    assert (live.payload, live.retain) == (b"busy", False)
    # An empty one clears the topic: delivered to nobody, given to no one later.
    publisher.send(p.Publish("status/gw", b"", 1, retain=True, packet_id=3))
    settle(clock)
    later = connected(factory, level, "later")
    later.subscribe(("status/#", 1))
    settle(clock)
    assert kinds(subscriber.received()) == [] and kinds(later.received()) == ["Suback"]


def test_retain_handling_and_retain_as_published(factory, clock):
    publisher = connected(factory, client_id="pub")
    publisher.send(p.Publish("status/gw", b"online", 1, retain=True, packet_id=1))
    settle(clock)
    subscriber = connected(factory, client_id="sub")
    subscriber.send(p.Subscribe(1, (
        p.SubscriptionRequest("status/#", 1, retain_as_published=True, retain_handling=2),)))
    settle(clock)
    assert kinds(subscriber.received()) == ["Suback"]  # handling 2: none given
    publisher.send(p.Publish("status/gw", b"busy", 1, retain=True, packet_id=2),
                   p.Publish("status/gw", b"plain", 1, packet_id=3))
    settle(clock)
    assert [(m.payload, m.retain) for m in subscriber.received()] == [(b"busy", True),
                                                                      (b"plain", False)]


def test_a_topic_alias_stands_for_its_topic(factory, clock):
    subscriber = connected(factory, client_id="sub")
    subscriber.subscribe(("a/b", 0))
    settle(clock)
    subscriber.received()
    publisher = connected(factory, client_id="pub")
    publisher.send(p.Publish("a/b", b"1", 0, properties={"topic_alias": 3}),
                   p.Publish("", b"2", 0, properties={"topic_alias": 3}))
    settle(clock)
    assert [m.payload for m in subscriber.received()] == [b"1", b"2"]
    publisher.send(p.Publish("", b"3", 0, properties={"topic_alias": 17}))
    (disconnect,) = publisher.received()
    assert disconnect.reason_code == R.TOPIC_ALIAS_INVALID and publisher.closed


def test_unsubscribe_and_ping(factory, started, clock):
    client = connected(factory)
    client.subscribe(("t", 0))
    settle(clock)
    client.received()
    client.send(p.Unsubscribe(2, ("t", "never")), p.Pingreq())
    settle(clock)
    unsuback, pingresp = client.received()
    assert unsuback.reason_codes == (R.SUCCESS, R.NO_SUBSCRIPTION_EXISTED)
    assert isinstance(pingresp, p.Pingresp)
    started.submit(TOPIC_PREFIX + "t", b"x", {}, False)
    settle(clock)
    assert client.received() == []


def test_a_malformed_packet_closes_only_its_connection(factory, clock):
    other = connected(factory, client_id="other")
    client = connected(factory, client_id="bad")
    client.protocol.dataReceived(b"\x30\xff\xff\xff\xff\x7f")
    (disconnect,) = client.received()
    assert disconnect.reason_code == R.MALFORMED_PACKET and client.closed
    other.send(p.Pingreq())
    assert kinds(other.received()) == ["Pingresp"] and not other.closed


# -- the end of a connection: keep-alive, wills, takeovers ------------------------------


def will_subscriber(factory, clock) -> MqttEnd:
    watcher = connected(factory, client_id="watcher", keep_alive=0)
    watcher.subscribe(("status/#", 1))
    settle(clock)
    watcher.received()
    return watcher


def test_silence_for_one_and_a_half_keep_alives_publishes_the_will(factory, clock):
    watcher = will_subscriber(factory, clock)
    device = connected(factory, client_id="device", keep_alive=10,
                       will=p.Will("status/device", b"gone", 1, False))
    clock.advance(14)
    assert not device.closed
    device.send(p.Pingreq())
    clock.advance(14.5)
    assert not device.closed
    clock.advance(1.5)
    assert device.closed
    device.lose()
    settle(clock)
    (will,) = watcher.received()
    assert (will.topic, will.payload, will.qos) == ("status/device", b"gone", 1)


def test_a_clean_disconnect_discards_the_will_unless_5_0_asks_for_it(factory, clock):
    watcher = will_subscriber(factory, clock)
    for reason, published in ((R.NORMAL_DISCONNECTION, []),
                              (R.DISCONNECT_WITH_WILL_MESSAGE, [b"asked"])):
        device = connected(factory, client_id="device",
                           will=p.Will("status/device", published[0] if published else b"x",
                                       0, False))
        device.send(p.Disconnect(reason))
        settle(clock)
        assert device.closed
        device.lose()
        settle(clock)
        assert [m.payload for m in watcher.received()] == published


def test_a_5_0_will_waits_its_delay_and_a_return_cancels_it(factory, clock):
    watcher = will_subscriber(factory, clock)
    will = p.Will("status/device", b"late", 0, False, {"will_delay_interval": 30})
    device = connected(factory, client_id="device", will=will,
                       properties={"session_expiry_interval": 60})
    device.lose()
    settle(clock)
    clock.advance(29)
    assert watcher.received() == []
    connected(factory, client_id="device")
    clock.advance(5)
    settle(clock)
    assert watcher.received() == []
    device = connected(factory, client_id="device2", will=will,
                       properties={"session_expiry_interval": 60})
    device.lose()
    clock.advance(30)
    settle(clock)
    assert [m.payload for m in watcher.received()] == [b"late"]


def test_a_second_connection_with_the_client_id_takes_over(factory, clock):
    watcher = will_subscriber(factory, clock)
    first = connected(factory, client_id="device", will=p.Will("status/device", b"x", 0, False))
    second = connected(factory, client_id="device")
    (disconnect,) = first.received()
    assert disconnect.reason_code == R.SESSION_TAKEN_OVER and first.closed
    first.lose()
    settle(clock)
    assert [m.payload for m in watcher.received()] == [b"x"]
    assert not second.closed and len(factory.sessions.describe()) == 2


# -- persistent sessions ----------------------------------------------------------------


@pytest.mark.parametrize("level", [MQTT_3_1_1, MQTT_5])
def test_a_persistent_session_collects_while_away(factory, started, clock, level):
    persistent = ({"clean": False} if level == MQTT_3_1_1 else
                  {"clean": False, "properties": {"session_expiry_interval": 3600}})
    device = connected(factory, level, "device", **persistent)
    device.subscribe(("orders/#", 1), ("ticks", 0))
    settle(clock)
    assert device.received()[0].reason_codes == (1, 0)
    device.lose()
    for i in range(3):
        started.submit(TOPIC_PREFIX + "orders.new", b"%d" % i, {}, True)
    started.submit(TOPIC_PREFIX + "ticks", b"t", {}, False)
    settle(clock)
    back = MqttEnd(factory, level)
    connack = back.connect("device", **persistent)
    assert connack.session_present
    settle(clock)
    got = back.received()
    # The QoS 0 copy was kept too (in memory, up to max-depth), as MQTT allows.
    assert sorted((m.topic, m.payload, m.qos) for m in got) == [
        ("orders/new", b"0", 1), ("orders/new", b"1", 1), ("orders/new", b"2", 1),
        ("ticks", b"t", 0)]
    # Not acknowledged: sent again, with DUP, after the next return.
    back.lose()
    again = MqttEnd(factory, level)
    again.connect("device", **persistent)
    settle(clock)
    redelivered = again.received()
    assert [(m.payload, m.dup) for m in redelivered] == [(b"0", True), (b"1", True),
                                                         (b"2", True)]
    again.send(*(p.Puback(m.packet_id) for m in redelivered))
    settle(clock)
    # A clean session ends it: nothing is kept.
    again.lose()
    clean = MqttEnd(factory, level)
    assert not clean.connect("device", clean=True).session_present
    settle(clock)
    assert not any(d.client_id == "mqtt.device" for d in started.topics.durable.values())


def test_a_5_0_session_expires_after_its_interval(factory, started, clock):
    device = connected(factory, client_id="device", clean=False,
                       properties={"session_expiry_interval": 10})
    device.subscribe(("t", 1))
    settle(clock)
    device.lose()
    clock.advance(9)
    assert any(d.client_id == "mqtt.device" for d in started.topics.durable.values())
    clock.advance(1)
    settle(clock)
    assert not any(d.client_id == "mqtt.device" for d in started.topics.durable.values())
    assert not MqttEnd(factory).connect("device", clean=False).session_present


def test_packets_before_the_session_starts_wait_for_it(factory, started, clock):
    # A clean start forgets what the client id left first; meanwhile the
    # client's SUBSCRIBE waits, and reading stops.
    connected(factory, client_id="device", clean=False,
              properties={"session_expiry_interval": 60}).subscribe(("t", 1))
    settle(clock)
    forgetting = []
    forget = started.topics.forget
    started.topics.forget = lambda *args: forgetting.append(args) or _later(forgetting, None)
    client = MqttEnd(factory)
    client.send(p.Connect(MQTT_5, "device", True, 60), p.Subscribe(1, (
        p.SubscriptionRequest("u", 0),)))
    assert client.received() == [] and client.transport.producerState == "paused"
    started.topics.forget = forget
    forgetting.pop().callback(0)
    settle(clock)
    connack, suback = client.received()
    assert not connack.session_present and suback.reason_codes == (0,)
    assert client.transport.producerState == "producing"


def test_a_delivery_larger_than_the_clients_maximum_packet_size_is_not_sent(
        factory, started, clock):
    client = connected(factory, properties={"maximum_packet_size": 100})
    client.subscribe(("t", 1))
    settle(clock)
    client.received()
    started.submit(TOPIC_PREFIX + "t", b"x" * 200, {}, True)
    started.submit(TOPIC_PREFIX + "t", b"small", {}, True)
    settle(clock)
    assert [m.payload for m in client.received()] == [b"small"]
    assert factory.sessions.describe()[0]["unacknowledged"] == 1


def test_a_5_0_disconnect_may_change_the_session_expiry(factory, started, clock):
    device = connected(factory, client_id="device", clean=False,
                       properties={"session_expiry_interval": 60})
    device.subscribe(("t", 1))
    settle(clock)
    device.send(p.Disconnect(0, {"session_expiry_interval": 0}))
    settle(clock)
    device.lose()
    settle(clock)
    assert not any(d.client_id == "mqtt.device" for d in started.topics.durable.values())
    clean = connected(factory, client_id="other")
    clean.send(p.Disconnect(0, {"session_expiry_interval": 30}))
    (disconnect,) = clean.received()
    assert disconnect.reason_code == R.PROTOCOL_ERROR and clean.closed


def test_a_subscription_identifier_is_refused_as_not_served(factory, clock):
    client = connected(factory)
    client.send(p.Subscribe(1, (p.SubscriptionRequest("a", 1), p.SubscriptionRequest("b", 0)),
                            {"subscription_identifier": (7,)}))
    (suback,) = client.received()
    assert suback.reason_codes == (R.SUBSCRIPTION_IDENTIFIERS_NOT_SUPPORTED,) * 2
    client.subscribe(("$share/group/a", 1), ("a/+", 1))
    settle(clock)
    (suback,) = client.received()
    assert suback.reason_codes == (R.SHARED_SUBSCRIPTIONS_NOT_SUPPORTED, 1)


def test_a_packet_too_large_or_too_slow_closes_only_its_connection(started, clock):
    factory = make_factory(started, clock,
                           settings={"limits": ClientLimits(max_frame_size=64 * 1024)})
    other = connected(factory, client_id="other", keep_alive=0)
    large = connected(factory, client_id="large", keep_alive=0)
    # A PUBLISH announcing 1 MiB: refused from its fixed header, before
    # any of it is held.
    large.protocol.dataReceived(b"\x30\x80\x80\x40")
    (disconnect,) = large.received()
    assert disconnect.reason_code == R.PACKET_TOO_LARGE and large.closed
    slow = connected(factory, client_id="slow", keep_alive=0)
    slow.protocol.dataReceived(p.encode(p.Publish("t", b"x" * 1000, 0), MQTT_5)[:500])
    clock.advance(PARTIAL_FRAME_TIMEOUT_S + 1)
    assert slow.closed and not other.closed
