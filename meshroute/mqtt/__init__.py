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
"""
