"""
TLS client certificates on the client listener.

C{[clients.listener] client-ca = "PATH"} (with an C{ssl:} endpoint) makes
the listener ask every client for a certificate and verify the one it is
given against that CA; a client without one may still connect, and
authenticate with a password (SCRAM) over the encrypted connection.  A
verified certificate's subject CN names the user it authenticates
(C{EXTERNAL}, L{meshroute.sessions.native_connection}).

Twisted's C{ssl:} server endpoint string has no option for a client CA,
so the listener's endpoint is made from the string as usual and its TLS
context is then told to verify peers: everything else the operator put in
the string (key, certificate chain, DH parameters, method) stays as given.
"""

from cryptography.x509.oid import NameOID
from OpenSSL import SSL
from twisted.internet.endpoints import SSL4ServerEndpoint
from twisted.internet.ssl import Certificate

#: The session id context OpenSSL needs on a server that verifies peers.
_SESSION_CONTEXT = b"meshroute-clients"


def load_client_ca(path: str) -> Certificate:
    """
    The CA certificate in the PEM file C{path}.

    @raise OSError: the file cannot be read.
    @raise ValueError: it holds no PEM certificate.
    """
    with open(path, "rb") as f:
        data = f.read()
    try:
        return Certificate.loadPEM(data)
    except Exception as e:
        raise ValueError(f"{path} holds no PEM certificate ({e})") from None


def client_ca_problem(client_ca: str, endpoints: list[str]) -> str | None:
    """
    What keeps C{client_ca} from authenticating clients of a listener at
    C{endpoints}, or None: it needs an C{ssl:} endpoint among them (a
    certificate over plain TCP proves nothing) and a readable PEM
    certificate.
    """
    if not any(endpoint.startswith("ssl:") for endpoint in endpoints):
        return ("client certificates need an ssl: endpoint, not "
                f"{' or '.join(map(repr, endpoints))}")
    try:
        load_client_ca(client_ca)
    except OSError as e:
        return f"cannot read {client_ca!r}: {e.strerror}"
    except ValueError as e:
        return str(e)
    return None


def certificate_user(transport) -> str | None:
    """
    The user the verified TLS client certificate of C{transport} names
    (its subject CN), or None: no certificate, or no CN.
    """
    certificate = getattr(transport, "getPeerCertificate", lambda: None)()
    if certificate is None:
        return None
    names = certificate.to_cryptography().subject.get_attributes_for_oid(NameOID.COMMON_NAME)
    if not names:
        return None
    return str(names[0].value) or None


def verify_client_certificates(endpoint, ca: Certificate) -> None:
    """
    Make the TLS server C{endpoint} (from an C{ssl:} string) request client
    certificates and accept only those C{ca} signed.

    @raise TypeError: C{endpoint} is not a TLS server endpoint.
    """
    if not isinstance(endpoint, SSL4ServerEndpoint):
        raise TypeError("client certificates need an ssl: endpoint")
    context = endpoint._sslContextFactory.getContext()
    context.get_cert_store().add_cert(ca.original)
    context.set_verify(SSL.VERIFY_PEER, lambda connection, x509, errno, depth, ok: bool(ok))
    context.set_session_id(_SESSION_CONTEXT)
