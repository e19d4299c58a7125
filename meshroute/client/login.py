"""
The client's side of authentication (client protocol version 5,
docs/security.md): L{Login}.

A router with users answers a version-5 Open with the mechanisms it
accepts (L{f.Mechanisms}) before Opened: the client authenticates with
SCRAM-SHA-256 when it has a password (C{ClientOptions.user} and
C{password}), else with its TLS client certificate (C{EXTERNAL}) when the
router offers that, and checks the router's own proof in
L{f.Authenticated}; the Open timeout covers the exchange.  A router that
needs a password the client lacks is a refusal (C{not-authenticated}), as
the router's own refusals are.  Every connection of the session logs in
again, as the same user.
"""

from meshroute.client.options import ClientOptions
from meshroute.client.router_connection import RouterConnection
from meshroute.client.session_machine import ClientInputs
from meshroute.security.scram import MECHANISM as SCRAM
from meshroute.security.scram import ScramClient, ScramError
from meshroute.wire import client_frames as f


class Login:
    """
    The exchange of one connection's login, between its Open and Opened.
    """

    def __init__(self, options: ClientOptions, connection: RouterConnection,
                 machine: ClientInputs) -> None:
        self._options = options
        self._connection = connection
        self._machine = machine
        self._scram: ScramClient | None = None

    def authenticate(self, frame: f.Mechanisms) -> None:
        """
        Answer the router's mechanisms: SCRAM with a password, else a TLS
        certificate; with neither, refuse (as the router would).
        """
        options, connection = self._options, self._connection
        if options.password is not None and SCRAM in frame.mechanisms:
            self._scram = ScramClient(options.user, options.password)
            connection.write_frame(f.Authenticate(SCRAM, self._scram.first()))
        elif f.EXTERNAL in frame.mechanisms:
            self._scram = None
            connection.write_frame(f.Authenticate(f.EXTERNAL, b""))
        else:
            self._machine.got_refusal(f.Error(0, f.NOT_AUTHENTICATED, (
                f"router at {connection.endpoints.current} requires authentication "
                f"({', '.join(frame.mechanisms)}): give a user and password, or a client "
                "certificate")))

    def respond(self, frame: f.Challenge) -> None:
        """
        Answer the SCRAM challenge with the proof.
        """
        if self._scram is None:
            self._connection.broken("a Challenge the client did not ask for")
            return
        try:
            self._connection.write_frame(f.AuthResponse(self._scram.final(frame.data)))
        except ScramError as e:
            self._connection.broken(f"the router's SCRAM challenge: {e}")

    def check_router(self, frame: f.Authenticated) -> None:
        """
        Check the router's proof that it holds the user's credentials
        (mutual authentication); Opened follows.
        """
        scram, self._scram = self._scram, None
        if scram is None:
            return
        try:
            scram.verify(frame.data)
        except ScramError as e:
            self._connection.broken(f"router at {self._connection.endpoints.current} did not "
                                    f"prove it knows the user's credentials: {e}")
