"""
The per-router secret from which unknown users' decoy SCRAM credentials
derive (L{meshroute.security.scram.decoy_credentials}).

It lives in the data directory (C{client-auth.secret}, mode 0600, made
on first use): a name that is no user must get the same salt after a
restart too, or comparing answers across restarts would tell the names
that exist (whose salts stay) from those that do not.
"""

import os

from meshroute.security.files import read_private, write_private

#: The file's name in the data directory.
SECRET_FILE = "client-auth.secret"

#: Bytes of randomness in a new secret.
SECRET_SIZE = 32


def decoy_secret(data_dir: str) -> bytes:
    """
    The router's decoy secret, made (and kept) on first use.
    """
    path = os.path.join(data_dir, SECRET_FILE)
    if not os.path.exists(path):
        write_private(path, os.urandom(SECRET_SIZE).hex() + "\n")
    return bytes.fromhex(read_private(path).strip())
