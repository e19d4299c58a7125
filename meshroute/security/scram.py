"""
SCRAM-SHA-256 (RFC 5802 with RFC 7677's hash) as two sans-IO exchanges:
L{ScramClient} and L{ScramServer} turn the other side's message into the
next one of their own, and know nothing of frames or sockets.

The four messages, in the RFC's syntax (no channel binding, so the GS2
header is always C{n,,})::

    client-first   n,,n=USER,r=CLIENT_NONCE
    server-first   r=CLIENT_NONCE SERVER_NONCE,s=SALT_B64,i=ITERATIONS
    client-final   c=biws,r=NONCE,p=PROOF_B64
    server-final   v=SERVER_SIGNATURE_B64

The password never crosses the wire: the client proves it knows
C{ClientKey}, the server that it holds C{ServerKey} (mutual
authentication: L{ScramClient.verify} refuses a server that does not).

A user the server does not know is answered with credentials derived
from a per-router secret and the name (L{decoy_credentials}): the same
salt for the same name every time, and an exchange that runs exactly as
for a known user and fails the same way, so that the answers do not tell
which names exist.  Every failure, of parsing or of proof, is one
L{ScramError}.
"""

import base64
import binascii
import hashlib
import hmac
import os
import re

from meshroute.security.credentials import (
    DEFAULT_ITERATIONS,
    SALT_SIZE,
    Credentials,
    client_key,
    salted_password,
    server_key,
    stored_key,
)

#: The mechanism's name, as SASL registers it.
MECHANISM = "SCRAM-SHA-256"

#: The GS2 header of a client that neither supports nor wants channel
#: binding, and C{c=}'s value for it (its base64).
_GS2_HEADER = "n,,"
_CHANNEL_BINDING = base64.b64encode(_GS2_HEADER.encode()).decode()

#: Bytes of randomness in each side's nonce.
NONCE_SIZE = 18

#: Most iterations a client computes for a server: a hostile router must
#: not make a client spin for minutes.
MAX_ITERATIONS = 1_000_000

#: Longest message either side parses (a user name is at most a few
#: hundred bytes; the rest is fixed-size).
MAX_MESSAGE_SIZE = 2048

# A printable ASCII character other than a comma (RFC 5802's "printable").
_NONCE = re.compile(r"[\x21-\x2b\x2d-\x7e]+")


class ScramError(Exception):
    """
    A SCRAM message is malformed, or a proof or signature is wrong.
    """


def _hmac(key: bytes, message: bytes) -> bytes:
    return hmac.new(key, message, hashlib.sha256).digest()


def _xor(a: bytes, b: bytes) -> bytes:
    return bytes(x ^ y for x, y in zip(a, b, strict=True))


def _nonce() -> str:
    return base64.b64encode(os.urandom(NONCE_SIZE)).decode()


def _b64decode(value: str, what: str) -> bytes:
    try:
        return base64.b64decode(value.encode("ascii"), validate=True)
    except (binascii.Error, UnicodeEncodeError):
        raise ScramError(f"{what} is not base64") from None


def _text(message: bytes) -> str:
    if type(message) is not bytes:
        raise ScramError("a SCRAM message must be bytes")
    if len(message) > MAX_MESSAGE_SIZE:
        raise ScramError(f"a SCRAM message is at most {MAX_MESSAGE_SIZE} bytes")
    try:
        return message.decode("utf-8")
    except UnicodeDecodeError:
        raise ScramError("a SCRAM message must be UTF-8") from None


def _attributes(text: str, names: str) -> list[str]:
    """
    The values of the comma-separated C{x=value} attributes of C{text},
    which must be exactly those named by C{names}, in order (extensions
    are refused: this build knows none).
    """
    parts = text.split(",")
    if len(parts) != len(names):
        raise ScramError(f"expected the attributes {','.join(names)}")
    values = []
    for part, name in zip(parts, names, strict=True):
        if not part.startswith(name + "="):
            raise ScramError(f"expected the attribute {name}=")
        values.append(part[2:])
    return values


def _escape(user: str) -> str:
    return user.replace("=", "=3D").replace(",", "=2C")


def _unescape(value: str) -> str:
    if re.search(r"=(?!2C|3D)", value):
        raise ScramError("a user name has an invalid = escape")
    return value.replace("=2C", ",").replace("=3D", "=")


def _auth_message(client_first_bare: str, server_first: str, nonce: str) -> bytes:
    return f"{client_first_bare},{server_first},c={_CHANNEL_BINDING},r={nonce}".encode()


def decoy_credentials(secret: bytes, user: str) -> Credentials:
    """
    Credentials for a user that does not exist: a salt and keys derived
    from C{secret} and the name, so that the same name gets the same salt
    each time, and no password matches them.
    """
    name = user.encode("utf-8", "surrogatepass")
    return Credentials(
        DEFAULT_ITERATIONS,
        _hmac(secret, b"salt\0" + name)[:SALT_SIZE],
        _hmac(secret, b"stored-key\0" + name),
        _hmac(secret, b"server-key\0" + name),
    )


