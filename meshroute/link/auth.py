"""
Mutual challenge-response authentication over a shared secret.

Each side sends a fresh random challenge; each proves knowledge of the
secret with an HMAC-SHA256 over both challenges, both router names and
its own role, so a proof cannot be replayed on another link, reflected
back to its sender, or reused for other names.  The secret itself never
crosses the wire.
"""

import hmac
import os
from hashlib import sha256

from meshroute.wire.frames import CHALLENGE_SIZE

_DOMAIN = b"meshroute link auth v1"


def new_challenge() -> bytes:
    """
    A fresh random challenge.
    """
    return os.urandom(CHALLENGE_SIZE)


def proof(
    secret: bytes,
    role: str,
    connector: str,
    listener: str,
    connector_challenge: bytes,
    listener_challenge: bytes,
) -> bytes:
    """
    The proof that the side playing C{role} ("connector" or "listener")
    knows C{secret}, bound to this link's names and challenges.
    """
    message = b"\x00".join(
        [
            _DOMAIN,
            role.encode(),
            connector.encode(),
            listener.encode(),
            connector_challenge,
            listener_challenge,
        ]
    )
    return hmac.new(secret, message, sha256).digest()


def verify(expected: bytes, presented: bytes) -> bool:
    """
    Constant-time comparison of two proofs.
    """
    return hmac.compare_digest(expected, presented)
