"""
paho-mqtt clients of real routers, for the MQTT end-to-end tests
(tests/processes/test_mqtt_processes.py): a router with MQTT, STOMP and
native listeners (L{mqtt_router}), a paho client connected to it
(L{paho_client}) and what it received (L{Received}).
"""

import threading

import paho.mqtt.client as mqtt

from support.routers import wait_until
from support.stomp_clients import TIMEOUT_S


def mqtt_router(mesh, name: str, connect=()):
    """
    A router with a client listener, a STOMP listener and an MQTT
    listener on fresh ports (C{spec.stomp_port}, C{spec.mqtt_port}, and
    MQTT over WebSocket on C{spec.mqtt_websocket_port}), TTL checks every
    200 ms.
    """
    spec = mesh.router(name, clients=True, connect=connect)
    spec.stomp_port = mesh.ports.allocate()
    spec.mqtt_port = mesh.ports.allocate()
    spec.mqtt_websocket_port = mesh.ports.allocate()
    spec.extra["stomp.listener"] = {"endpoint": f"tcp:{spec.stomp_port}:interface=127.0.0.1"}
    spec.extra["mqtt.listener"] = {
        "endpoint": f"tcp:{spec.mqtt_port}:interface=127.0.0.1",
        "websocket": f"tcp:{spec.mqtt_websocket_port}:interface=127.0.0.1"}
    spec.extra["clients.listener"]["connection-ttl-check-interval"] = "200ms"
    spec.write()
    return spec


class Received:
    """
    What one paho client received (its callbacks run on paho's network
    thread; appending to a list is atomic).
    """

    def __init__(self) -> None:
        self.messages: list = []
        self.subacks: list = []
        self.connacks: list = []
        self.disconnects: list = []
        self.connected = threading.Event()

    def wait_messages(self, n: int, timeout: float = TIMEOUT_S) -> list:
        wait_until(lambda: len(self.messages) >= n, timeout,
                   what=f"{n} MQTT messages (have {len(self.messages)})")
        return self.messages

    def wait_subacks(self, n: int) -> list:
        wait_until(lambda: len(self.subacks) >= n, TIMEOUT_S, what=f"{n} SUBACKs")
        return self.subacks


def paho_client(spec, client_id: str, *, version=mqtt.MQTTv311, clean: bool = True,
                keep_alive: int = 30, websocket: bool = False):
    """
    A paho client of C{spec}'s MQTT listener (over WebSocket, at
    C{/mqtt}, with C{websocket}), connected (its loop thread running),
    and what it receives.
    """
    got = Received()
    transport = "websockets" if websocket else "tcp"
    if version == mqtt.MQTTv5:
        client = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, client_id=client_id,
                             protocol=version, transport=transport)
    else:
        client = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, client_id=client_id,
                             protocol=version, clean_session=clean, transport=transport)
    if websocket:
        client.ws_set_options(path="/mqtt")

    def on_connect(client, userdata, flags, reason_code, properties):
        got.connacks.append((flags.session_present, reason_code))
        got.connected.set()

    client.on_connect = on_connect
    client.on_message = lambda client, userdata, message: got.messages.append(message)
    client.on_subscribe = lambda client, userdata, mid, codes, properties: got.subacks.append(
        [int(code.value) for code in codes])
    client.on_disconnect = (lambda client, userdata, flags, reason_code, properties:
                            got.disconnects.append(reason_code))
    options = {"clean_start": clean} if version == mqtt.MQTTv5 else {}
    port = spec.mqtt_websocket_port if websocket else spec.mqtt_port
    client.connect("127.0.0.1", port, keepalive=keep_alive, **options)
    client.loop_start()
    assert got.connected.wait(TIMEOUT_S), f"no CONNACK for {client_id}"
    return client, got


def subscribe(client, got, *filters: tuple[str, int]) -> list:
    """
    SUBSCRIBE and wait for its SUBACK (the listener's subscriptions are
    mesh-wide: its interest reached every router).
    """
    before = len(got.subacks)
    client.subscribe(list(filters))
    return got.wait_subacks(before + 1)[before]


def stop(client) -> None:
    client.disconnect()
    client.loop_stop()
