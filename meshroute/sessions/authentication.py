"""
Who the client of one connection is, and how it proves it, whatever the
protocol: a verified TLS client certificate naming a user (C{EXTERNAL}),
a user and password carried in the hello (STOMP's C{login} and
C{passcode}, MQTT's username and password), or the native protocol's
SCRAM exchange, whose steps L{meshroute.sessions.native_connection}
takes and whose outcome it reports here.

Every refusal is the same answer (L{NOT_AUTHENTICATED}), and an unknown
user is checked against decoy credentials as slowly as a known one, so
that a client cannot learn which users exist; why it was refused is only
recorded (C{security.denied}).  Once authenticated, the user is fixed for
the connection's life; if it later leaves C{[security]}, the listener's
watch asks L{ClientAuthentication.still_allowed} and ends the connection.
"""

from twisted.internet.interfaces import ITransport
from twisted.logger import Logger

from meshroute import events as event_names
from meshroute.security.credentials import password_matches
from meshroute.security.scram import decoy_credentials
from meshroute.sessions.connection_inputs import ConnectionInputs
from meshroute.sessions.permissions import CONNECT, Guard, denied
from meshroute.sessions.tls import certificate_user
from meshroute.wire import client_frames as f
from meshroute.wire.transport import peer_address

log = Logger()

#: The detail of every C{not-authenticated} refusal, whatever the protocol:
#: the same for an unknown user, a wrong password and a certificate naming
#: nobody.
NOT_AUTHENTICATED = "authentication failed"


class ClientAuthentication:
    """
    The authentication of one client connection.

    @param transport: the connection's, whose TLS certificate and peer
        address it reads.
    @param events: where C{security.authenticated} and C{security.denied}
        go.
    @param security: the router's L{meshroute.security.policy.Security}
        (None: clients are not authenticated).
    @param secret: what unknown users' decoy credentials derive from.
    @param verifies_certificates: the listener verifies TLS client
        certificates against C{client-ca}: a certificate's subject CN
        names a user (C{EXTERNAL}).
    @param log_name: how the log names a client of the protocol.
    @ivar user: who the client is, once authenticated (fixed for the
        connection's life); C{mechanism}, how it proved it.
    """

    def __init__(self, transport: ITransport, events, security, secret: bytes,
                 verifies_certificates: bool, log_name: str) -> None:
        self._transport = transport
        self._events = events
        self._security = security
        self._secret = secret
        self._verifies_certificates = verifies_certificates
        self._log_name = log_name
        self.user: str | None = None
        self.mechanism = ""

    def certificate_user(self) -> str | None:
        """
        The user the client's verified TLS certificate names (its subject
        CN), or None (also where the listener verifies no certificates).
        """
        return certificate_user(self._transport) if self._verifies_certificates else None

    def authenticated(self, user: str, mechanism: str) -> None:
        """
        The client proved it is C{user} (by C{mechanism}): so it is for
        the connection's life.
        """
        self.user, self.mechanism = user, mechanism
        self._events.emit(event_names.SECURITY_AUTHENTICATED, user=user, mechanism=mechanism)
        log.info("{client} from {address} authenticated as {user!r} ({mechanism})",
                 client=self._log_name, address=peer_address(self._transport), user=user,
                 mechanism=mechanism)

    def password_login(self, inputs: ConnectionInputs, user: str, password: str,
                       mechanism: str) -> bool:
        """
        Whether C{user} and C{password}, carried in a hello (STOMP's
        C{login} and C{passcode}, MQTT's username and password), name a
        user of C{[security]} (or, without C{user}, a verified TLS client
        certificate does); if not, the client is refused with
        L{not_authenticated}: the same for an unknown user and a wrong
        password, and as slow (an unknown user is checked against decoy
        credentials).
        """
        if not user:
            certified = self.certificate_user()
            if certified is not None:
                self.authenticated(certified, f.EXTERNAL)
                return True
        credentials = self._security.policy.credentials(user) if user else None
        known = credentials is not None
        if credentials is None:
            credentials = decoy_credentials(self._secret, user)
        if not (password_matches(credentials, password) and known):
            self.not_authenticated(
                inputs, user, "no login" if not user else f"unknown user or wrong {mechanism}")
            return False
        self.authenticated(user, mechanism)
        return True

    def not_authenticated(self, inputs: ConnectionInputs, user: str, why: str) -> None:
        """
        Refuse the client, with one answer whatever C{why} (recorded as
        C{security.denied} for C{user}, as far as it is known).
        """
        denied(self._events, user, CONNECT, peer_address(self._transport), why)
        inputs.refused(f.NOT_AUTHENTICATED, NOT_AUTHENTICATED)

    def still_allowed(self, policy) -> bool:
        """
        Whether the connection's user is still a user under C{policy}: in
        its users file (a password user), or named by a permission (a
        certificate user).
        """
        if self.user is None:
            return True
        if self.mechanism == f.EXTERNAL:
            return policy.names(self.user)
        return policy.credentials(self.user) is not None

    def guard(self, router: str) -> Guard | None:
        """
        The permission checks of the authenticated user on C{router} (its
        sessions', its MQTT will's), or None while no user is: clients
        are not authenticated.
        """
        if self.user is None:
            return None
        return Guard(self._security, self.user, router, self._events)
