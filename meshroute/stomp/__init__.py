"""
STOMP 1.2 and 1.1 for clients in any language: the wire, and how it
reaches the router.

 - L{meshroute.stomp.frames}: the sans-IO frame parser and encoder, with
   explicit limits and one error type (L{frames.StompProtocolError}).

The session logic STOMP clients share with native ones is
L{meshroute.sessions}; the C{[stomp.listener]} configuration is
L{meshroute.config}.
"""
