"""
What a router keeps of a user's password: SCRAM-SHA-256 credentials
(RFC 5802 with RFC 7677's hash).

Per user, the salt, the iteration count, C{StoredKey} and C{ServerKey};
never the password, nor anything that logs in without it: C{StoredKey} is
H(C{ClientKey}), and a SCRAM proof needs C{ClientKey} itself.  A SCRAM
exchange checks a client's proof against these without the password
crossing the wire; a protocol that carries the password itself (STOMP's
C{passcode}, meant for TLS) checks it with L{password_matches}.

Passwords are normalised to NFKC before hashing, the mapping SASLprep
(RFC 4013) applies to everything but its prohibited characters, so one
password typed in two Unicode forms stays one password.
"""

import hashlib
import hmac
import os
import unicodedata
from dataclasses import dataclass

#: RFC 7677's minimum iteration count, and what PostgreSQL stores by
#: default: a login costs a few milliseconds, a guess as much.
DEFAULT_ITERATIONS = 4096

#: Bytes of fresh salt per user.
SALT_SIZE = 16


@dataclass(frozen=True)
class Credentials:
    """
    One user's SCRAM-SHA-256 credentials.
    """

    iterations: int
    salt: bytes
    stored_key: bytes
    server_key: bytes


def _hmac(key: bytes, message: bytes) -> bytes:
    return hmac.new(key, message, hashlib.sha256).digest()


def salted_password(password: str, salt: bytes, iterations: int) -> bytes:
    """
    SCRAM's C{SaltedPassword}: C{Hi(Normalize(password), salt, i)}, which
    is PBKDF2 with HMAC-SHA-256.
    """
    normalized = unicodedata.normalize("NFKC", password).encode("utf-8")
    return hashlib.pbkdf2_hmac("sha256", normalized, salt, iterations)


def client_key(salted: bytes) -> bytes:
    """
    SCRAM's C{ClientKey}, which only the password's holder can compute.
    """
    return _hmac(salted, b"Client Key")


def stored_key(key: bytes) -> bytes:
    """
    SCRAM's C{StoredKey}: the hash of a C{ClientKey}.
    """
    return hashlib.sha256(key).digest()


def server_key(salted: bytes) -> bytes:
    """
    SCRAM's C{ServerKey}, with which a router proves that it knows the
    user's credentials too.
    """
    return _hmac(salted, b"Server Key")


def derive(password: str, *, salt: bytes | None = None,
           iterations: int = DEFAULT_ITERATIONS) -> Credentials:
    """
    The credentials to keep for C{password}, with a fresh salt unless one
    is given.
    """
    if salt is None:
        salt = os.urandom(SALT_SIZE)
    salted = salted_password(password, salt, iterations)
    return Credentials(iterations, salt, stored_key(client_key(salted)), server_key(salted))


def password_matches(credentials: Credentials, password: str) -> bool:
    """
    Whether C{password} is the one C{credentials} were derived from
    (constant time in the comparison).
    """
    salted = salted_password(password, credentials.salt, credentials.iterations)
    return hmac.compare_digest(stored_key(client_key(salted)), credentials.stored_key)
