"""
The router's side of one MQTT connection (3.1.1 and 5.0): a thin adapter
between MQTT packets (L{meshroute.mqtt.packets}) and the served session
(L{meshroute.sessions.served}), which does the work for every client
protocol alike (docs/mqtt.md).  Its stages are the connection machine
every client protocol shares (L{meshroute.sessions.lifecycle}):

 - C{CONNECT} is the hello (C{awaiting_hello} → C{vetting}); any other
   packet before it ends the connection.  The verdict, within its
   handling: the protocol level (4: 3.1.1, 5: 5.0), the client id, the
   will, whether this instance is the active one of its HA pair,
   C{max-sessions}, and, on a router with C{[security]}, the username
   and password against the users' SCRAM verifiers (or a verified TLS
   client certificate, without a username): C{accepted} or C{refused}
   (a CONNACK with the return or reason code, then close:
   L{meshroute.mqtt.refusals}; a will is checked too:
   L{meshroute.mqtt.wills}).
 - C{attached}: the client id is claimed (a connection that had it is
   closed: L{meshroute.mqtt.clients}); a clean session forgets what a
   persistent one of the client id left, a resumed one re-attaches it
   (L{meshroute.mqtt.persistence}); then the session starts, and its
   C{Opened} is the CONNACK.  Packets that arrive before it wait.  Each
   packet then becomes the session's native commands, numbered by this
   adapter: PUBLISH a C{Send} to C{topic:NAME}, SUBSCRIBE one
   C{SubscribeTopic} per filter, UNSUBSCRIBE an C{Unsubscribe} per
   filter, PUBACK an C{Ack} and the credit it frees.
 - C{DISCONNECT} is the goodbye (C{ending}): the session's C{Close}.
 - C{closing}, C{gone}: as for every client connection.  When the
   connection ends without a clean DISCONNECT (or with 5.0's reason
   0x04), its will is published; a persistent session's subscriptions
   stay, collecting, until it comes back or expires.

How the session's answers become MQTT (L{MqttConnectionCore.write}):

 - C{Opened} → C{CONNACK}.
 - C{Confirm} of a QoS 1 PUBLISH → C{PUBACK} (the publication was
   accepted as a native persistent publish is: durable at this router);
   of a SUBSCRIBE's or UNSUBSCRIBE's filter → its code in the SUBACK or
   UNSUBACK, written once every filter is answered.
 - C{Error} of a PUBLISH → 5.0: a PUBACK with the reason code and a
   reason string (QoS 1); 3.1.1, or QoS 0: the connection closes (the
   3.1.1 specification leaves no other way to say it).  Of a filter →
   SUBACK failure (0x80; 5.0: the reason).  C{Error} of command 0 (the
   connection ends) → the CONNACK refusing it, or (5.0) a DISCONNECT
   with the reason code and a reason string.
 - C{Deliver} → C{PUBLISH}, and a PUBACK the session's C{Ack}
   (L{meshroute.mqtt.deliveries}: which QoS, the receive maximum, DUP).

QoS 2 is not served: a 5.0 CONNACK says C{maximum_qos} 1 and a QoS 2
PUBLISH ends the connection (DISCONNECT 0x9B); a 3.1.1 QoS 2 PUBLISH
closes it (logged), and a SUBSCRIBE asking QoS 2 is granted 1.  A
retained PUBLISH is the mesh's retained message of its topic (header
C{x-retain}; docs/topics.md, "Retained messages"), and a SUBSCRIBE asks
for the retained messages its filter matches as its retain handling says
(L{meshroute.mqtt.subscriptions}).

The session sees a connection of native protocol version 2, as STOMP's;
it is not resumable (what outlives an MQTT connection is its persistent
session's durable subscriptions), so a lost connection ends it and its
unacknowledged deliveries go back to their queues, flagged redelivered
(sent again with DUP).  The connection TTL (1.5 times the keep-alive, or
the listener's override), partial packets, the buffer bound and
C{stage-valid-timeout} are every client connection's
(L{meshroute.sessions.connection_core.ConnectionCore}).
"""

import uuid
from dataclasses import dataclass, field

from automat import NoTransition
from twisted.internet.defer import succeed

