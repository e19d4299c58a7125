"""
Tests for L{meshroute.mqtt.persistence} and L{meshroute.mqtt.messages}:
the names of a persistent session's durable subscriptions, and an MQTT
message's properties as a native message's headers and back.
"""

from meshroute.messages import EXPIRES_HEADER, TOPIC_HEADER
from meshroute.mqtt.messages import delivery_properties, headers_of, time_to_live_ms
from meshroute.mqtt.persistence import durable_client_id, durable_name, granted_qos
from meshroute.router.topic_subscriptions import durable_queue


def test_durable_names_are_valid_and_never_meet():
    ids = ["device-1", "dev.ice", "dev ice/1", "ü", "x" * 200, "h.0"]
    client_ids = [durable_client_id(client_id) for client_id in ids]
    assert client_ids[0] == "mqtt.device-1"
    assert len(set(client_ids)) == len(ids)
    for client_id in client_ids:
        durable_queue(client_id, durable_name("a/+/#", 1))  # raises if not a name
    assert durable_name("a/b", 1) != durable_name("a/b", 0) != durable_name("a/c", 0)
    assert granted_qos(durable_name("a/#", 1)) == 1 and granted_qos(durable_name("a", 0)) == 0


def test_properties_are_headers_and_back():
    headers = headers_of({"user_property": (("trace", "1"), ("trace", "2"), (TOPIC_HEADER, "x")),
                          "content_type": "text/plain"})
    assert headers == {"trace": "1", "content-type": "text/plain"}
    assert time_to_live_ms({"message_expiry_interval": 5}) == 5000
    assert time_to_live_ms({}) == 0
    properties = delivery_properties({**headers, TOPIC_HEADER: "a.b",
                                      EXPIRES_HEADER: "10500"}, now_ms=1000)
    assert properties == {"user_property": (("trace", "1"),), "content_type": "text/plain",
                          "message_expiry_interval": 10}


def test_a_response_topic_and_correlation_data_cross_the_mesh_as_headers():
    headers = headers_of({"response_topic": "replies/7", "correlation_data": b"\x00id"})
    assert headers == {"mqtt-response-topic": "replies/7", "mqtt-correlation-data": "AGlk"}
    assert delivery_properties(headers, now_ms=0) == {"response_topic": "replies/7",
                                                      "correlation_data": b"\x00id"}
    # Set by another protocol's client as no MQTT property can be: headers.
    odd = {"mqtt-response-topic": "replies/#", "mqtt-correlation-data": "not base64!"}
    assert delivery_properties(odd, now_ms=0) == {"user_property": tuple(odd.items())}
