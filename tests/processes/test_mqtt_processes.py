"""
MQTT end to end (docs/mqtt.md): two real C{twistd} routers on
127.0.0.1, A connected to B, each with MQTT, STOMP and native listeners,
paho-mqtt clients (3.1.1 and 5.0), one set of routers for every check
(the suite's time is short):

 - QoS 0 and 1, publish and subscribe with wildcards across the two
   routers (the subscriber over WebSocket), the listener's ports and
   sessions in the admin API and its metrics;
 - an MQTT publisher to a native and a STOMP subscriber, and a STOMP
   publisher to an MQTT subscriber;
 - a retained message published at A is given to later subscribers at B
   (5.0 and 3.1.1) with the RETAIN flag, and an empty one clears it;
 - a client silent past 1.5 times its keep-alive: its will is published;
 - a second connection with a client id takes the session over;
 - the README's mosquitto_sub and mosquitto_pub commands, as written
   (when Debian's mosquitto-clients is installed; a warning says so when
   it is not);
 - a persistent session away while 2,000 QoS 1 messages arrive, its
   router SIGKILLed and restarted meanwhile, gets each once when it
   returns; a clean session then ends it.

Every SUBACK comes once the subscription's interest reached every router
(the listener's C{mesh-wide}), so what is published after it is the
subscriber's.  Synchronisation is a poll against a deadline.
"""

import shlex
import shutil
import socket
import subprocess
import threading
import urllib.request
import warnings
from collections import Counter

import paho.mqtt.client as mqtt

from meshroute.mqtt import packets as p
from meshroute.mqtt.persistence import durable_client_id, durable_name
from meshroute.router.topic_subscriptions import durable_queue

from support.mqtt_clients import mqtt_router, paho_client, stop, subscribe
from support.pacing import paced
from support.routers import REPO_ROOT, mesh, wait_until  # noqa: F401 (mesh: a fixture)
from support.stomp_clients import TIMEOUT_S, connect
from support.topic_subscriber import native_topic_subscriber

#: The persistent session's messages while it is away.
AWAY_COUNT = 2000


def test_mqtt_across_two_routers(mesh):  # noqa: F811
    b = mqtt_router(mesh, "router-b")
    a = mqtt_router(mesh, "router-a", connect=[b])
    a_proc, b_proc = mesh.start(a, b)
    a_proc.wait_route("router-b")
    _wildcards_at_qos_0_and_1(a, b, b_proc)
    _mqtt_and_the_other_protocols(mesh, a, b)
    _a_retained_message_for_later_subscribers_at_another_router(a, b, b_proc)
    _a_silent_client_s_will(a, b)
    _a_takeover(b)
    _the_readme_s_mosquitto_commands(a)
    _a_persistent_session_away_through_a_sigkill(mesh, a, b, b_proc)


def _wildcards_at_qos_0_and_1(a, b, b_proc) -> None:
    subscriber, got = paho_client(b, "sub-1", version=mqtt.MQTTv5, websocket=True,
                                  keep_alive=20)
    assert subscribe(subscriber, got, ("sensors/+/temp", 1), ("sensors/#", 0)) == [1, 0]
    # The admin API shows the listener's ports and the session.
    bound = {listener["key"]: listener["port"] for listener in b_proc.info()["listeners"]}
    assert bound["mqtt.listener.endpoint"] == b.mqtt_port
    assert bound["mqtt.listener.websocket"] == b.mqtt_websocket_port
    (session,) = [s for s in b_proc.get("/api/v1/sessions") if s["client_id"] == "sub-1"]
    assert (session["protocol"], session["keep_alive_s"], session["ttl_ms"]) == ("mqtt", 20,
                                                                                30_000)
    with urllib.request.urlopen(b.admin_url + "/metrics", timeout=TIMEOUT_S) as response:
        metrics = response.read().decode()
    assert 'meshroute_client_sessions{protocol="mqtt",state="open"} 1.0' in metrics
    publisher, sent = paho_client(a, "pub-1")
    infos = [publisher.publish("sensors/kitchen/temp", b"21.5", qos=1),
             publisher.publish("sensors/kitchen/humidity", b"40", qos=0),
             publisher.publish("other/thing", b"no", qos=1)]
    for info in infos:
        info.wait_for_publish(TIMEOUT_S)
    messages = got.wait_messages(3)
    wait_until(lambda: len(got.messages) >= 3, TIMEOUT_S)
    assert sorted((m.topic, m.payload, m.qos) for m in messages) == [
        ("sensors/kitchen/humidity", b"40", 0), ("sensors/kitchen/temp", b"21.5", 0),
        ("sensors/kitchen/temp", b"21.5", 1)]
    stop(subscriber)
    stop(publisher)