from meshroute.messages import TOPIC_PREFIX
from meshroute.mqtt import packets as p
from meshroute.mqtt import refusals, wills
from meshroute.mqtt.clients import forget_durables
from meshroute.mqtt.deliveries import MqttDeliveries
from meshroute.mqtt.messages import headers_of, time_to_live_ms
from meshroute.mqtt.packets import MQTT_3_1_1, MQTT_5
from meshroute.mqtt.persistence import durable_client_id
from meshroute.mqtt.reason_codes import ReasonCode as R
from meshroute.mqtt.settings import DEFAULT_TOPIC_ALIAS_MAXIMUM
from meshroute.mqtt.subscriptions import MqttSubscribing
from meshroute.mqtt.topic_names import UnmappableTopic, mesh_topic
from meshroute.sessions.connection_core import ROUTER_STOPPED, ConnectionCore
from meshroute.sessions.connection_inputs import ConnectionInputs
from meshroute.sessions.listener_settings import DEFAULT_PREFETCH_COUNT
from meshroute.sessions.served import MQTT
from meshroute.sessions.written_acks import WrittenAcks
from meshroute.wire import client_frames as f

#: The C{mechanism} of C{security.authenticated} for an MQTT username and
#: password.
PASSWORD = "password"
#: A session expiry interval that never ends (5.0), as a 3.1.1 persistent
#: session's.
NEVER = 0xFFFFFFFF
#: Why the router stops reading a connection whose session is not
#: started yet.
OPENING = "opening"


