"""
Hypothesis strategies for MQTT: strings, topics and filters as the specs
allow them, 5.0 properties for any packet (built from the property
table), and every packet each side sends, for either protocol level.
"""

from hypothesis import strategies as st

from meshroute.mqtt.packets import (
    MQTT_5,
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
from meshroute.mqtt.properties import PROPERTIES
from meshroute.mqtt.reason_codes import ALLOWED, ReasonCode

#: Text an MQTT string may hold: no U+0000, no surrogates.
strings = st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\0"),
                  max_size=20)
level_text = st.text(st.characters(blacklist_categories=("Cs",),
                                   blacklist_characters="\0/+#"), max_size=8)
topic_names = st.lists(level_text, min_size=1, max_size=5).map("/".join).filter(bool)
topic_filters = st.builds(
    lambda levels, last: "/".join(levels + ([last] if last else [])),
    st.lists(st.one_of(level_text, st.just("+")), max_size=5),
    st.sampled_from([None, "#", "+"]),
).filter(bool)
packet_ids = st.integers(1, 0xFFFF)
qos = st.integers(0, 2)

_KINDS = {
    "byte": st.integers(0, 0xFF),
    "u16": st.integers(0, 0xFFFF),
    "u32": st.integers(0, 0xFFFF_FFFF),
    "varint": st.integers(0, 268_435_455),
    "string": strings,
    "binary": st.binary(max_size=20),
    "pair": st.tuples(strings, strings),
}


def _value(prop):
    if prop.name == "response_topic":
        return topic_names
    if prop.yes_or_no:
        return st.integers(0, 1)
    values = _KINDS[prop.kind]
    return values.filter(bool) if prop.nonzero else values


def properties(packet: str, level: int = MQTT_5, leave_out=()):
    """
    A 5.0 property mapping for C{packet} (empty below 5.0), without the
    names in C{leave_out}.
    """
    if level != MQTT_5:
        return st.just({})
    fields = {}
    for prop in PROPERTIES:
        if packet not in prop.packets or prop.name in leave_out:
            continue
        if prop.repeats_in:
            most = 3 if packet in prop.repeats_in else 1
            fields[prop.name] = st.lists(_value(prop), min_size=1, max_size=most).map(tuple)
        else:
            fields[prop.name] = _value(prop)
    return st.fixed_dictionaries({}, optional=fields)


def reason_codes_of(packet: str):
    return st.sampled_from(sorted(ALLOWED[packet])).map(ReasonCode)


def publishes(level: int, from_server: bool):
    def build(topic, payload, qos_, retain, dup, packet_id, props):
        if not topic:
            props = {**props, "topic_alias": props.get("topic_alias", 1)}
        return Publish(topic, payload, qos_, retain, dup and qos_ > 0,
                       packet_id if qos_ else None, props)
    leave_out = () if from_server else ("subscription_identifier",)
    topics = topic_names | st.just("") if level == MQTT_5 else topic_names
    return st.builds(build, topics, st.binary(max_size=50), qos, st.booleans(),
                     st.booleans(), packet_ids, properties("PUBLISH", level, leave_out))


def _acknowledgements(level: int):
    def of(packet_class, name):
        codes = reason_codes_of(name) if level == MQTT_5 else st.just(ReasonCode.SUCCESS)
        return st.builds(packet_class, packet_ids, codes, properties(name, level))
    return st.one_of(of(Puback, "PUBACK"), of(Pubrec, "PUBREC"), of(Pubrel, "PUBREL"),
                     of(Pubcomp, "PUBCOMP"))


def connects(level: int):
    wills = st.builds(Will, topic_names, st.binary(max_size=20), qos, st.booleans(),
                      properties("WILL", level))
    usernames = st.none() | strings

    def build(client_id, clean, keep_alive, username, password, will, props, auth_data):
        if level != MQTT_5 and username is None:
            password = None
        if "authentication_method" in props and auth_data is not None:
            props = {**props, "authentication_data": auth_data}
        return Connect(level, client_id, clean, keep_alive, username, password, will, props)
    return st.builds(build, strings, st.booleans(), st.integers(0, 0xFFFF), usernames,
                     st.none() | st.binary(max_size=20), st.none() | wills,
                     properties("CONNECT", level, leave_out=("authentication_data",)),
                     st.none() | st.binary(max_size=20))


def _subscription_requests(level: int):
    if level != MQTT_5:
        return st.builds(SubscriptionRequest, topic_filters, qos)
    return st.builds(SubscriptionRequest, topic_filters, qos, st.booleans(), st.booleans(),
                     st.integers(0, 2))


def client_packets(level: int):
    """Any packet but CONNECT a client sends, at protocol level C{level}."""
    ending = reason_codes_of("DISCONNECT") if level == MQTT_5 else st.just(0)
    choices = [
        publishes(level, from_server=False),
        _acknowledgements(level),
        st.builds(Subscribe, packet_ids,
                  st.lists(_subscription_requests(level), min_size=1, max_size=4).map(tuple),
                  properties("SUBSCRIBE", level)),
        st.builds(Unsubscribe, packet_ids,
                  st.lists(topic_filters, min_size=1, max_size=4).map(tuple),
                  properties("UNSUBSCRIBE", level)),
        st.just(Pingreq()),
        st.builds(Disconnect, ending, properties("DISCONNECT", level)),
    ]
    if level == MQTT_5:
        choices.append(st.builds(Auth, reason_codes_of("AUTH"), properties("AUTH")))
    return st.one_of(choices)


def server_packets(level: int):
    """Any packet a server sends, at protocol level C{level}."""
    if level == MQTT_5:
        connack_codes = reason_codes_of("CONNACK")
        suback_codes = reason_codes_of("SUBACK")
        unsuback_codes = st.lists(reason_codes_of("UNSUBACK"), max_size=4).map(tuple)
    else:
        connack_codes = st.sampled_from([0, 0x84, 0x85, 0x88, 0x86, 0x87]).map(ReasonCode)
        suback_codes = st.sampled_from([0, 1, 2, 0x80]).map(ReasonCode)
        unsuback_codes = st.just(())
    choices = [
        st.builds(Connack, st.booleans(), connack_codes, properties("CONNACK", level)),
        publishes(level, from_server=True),
        _acknowledgements(level),
        st.builds(Suback, packet_ids, st.lists(suback_codes, min_size=1, max_size=4).map(tuple),
                  properties("SUBACK", level)),
        st.builds(Unsuback, packet_ids, unsuback_codes, properties("UNSUBACK", level)),
        st.just(Pingresp()),
    ]
    if level == MQTT_5:
        choices += [st.builds(Disconnect, reason_codes_of("DISCONNECT"), properties("DISCONNECT")),
                    st.builds(Auth, reason_codes_of("AUTH"), properties("AUTH"))]
    return st.one_of(choices)