def _a_retained_message_for_later_subscribers_at_another_router(a, b, b_proc) -> None:
    def retained_at_b() -> int:
        return b_proc.get("/api/v1/topics")["retained"]["count"]

    publisher, _ = paho_client(a, "gateway-3", version=mqtt.MQTTv5)
    publisher.publish("status/gateway-3", b"online", qos=1, retain=True).wait_for_publish(
        TIMEOUT_S)
    wait_until(lambda: retained_at_b() == 1, TIMEOUT_S, what="the retained message at router-b")
    for version in (mqtt.MQTTv5, mqtt.MQTTv311):
        subscriber, got = paho_client(b, f"dashboard-{version}", version=version)
        assert subscribe(subscriber, got, ("status/#", 1)) == [1]
        (message,) = got.wait_messages(1)
        assert (message.topic, message.payload, message.retain) == ("status/gateway-3",
                                                                    b"online", True)
        stop(subscriber)
    # An empty retained publication clears the topic at every router.
    publisher.publish("status/gateway-3", b"", qos=1, retain=True).wait_for_publish(TIMEOUT_S)
    wait_until(lambda: retained_at_b() == 0, TIMEOUT_S, what="the retained message cleared")
    stop(publisher)


def _mqtt_and_the_other_protocols(mesh, a, b) -> None:  # noqa: F811
    native = native_topic_subscriber(mesh, b, "plant.#", 1)
    stomp, collected = connect(b)
    stomp.subscribe("/topic/plant.#", id="s", ack="auto",
                    headers={"mesh-wide": "true", "receipt": "sub"})
    collected.wait_receipt("sub")
    wait_until(lambda: "subscribed" in native.stdout or native.poll() is not None, TIMEOUT_S,
               what="the native subscriber's subscription")
    mqtt_subscriber, got = paho_client(b, "plant-watcher")
    assert subscribe(mqtt_subscriber, got, ("replies/#", 1)) == [1]
    publisher, _ = paho_client(a, "plant-1")
    publisher.publish("plant/line-1/state", b"running", qos=1).wait_for_publish(TIMEOUT_S)
    (message,) = collected.wait_messages(1)
    assert message.headers["destination"] == "/topic/plant.line-1.state"
    assert message.body == b"running"
    native.wait(TIMEOUT_S)
    assert "plant.line-1.state running" in native.stdout
    # And back: STOMP publishes, MQTT receives.
    stomp_a, sent = connect(a)
    stomp_a.send("/topic/replies.line-1", b"ack", receipt="r", headers={"persistent": "true"})
    sent.wait_receipt("r")
    (reply,) = got.wait_messages(1)
    assert (reply.topic, reply.payload, reply.qos) == ("replies/line-1", b"ack", 1)
    for client in (mqtt_subscriber, publisher):
        stop(client)
    stomp.disconnect()
    stomp_a.disconnect()


def _a_silent_client_s_will(a, b) -> None:
    watcher, got = paho_client(b, "will-watcher")
    assert subscribe(watcher, got, ("status/#", 1)) == [1]
    # A raw client that says CONNECT (keep-alive 1 s, a will) and nothing more.
    silent = socket.create_connection(("127.0.0.1", a.mqtt_port))
    silent.sendall(p.encode(p.Connect(4, "silent-device", True, 1,
                                      will=p.Will("status/silent-device", b"offline", 1,
                                                  False)), 4))
    assert silent.recv(4) == b"\x20\x02\x00\x00"
    (will,) = got.wait_messages(1)
    assert (will.topic, will.payload) == ("status/silent-device", b"offline")
    try:  # dropped by the router (aborted: a reset, or an end first)
        assert silent.recv(1) == b""
    except ConnectionResetError:
        pass
    silent.close()
    stop(watcher)


