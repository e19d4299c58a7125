"""
STOMP 1.2, 1.1 and 1.0 for clients in any language: the wire, and how it
reaches the router.

 - L{meshroute.stomp.frames}: the sans-IO frame parser and encoder, with
   explicit limits and one error type (L{frames.StompProtocolError}).
 - L{meshroute.stomp.websocket}: STOMP over WebSocket (subprotocols
   C{v12.stomp}, C{v11.stomp}, C{v10.stomp}) for browsers, serving any
   stream protocol.
 - L{meshroute.stomp.versions}: the versions spoken, the one a CONNECT
   settles, and what each means for a connection.
 - L{meshroute.stomp.settings}: C{[stomp.listener]}'s settings, and the
   rules that judge them together.
 - L{meshroute.stomp.connection}: the router's side of one STOMP
   connection, translating STOMP frames into the served session's commands
   and its answers back (docs/stomp.md); with what it holds apart: the
   client's subscriptions and their ack modes
   (L{meshroute.stomp.subscriptions}), the receipts it owes
   (L{meshroute.stomp.receipts}), the heart-beats
   (L{meshroute.stomp.heartbeats}).
 - L{meshroute.stomp.listener}: the thin protocol and the
   L{listener.StompFactory} of the C{[stomp.listener]} endpoints.

The session logic and the connection machine STOMP clients share with
native ones are L{meshroute.sessions}; the TOML loader reads
C{[stomp.listener]} into its settings.
"""
