"""
MQTT 3.1.1 and 5.0 for devices on the mesh: the wire, and how MQTT's
topics map onto the mesh's (docs/mqtt.md).

 - L{meshroute.mqtt.packets}: the sans-IO packet reader and encoder, with
   an explicit maximum packet size and one error type
   (L{packets.MalformedPacket}, which carries the 5.0 reason code to
   answer with); over L{meshroute.mqtt.packet_types} (the packets as
   frozen dataclasses, importable from C{packets}),
   L{meshroute.mqtt.fields} (the data representations),
   L{meshroute.mqtt.properties} (5.0's properties) and
   L{meshroute.mqtt.reason_codes}.
 - L{meshroute.mqtt.topic_syntax}: MQTT's own rules for topic names and
   filters, shared subscriptions and C{$} topics.
 - L{meshroute.mqtt.topic_names}: MQTT topics and filters to the mesh's
   topic names and patterns, and back.

The router's side of an MQTT connection (C{[mqtt.listener]}):

 - L{meshroute.mqtt.listener}: the thin protocol and its factory;
   L{meshroute.mqtt.settings}, the listener's keys.
 - L{meshroute.mqtt.connection}: the adapter between packets and the
   served session, over the connection machine every client protocol
   shares; its collaborators L{meshroute.mqtt.subscriptions} (SUBSCRIBE,
   UNSUBSCRIBE), L{meshroute.mqtt.deliveries} (PUBLISH out, PUBACK in,
   within L{meshroute.mqtt.outbox}), L{meshroute.mqtt.wills}, and the
   rules it applies: L{meshroute.mqtt.refusals} (native codes as reason
   codes), L{meshroute.mqtt.messages} (properties as headers),
   L{meshroute.mqtt.persistence} (a persistent session's durable names).
 - L{meshroute.mqtt.clients}: one router's client ids, takeovers, and
   the timers of clients away (session expiry, will delay).
"""
