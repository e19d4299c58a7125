"""
The router's side of its clients: their sessions, and the listener that
speaks the native client protocol to them.

 - L{meshroute.sessions.session}: the router's side of one session, an
   Automat machine; a session outlives its connections.
 - L{meshroute.sessions.connection}: the router's side of one native
   connection (open, authentication, attach), an Automat machine.
 - L{meshroute.sessions.protocol}: the thin protocol and the
   L{ClientFactory} for the C{[clients.listener]} endpoint.
 - L{meshroute.sessions.transaction}, L{meshroute.sessions.limits},
   L{meshroute.sessions.permissions}, L{meshroute.sessions.tls},
   L{meshroute.sessions.ha_view}: what a session holds, may take, may do,
   and is told.

The frames both sides speak are L{meshroute.wire.client_frames}
(docs/client-protocol.md is their narrative); the application's side, the
Twisted client API, is L{meshroute.client}.
"""