class ScramClient:
    """
    The client's side: C{first()}, then C{final(server_first)}, then
    C{verify(server_final)}.
    """

    def __init__(self, user: str, password: str, *, nonce: str | None = None) -> None:
        self.user = user
        self._password = password
        self._nonce = nonce if nonce is not None else _nonce()
        self._bare = f"n={_escape(user)},r={self._nonce}"
        self._server_signature: bytes | None = None

    def first(self) -> bytes:
        """
        The client-first message.
        """
        return (_GS2_HEADER + self._bare).encode()

    def final(self, server_first: bytes) -> bytes:
        """
        The client-final message answering C{server_first}, with the proof.
        """
        text = _text(server_first)
        nonce, salt_b64, iterations_text = _attributes(text, "rsi")
        if not nonce.startswith(self._nonce) or nonce == self._nonce or not _NONCE.fullmatch(
                nonce):
            raise ScramError("the server's nonce does not extend the client's")
        salt = _b64decode(salt_b64, "the salt")
        if not iterations_text.isdigit() or not 1 <= int(iterations_text) <= MAX_ITERATIONS:
            raise ScramError(f"the iteration count must be 1 to {MAX_ITERATIONS}")
        salted = salted_password(self._password, salt, int(iterations_text))
        key = client_key(salted)
        message = _auth_message(self._bare, text, nonce)
        proof = _xor(key, _hmac(stored_key(key), message))
        self._server_signature = _hmac(server_key(salted), message)
        return (f"c={_CHANNEL_BINDING},r={nonce},"
                f"p={base64.b64encode(proof).decode()}").encode()

    def verify(self, server_final: bytes) -> None:
        """
        Check the server's signature: only a server holding the user's
        C{ServerKey} can make it.
        """
        if self._server_signature is None:
            raise ScramError("the server-final message came before the client-final one")
        (signature,) = _attributes(_text(server_final), "v")
        if not hmac.compare_digest(_b64decode(signature, "the server signature"),
                                   self._server_signature):
            raise ScramError("the server's signature is wrong: it does not know the "
                             "user's credentials")


class ScramServer:
    """
    The server's side: C{first(client_first)}, then C{final(client_final)},
    which raises L{ScramError} unless the proof is right and the user
    exists.

    @param credentials: the credentials of a user name, or None.
    @param secret: the per-router secret L{decoy_credentials} derive from.
    @ivar user: the user the client claims to be, once C{first} parsed it.
    """

    def __init__(self, credentials, secret: bytes, *, nonce: str | None = None) -> None:
        self._credentials = credentials
        self._secret = secret
        self._server_nonce = nonce if nonce is not None else _nonce()
        self.user: str | None = None
        self._known = False
        self._keys: Credentials | None = None
        self._auth_prefix = ""
        self._nonce = ""

    def first(self, client_first: bytes) -> bytes:
        """
        The server-first message answering C{client_first}.
        """
        text = _text(client_first)
        if not text.startswith(_GS2_HEADER):
            raise ScramError("channel binding and authorisation identities are not supported "
                             "(the message must begin with n,,)")
        bare = text[len(_GS2_HEADER):]
        escaped, client_nonce = _attributes(bare, "nr")
        user = _unescape(escaped)
        if not user or not _NONCE.fullmatch(client_nonce):
            raise ScramError("the user name and the nonce must not be empty")
        found = self._credentials(user)
        self.user, self._known = user, found is not None
        self._keys = found if found is not None else decoy_credentials(self._secret, user)
        self._nonce = client_nonce + self._server_nonce
        server_first = (f"r={self._nonce},s={base64.b64encode(self._keys.salt).decode()},"
                        f"i={self._keys.iterations}")
        self._auth_prefix = f"{bare},{server_first}"
        return server_first.encode()

    def final(self, client_final: bytes) -> bytes:
        """
        The server-final message, once C{client_final}'s proof is checked.
        """
        if self._keys is None:
            raise ScramError("the client-final message came before the client-first one")
        binding, nonce, proof_b64 = _attributes(_text(client_final), "crp")
        if binding != _CHANNEL_BINDING or nonce != self._nonce:
            raise ScramError("the channel binding or nonce does not match the exchange")
        proof = _b64decode(proof_b64, "the proof")
        keys = self._keys
        message = f"{self._auth_prefix},c={binding},r={nonce}".encode()
        signature = _hmac(keys.stored_key, message)
        matches = len(proof) == len(signature) and hmac.compare_digest(
            stored_key(_xor(proof, signature)), keys.stored_key)
        if not (matches and self._known):
            raise ScramError("the user is unknown or the proof is wrong")
        return f"v={base64.b64encode(_hmac(keys.server_key, message)).decode()}".encode()