@dataclass(eq=False)
class MqttConnectionCore(ConnectionCore):
    """
    One MQTT connection: the lifecycle's data and I/O, and what the
    translation needs; its subscriptions (L{MqttSubscribing}) and its
    deliveries (L{MqttDeliveries}) are collaborators of their own.

    @ivar clients: the router's L{meshroute.mqtt.clients.MqttClients}.
    @ivar prefetch_count: each subscription's credit.
    @ivar topic_alias_maximum: the topic aliases a 5.0 client may set.
    @ivar mesh_wide: a SUBACK waits for the interest to reach the mesh.
    @ivar protocol_level: the CONNECT's (4 or 5), 0 before it.
    @ivar client_id: the client id (assigned when the CONNECT had none).
    @ivar clean: the CONNECT's clean session (3.1.1) or clean start (5.0).
    @ivar session_expiry_s: how long the session outlives the connection
        (0: not persistent; L{NEVER}).
    @ivar will: the CONNECT's will, until published or discarded.
    @ivar connacked: the CONNACK was written.
    @ivar ended_for: why the router ended the connection (the reason of a
        drop, the code of a failure), empty if it did not.
    @ivar malformed_reason: the 5.0 reason code of the last packet the
        codec refused.
    @ivar aliases: the topic aliases the client set (5.0).
    @ivar held: the packets that came before the session started.
    """

    clients: object = None
    prefetch_count: int = DEFAULT_PREFETCH_COUNT
    topic_alias_maximum: int = DEFAULT_TOPIC_ALIAS_MAXIMUM
    mesh_wide: bool = True
    protocol_level: int = 0
    client_id: str = ""
    assigned: bool = False
    keep_alive_s: int = 0
    clean: bool = True
    session_expiry_s: int = 0
    session_present: bool = False
    will: object = None
    connacked: bool = False
    ended_for: str = ""
    malformed_reason: int = R.MALFORMED_PACKET
    aliases: dict = field(default_factory=dict)
    held: list = field(default_factory=list)
    subscribing: MqttSubscribing = field(init=False)
    deliveries: MqttDeliveries = field(init=False)
    written_acks: WrittenAcks = field(init=False)
    _publishes: dict = field(default_factory=dict)

    AWAITED = "CONNECT"
    LOG_NAME = "MQTT client"

    def __post_init__(self) -> None:
        super().__post_init__()
        self.subscribing = MqttSubscribing(self)
        self.deliveries = MqttDeliveries(self)
        self.written_acks = WrittenAcks(self)

    @property
    def v5(self) -> bool:
        return self.protocol_level == MQTT_5

    @property
    def persistent(self) -> bool:
        "Whether the session outlives the connection (its subscriptions are durable)."
        return self.session_expiry_s > 0

    @property
    def durable_client(self) -> str:
        return durable_client_id(self.client_id)

    # -- output ---------------------------------------------------------------

    def write(self, frame) -> None:
        """
        The served session's output, as MQTT (the module docstring).
        """
        if not self.connected or self.silent:
            return
        kind = type(frame)
        if kind is f.Deliver:
            self.deliveries.deliver(frame)
        elif kind is f.Confirm:
            self._answered(frame.command_id, None)
        elif kind is f.Error:
            if frame.command_id == 0:
                self._ending(frame)
            else:
                self._answered(frame.command_id, frame)
        elif kind is f.Opened:
            self._connack()

    def send(self, packet) -> None:
        self.transport.write(p.encode(packet, self.protocol_level or MQTT_3_1_1))

    def not_allowed(self, packet) -> str:
        return f"{type(packet).__name__.upper()} is not allowed on this connection now"

    def before_hello(self, packet) -> str:
        return f"{type(packet).__name__.upper()} before CONNECT"

    def _ending(self, frame: f.Error) -> None:
        """
        The connection ends for C{frame.code}: a CONNACK refusing it, or
        (5.0) a DISCONNECT saying why; nothing before a CONNECT was read,
        nor to a 3.1.1 client once connected.
        """
        if not self.protocol_level:
            return
        if not self.connacked:
            reason = (self.malformed_reason if frame.code == refusals.MALFORMED
                      else refusals.connack_reason_code(frame.code))
            self.send(p.Connack(False, reason, self._reason(frame.detail)))
        elif self.v5:
            reason = (self.malformed_reason if frame.code == refusals.MALFORMED
                      else refusals.reason_code(frame.code))
            self.send(p.Disconnect(reason, self._reason(frame.detail)))

    def _reason(self, detail: str) -> dict:
        return {"reason_string": detail[:200]} if self.v5 and detail else {}

    def _connack(self) -> None:
        properties: dict = {}
        if self.v5:
            properties = {"maximum_qos": 1, "shared_subscription_available": 0,
                          "subscription_identifier_available": 0,
                          "wildcard_subscription_available": 1}
            if self.topic_alias_maximum:
                properties["topic_alias_maximum"] = self.topic_alias_maximum
            if self.assigned:
                properties["assigned_client_identifier"] = self.client_id
            override = self.settings.connection_ttl_override
            if override > 0:
                # The keep-alive whose 1.5 times is the TTL in force.
                properties["server_keep_alive"] = max(1, min(65535, override // 1500))
        self.send(p.Connack(self.session_present, R.SUCCESS, properties))
        self.connacked = True

    def _answered(self, command_id: int, error: f.Error | None) -> None:
        """
        The session answered command C{command_id}: C{Confirm} (C{error}
        None) or C{Error}.  A PUBLISH's is its PUBACK, or its refusal.
        """
        publish = self._publishes.pop(command_id, None)
        if publish is None:
            self.subscribing.answered(command_id, error)
            return
        qos, packet_id = publish
        if error is None:
            if qos == 1:
                self.send(p.Puback(packet_id, R.SUCCESS, {}))
        elif qos == 1 and self.v5:
            self.send(p.Puback(packet_id, refusals.reason_code(error.code),
                               self._reason(error.detail)))
        else:
            self.machine.protocol_error(error.code, f"a publication was refused: {error.detail}")

    # -- opening ----------------------------------------------------------------

    def vet(self, inputs: ConnectionInputs, connect) -> None:
        """
        Decide on a CONNECT: C{inputs.accepted} or C{inputs.refused}.
        """
        # The reader refused any other level (MalformedPacket 0x84).
        self.protocol_level = connect.protocol_level
        properties = connect.properties or {}
        if properties.get("authentication_method") is not None:
            inputs.refused(f.NOT_AUTHENTICATED, "enhanced authentication is not served: "
                                                "use a username and password")
            return
        self.clean = connect.clean_start
        if self.v5:
            self.session_expiry_s = properties.get("session_expiry_interval", 0)
            outbox = self.deliveries.outbox
            outbox.receive_maximum = properties.get("receive_maximum", outbox.receive_maximum)
            self.deliveries.maximum_packet_size = properties.get("maximum_packet_size", 0)
        else:
            self.session_expiry_s = 0 if self.clean else NEVER
        self.client_id = connect.client_id
        if not self.client_id:
            if not self.v5 and not self.clean:
                inputs.refused(f.INVALID_ARGUMENT, "an empty client id needs a clean session")
                return
            self.client_id, self.assigned = f"auto-{uuid.uuid4().hex}", True
        refusal = self.serving_refusal()
        if refusal is not None:
            inputs.refused(*refusal)
            return
        if self.security is not None and not self.authentication.password_login(
                inputs, connect.username or "",
                (connect.password or b"").decode("utf-8", "replace"), PASSWORD):
            return
        if connect.will is not None:
            refusal = wills.refusal(connect.will, self.v5,
                                    self.authentication.guard(self.engine.name))
            if refusal is not None:
                inputs.refused(*refusal)
                return
        self.will = connect.will
        self.keep_alive_s = connect.keep_alive
        override = self.settings.connection_ttl_override
        if override != -1:
            self.ttl_ms = override
        else:
            # As the specifications say: 1.5 times the keep-alive; 0 is none.
            self.ttl_ms = connect.keep_alive * 1500 if connect.keep_alive else -1
        inputs.accepted(connect)

    def attach(self, connect) -> None:
        """
        Claim the client id (closing the connection that had it), forget
        what a clean session must not find, then start the session.
        """
        previous = self.clients.claim(self.client_id, self)
        if previous is not None:
            previous.take_over()
        self.pause(OPENING)
        topics = self.engine.topics
        durable = self.durable_client
        if self.clean:
            d = forget_durables(topics, durable)
        else:
            d = succeed(None)
            self.session_present = any(sub.client_id == durable
                                       for sub in topics.durable.values())
        d.addCallback(lambda _: self._open())

    def take_over(self) -> None:
        """
        Another connection claimed this one's client id: it closes (5.0:
        DISCONNECT 0x8E first), its session ends.
        """
        try:
            self.machine.protocol_error(
                refusals.SESSION_TAKEN_OVER,
                f"another connection took client id {self.client_id!r} over")
        except NoTransition:
            # Gone already.
            pass

    def _open(self) -> None:
        if not self.connected or self.silent:
            return
        session = self.new_session(protocol=MQTT, resumable=False, details={
            "mqtt_version": "5.0" if self.v5 else "3.1.1", "keep_alive_s": self.keep_alive_s,
            "persistent": self.persistent})
        self.version = f.TRANSACTIONS_VERSION
        session.start(self, f.Open([self.version], self.client_id, "", self.ttl_ms))
        if not self.clean:
            self.subscribing.resume()
        self.resume(OPENING)
        held, self.held = self.held, []
        for packet in held:
            if self.session is None:
                return
            self.serve(self.machine, packet)
        self.flush_sends()

    # -- connected --------------------------------------------------------------

    def serve(self, inputs: ConnectionInputs, packet) -> None:
        """
        Carry out a packet of the session's business, or DISCONNECT; one
        the adapter does not serve now ends the connection.
        """
        if self.session is None or not self.connacked:
            self.held.append(packet)
            return
        kind = type(packet)
        if kind is p.Publish:
            self.on_publish(inputs, packet)
            return
        self.flush_sends()
        if kind is p.Puback:
            self.deliveries.acked(packet)
        elif kind is p.Subscribe:
            self.subscribing.subscribe(packet)
        elif kind is p.Unsubscribe:
            self.subscribing.unsubscribe(packet)
        elif kind is p.Pingreq:
            self.send(p.Pingresp())
        elif kind is p.Disconnect:
            self.disconnect(inputs, packet)
        else:
            inputs.protocol_error(f.BAD_COMMAND, self.not_allowed(packet))

    def on_publish(self, inputs: ConnectionInputs, packet: p.Publish) -> None:
        """
        PUBLISH: the session's Send to C{topic:NAME}, persistent at QoS
        1; QoS 2 ends the connection.
        """
        if packet.qos > 1:
            inputs.protocol_error(refusals.QOS_NOT_SUPPORTED,
                                  "a PUBLISH of QoS 2: the router grants QoS 1 at most")
            return
        properties = packet.properties or {}
        topic = self._topic(inputs, packet.topic, properties.get("topic_alias"))
        if topic is None:
            return
        try:
            address = TOPIC_PREFIX + mesh_topic(topic)
        except UnmappableTopic as e:
            inputs.protocol_error(f.BAD_ADDRESS, str(e))
            return
        send = f.Send(self.next_command(), address, headers_of(properties, packet.retain),
                      packet.payload, packet.qos == 1, "", time_to_live_ms(properties))
        problem = self.settings.limits.headers_problem(send)
        if problem is not None:
            inputs.over_limit(problem)
            return
        self._publishes[send.command_id] = (packet.qos, packet.packet_id)
        self.take_send(send)

    def _topic(self, inputs: ConnectionInputs, topic: str, alias: int | None) -> str | None:
        """
        The topic a PUBLISH names, by its name or (5.0) its alias, which
        a name sets; None: the connection ends for a bad alias.
        """
        if alias is None:
            return topic
        if not 1 <= alias <= self.topic_alias_maximum:
            inputs.protocol_error(refusals.TOPIC_ALIAS_INVALID,
                                  f"topic alias {alias} is not 1 to {self.topic_alias_maximum}")
            return None
        if topic:
            self.aliases[alias] = topic
            return topic
        if alias not in self.aliases:
            inputs.protocol_error(f.BAD_COMMAND, f"topic alias {alias} was never set")
            return None
        return self.aliases[alias]

    def disconnect(self, inputs: ConnectionInputs, packet: p.Disconnect) -> None:
        """
        DISCONNECT: the session's Close.  The will is discarded, unless
        (5.0) the reason asks for it; a 5.0 session expiry interval
        replaces the CONNECT's (one set where CONNECT set none is a
        protocol error).
        """
        if not (self.v5 and packet.reason_code == R.DISCONNECT_WITH_WILL_MESSAGE):
            self.will = None
        interval = (packet.properties or {}).get("session_expiry_interval")
        if interval is not None:
            if interval and not self.session_expiry_s:
                inputs.protocol_error(f.BAD_COMMAND, "a session expiry interval set on "
                                                     "DISCONNECT when CONNECT set none")
                return
            self.session_expiry_s = interval
        self.session.machine.got_close(f.Close(self.next_command()))

    # -- closing ----------------------------------------------------------------

    def fell_silent(self) -> None:
        self.written_acks.stop()

    def drop(self, reason: str) -> None:
        self.ended_for = reason
        super().drop(reason)

    def fail(self, code: str, detail: str) -> None:
        self.ended_for = code
        super().fail(code, detail)

    def finish(self) -> None:
        """
        The transport is closed: the session ends; the will is published
        (or, 5.0, once its delay passed); a persistent session's
        subscriptions wait for the client's return (5.0: for its session
        expiry interval), any other's are forgotten.
        """
        super().finish()
        kept = self.clients.release(self.client_id, self)
        if not self.connacked:
            return
        # A router that stops (or an HA instance that hands over) sends
        # its clients elsewhere: they did not fail, their wills wait.
        stopping = self.ended_for in (ROUTER_STOPPED, f.NOT_ACTIVE)
        if kept and not stopping:
            self._left()
        will, self.will = self.will, None
        if will is None or stopping:
            return
        engine, clock, client_id = self.engine, self.clock, self.client_id
        delay = wills.delay_s(will, self.v5, self.session_expiry_s)
        if delay and kept:
            self.clients.later(client_id, delay, "will",
                               lambda: wills.publish(engine, clock, client_id, will))
        else:
            wills.publish(engine, clock, client_id, will)

    def _left(self) -> None:
        """
        The client went away: its durable subscriptions are forgotten now
        (a session that is not persistent) or when its session expires.
        """
        topics, durable = self.engine.topics, self.durable_client
        if not self.persistent:
            forget_durables(topics, durable)
        elif self.session_expiry_s != NEVER:
            self.clients.later(self.client_id, self.session_expiry_s, "expiry",
                               lambda: forget_durables(topics, durable))