def _a_takeover(b) -> None:
    first, first_got = paho_client(b, "twin", version=mqtt.MQTTv5)
    first.reconnect_delay_set(60, 120)  # it must not come back during the check
    second, second_got = paho_client(b, "twin", version=mqtt.MQTTv5)
    wait_until(lambda: first_got.disconnects, TIMEOUT_S, what="the first connection's end")
    assert first_got.disconnects[0] == "Session taken over"
    assert second.is_connected()
    first.loop_stop()
    stop(second)


def _a_persistent_session_away_through_a_sigkill(mesh, a, b, b_proc) -> None:  # noqa: F811
    device, got = paho_client(b, "field-unit", clean=False)
    assert subscribe(device, got, ("orders/#", 1)) == [1]
    stop(device)
    queue = durable_queue(durable_client_id("field-unit"), durable_name("orders/#", 1))
    publisher, _ = paho_client(a, "dispatcher")
    infos = []

    def publish() -> None:
        # Paced (2 s in all): router-b dies while router-a still takes them.
        for i in paced(AWAY_COUNT, 1000):
            infos.append(publisher.publish(f"orders/{i % 7}", b"%d" % i, qos=1))

    flowing = threading.Thread(target=publish, name="publisher", daemon=True)
    flowing.start()
    wait_until(lambda: b_proc.queue_depth(queue) >= AWAY_COUNT // 5, TIMEOUT_S,
               what="a fifth of the publications at router-b")
    b_proc.sigkill()
    assert sum(info.is_published() for info in list(infos)) < AWAY_COUNT, (
        "the flow was over before router-b died")
    [b_proc] = mesh.start(b)
    flowing.join(TIMEOUT_S)
    for info in infos:
        info.wait_for_publish(TIMEOUT_S)
    stop(publisher)
    device, got = paho_client(b, "field-unit", clean=False)
    assert got.connacks[0][0] is True  # session present
    got.wait_messages(AWAY_COUNT)
    wait_until(lambda: b_proc.queue_depth(queue) == 0, TIMEOUT_S,
               what="the persistent session's subscription to be drained")
    stop(device)
    counts = Counter(int(m.payload) for m in got.messages)
    assert sorted(counts) == list(range(AWAY_COUNT)) and set(counts.values()) == {1}
    # A clean session ends it.
    device, got = paho_client(b, "field-unit", clean=True)
    assert got.connacks[0][0] is False
    stop(device)
    wait_until(lambda: queue not in b_proc.queues(), TIMEOUT_S, what="the subscription's end")


def readme_mosquitto_commands(port: int) -> list[list[str]]:
    """
    The README's mosquitto commands ("From other languages", MQTT), on
    C{port} instead of 1883, each as its arguments.
    """
    readme = (REPO_ROOT / "README.md").read_text()
    section = readme[readme.index("### MQTT"):]
    start = section.index("```sh\n") + len("```sh\n")
    block = section[start:section.index("```", start)].replace("\\\n", " ")
    return [shlex.split(line.rstrip(" &").replace("-p 1883", f"-p {port}"))
            for line in block.splitlines() if line.strip()]


def _the_readme_s_mosquitto_commands(a) -> None:
    if shutil.which("mosquitto_sub") is None:
        warnings.warn("mosquitto_sub is not installed (apt-get install mosquitto-clients): "
                      "the README's mosquitto commands were not run")
        return
    subscribe_command, *publish_commands = readme_mosquitto_commands(a.mqtt_port)
    # -d prints the SUBACK (the subscription reached the mesh), -C ends it;
    # stdbuf keeps its output lines apart from a pipe's buffering.
    subscriber = subprocess.Popen(["stdbuf", "-oL", *subscribe_command, "-d", "-C", "2"],
                                  stdout=subprocess.PIPE, text=True)
    lines: list[str] = []
    reading = threading.Thread(target=lambda: lines.extend(subscriber.stdout), daemon=True)
    reading.start()
    try:
        wait_until(lambda: any("SUBACK" in line for line in lines), TIMEOUT_S,
                   what=f"mosquitto_sub's SUBACK: {lines}")
        for command in publish_commands:
            assert subprocess.run(command, timeout=TIMEOUT_S).returncode == 0, command
        assert subscriber.wait(TIMEOUT_S) == 0
        reading.join(TIMEOUT_S)
    finally:
        subscriber.kill()
    received = [line.rstrip("\n") for line in lines if line.startswith("sensors/")]
    assert received == ["sensors/kitchen/temp 21.5", "sensors/hall/temp 19"]
