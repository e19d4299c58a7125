"""
The config sections of an HA instance, the primary of router-b's pair,
for the config tests that read C{[ha]} and the twistd plugin's tests
that log its warnings.  C{{secret}} is the password file's path
(L{config_files.write} fills it in).
"""

ROUTER = """
[router]
name = "router-b"
data-dir = "var/b-primary"
"""

HA = """
[ha]
role = "primary"
"""

REPLICATION = """
[ha.replication]
listener = "tcp:7102:interface=127.0.0.1"
peer = "tcp:127.0.0.1:7202"
password-file = "{secret}"
"""
