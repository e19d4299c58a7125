"""
The client side of a router: the native client protocol.

 - L{meshroute.clients.frames}: the frames (C{CLIENT_FRAMES}) and error
   codes; docs/client-protocol.md is their narrative.
 - L{meshroute.clients.session}: the router's side of one session, an
   Automat machine.
 - L{meshroute.clients.protocol}: the thin protocol and the
   L{ClientFactory} for the C{[clients.listener]} endpoint.
 - L{meshroute.clients.limits}: what one client may take of the router.

The application's side, the Twisted client API, is L{meshroute.client}.
"""
