"""
STOMP 1.2 and 1.1 for clients in any language: the wire, and how it
reaches the router.

 - L{meshroute.stomp.frames}: the sans-IO frame parser and encoder, with
   explicit limits and one error type (L{frames.StompProtocolError}).
 - L{meshroute.stomp.websocket}: STOMP over WebSocket (subprotocols
   C{v12.stomp}, C{v11.stomp}) for browsers, serving any stream protocol.
 - L{meshroute.stomp.settings}: C{[stomp.listener]} as the configuration
   loads it.

The session logic STOMP clients share with native ones is
L{meshroute.sessions}; the C{[stomp.listener]} configuration is
L{meshroute.config}.
"""
