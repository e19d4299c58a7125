"""
Devices over TLS (docs/mqtt.md): one C{twistd} router whose MQTT listener
is an C{ssl:} endpoint with a C{client-ca}, its users in C{[security]}.
paho-mqtt clients verify the router's certificate and log in by username
and password (checked against the SCRAM verifiers) or by their own
certificate (EXTERNAL, its common name the user), and each user's
permissions hold on what it publishes and subscribes to; mosquitto_pub
does the same from the shell where Debian's C{mosquitto-clients} is
installed.
"""

import shutil
import subprocess

import paho.mqtt.client as mqtt

from meshroute.security.credentials import derive
from meshroute.security.users import write_users

from support.certificates import make_ca, make_client_cert, make_server_cert
from support.mqtt_clients import Received, mqtt_router, stop
from support.routers import mesh, wait_until  # noqa: F401 (mesh is a fixture)
from support.stomp_clients import TIMEOUT_S


def tls_client(spec, tls, client_id: str, certificate=None, login=None):
    """
    A paho 5.0 client of C{spec}'s MQTT listener over TLS, verifying the
    router against the server CA, with C{certificate} (key, cert) if
    given and C{login} (username, password) if given; connecting (its loop
    running): what it receives in C{got}, its CONNACK in C{got.connacks}.
    """
    got = Received()
    client = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, client_id=client_id,
                         protocol=mqtt.MQTTv5)
    client.tls_set(ca_certs=str(tls / "server-ca" / "ca.pem"),
                   certfile=certificate and str(certificate[1]),
                   keyfile=certificate and str(certificate[0]))
    if login is not None:
        client.username_pw_set(*login)

    def on_connect(client, userdata, flags, reason_code, properties):
        got.connacks.append(int(reason_code.value))
        got.connected.set()

    client.on_connect = on_connect
    client.on_message = lambda client, userdata, message: got.messages.append(message)
    client.on_subscribe = lambda client, userdata, mid, codes, properties: got.subacks.append(
        [int(code.value) for code in codes])
    client.connect("localhost", spec.mqtt_port, keepalive=30)
    client.loop_start()
    assert got.connected.wait(TIMEOUT_S), f"no CONNACK for {client_id}"
    return client, got


def published(client, topic: str, body: bytes) -> int:
    """Publish at QoS 1; the PUBACK's reason code."""
    codes = []
    client.on_publish = (lambda client, userdata, mid, reason_code, properties:
                         codes.append(int(reason_code.value)))
    client.publish(topic, body, qos=1).wait_for_publish(TIMEOUT_S)
    wait_until(lambda: codes, TIMEOUT_S, what=f"the PUBACK of {topic}")
    return codes[0]


def test_devices_log_in_over_tls_by_password_or_client_certificate(mesh, tmp_path):
    tls = tmp_path / "tls"
    server_ca = make_ca(tls / "server-ca", "meshroute test server CA")
    key, cert = make_server_cert(tls, *server_ca)
    clients_ca = make_ca(tls / "clients-ca", "meshroute test clients CA")
    sensor = make_client_cert(tls, *clients_ca, "sensor-7")
    a = mqtt_router(mesh, "router-a")
    a.extra["mqtt.listener"].update({
        "endpoint": f"ssl:{a.mqtt_port}:interface=127.0.0.1:privateKey={key}:certKey={cert}",
        "client-ca": str(tls / "clients-ca" / "ca.pem")})
    users = a.directory / "users"
    write_users(str(users), {"dashboard": derive("dashboard-pw")})
    a.extra["security"] = {"users-file": users}
    a.arrays["security.permission"] = [
        {"users": ["dashboard"], "subscribe": ["sensors.#"]},
        {"users": ["sensor-7"], "publish": ["sensors.7.*"]}]
    a.write()
    (a_proc,) = mesh.start(a)

    wrong, refused = tls_client(a, tls, "intruder", login=("dashboard", "guess"))
    assert refused.connacks == [0x86]  # bad user name or password
    wrong.loop_stop()
    nobody, anonymous = tls_client(a, tls, "anonymous")
    # No login and no certificate: the same answer (an unknown user, a
    # wrong password and no proof are not told apart).
    assert anonymous.connacks == [0x86]
    nobody.loop_stop()

    dashboard, got = tls_client(a, tls, "dashboard-1", login=("dashboard", "dashboard-pw"))
    assert got.connacks == [0]
    dashboard.subscribe([("sensors/#", 1), ("alarms/#", 1)])
    wait_until(lambda: got.subacks, TIMEOUT_S, what="the SUBACK")
    assert got.subacks == [[1, 0x87]]  # alarms: not allowed
    device, device_got = tls_client(a, tls, "sensor-7", certificate=sensor)
    assert device_got.connacks == [0]
    assert published(device, "sensors/7/temperature", b"21.5") == 0
    assert published(device, "sensors/8/temperature", b"stolen") == 0x87
    (message,) = got.wait_messages(1)
    assert (message.topic, message.payload) == ("sensors/7/temperature", b"21.5")

    sessions = {s["client_id"]: s for s in a_proc.get("/api/v1/sessions")
                if s["protocol"] == "mqtt"}
    assert {sessions["dashboard-1"]["user"], sessions["sensor-7"]["user"]} == {
        "dashboard", "sensor-7"}
    assert {(e["user"], e["mechanism"]) for e in a_proc.events("security.authenticated")} == {
        ("dashboard", "password"), ("sensor-7", "EXTERNAL")}

    if shutil.which("mosquitto_pub") is not None:
        # The shell's client, as a device would run it.
        subprocess.run(
            ["mosquitto_pub", "-h", "localhost", "-p", str(a.mqtt_port), "-q", "1",
             "--cafile", str(tls / "server-ca" / "ca.pem"), "--cert", str(sensor[1]),
             "--key", str(sensor[0]), "-i", "sensor-7-shell", "-t", "sensors/7/humidity",
             "-m", "40"], check=True, timeout=TIMEOUT_S, capture_output=True)
        assert [m.payload for m in got.wait_messages(2)][1] == b"40"
    stop(device)
    stop(dashboard)

