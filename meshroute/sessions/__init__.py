"""
The router's side of its clients: their sessions, and the listener that
speaks the native client protocol to them.

One served session, one connection machine, thin protocols:
L{meshroute.sessions.served} is the session logic (subscriptions,
credit, acknowledgements, transactions, the answers and what a
disconnected session holds) for every protocol, and
L{meshroute.sessions.lifecycle} the life of every client connection
(hello, authentication, attached, goodbye; the TTL, partial frames,
limits and every way it ends).  The session's commands are the native
client frames, and what it writes goes to its connection, which speaks
them to the client: the native connection
(L{meshroute.sessions.native_connection}) writes them as they are, the
STOMP connection (L{meshroute.stomp.connection}) numbers STOMP's frames
as native commands and writes the answers as STOMP, the MQTT connection
(L{meshroute.mqtt.connection}) likewise for MQTT's packets.  The
connections of each listener are watched by one
L{meshroute.sessions.watch.ConnectionWatch} each (TTL, partial frames,
stage-valid-timeout).

 - L{meshroute.sessions.served}: the served session, the router's side of
   one client session (the client library's side is
   L{meshroute.client.core}): an Automat machine over a core that
   takes each command in sequence and hands it to its collaborators; a
   session outlives its connections.
 - L{meshroute.sessions.answers}, L{meshroute.sessions.sends},
   L{meshroute.sessions.deliveries}, L{meshroute.sessions.own_queue},
   L{meshroute.sessions.reattachment}, L{meshroute.sessions.transaction}:
   those collaborators: the commands' answers, the Sends relayed to the
   engine, the subscriptions and their deliveries, what waits for a client
   that is away or does not read, the wait for a resume and the resume,
   the transaction.
 - L{meshroute.sessions.registry}: the sessions of the listeners, by id.
 - L{meshroute.sessions.lifecycle}: the router's side of one client
   connection, whatever its protocol, an Automat machine over its inputs
   (L{meshroute.sessions.connection_inputs}) and a core each protocol
   extends (L{meshroute.sessions.connection_core}).
 - L{meshroute.sessions.listener}: the Twisted protocol and factory
   every client listener builds on (the producer, the buffers, the
   watch); L{meshroute.sessions.listener_settings}, the keys every
   protocol listener beside the native one has;
   L{meshroute.sessions.written_acks}, the deliveries a protocol
   acknowledges once written (STOMP's C{ack:auto}, MQTT's QoS 0).
 - L{meshroute.sessions.native_connection}: what native frames mean to
   the connection machine (open, authentication, attach, commands).
 - L{meshroute.sessions.native_listener}: the thin native protocol and
   the L{ClientFactory} for the C{[clients.listener]} endpoint.
 - L{meshroute.sessions.settings}, L{meshroute.sessions.depth},
   L{meshroute.sessions.limits}, L{meshroute.sessions.permissions},
   L{meshroute.sessions.tls}, L{meshroute.sessions.ha_view}: what a
   session is configured with, holds, may take, may do, and is told.
 - L{meshroute.sessions.watch}: a listener's live connections and the one
   timer that checks them.

The frames both sides speak are L{meshroute.wire.client_frames}
(docs/client-protocol.md is their narrative); the application's side, the
Twisted client API, is L{meshroute.client}.
"""
