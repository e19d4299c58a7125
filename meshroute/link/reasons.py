"""
Why a handshake is refused and why a link closes: the stable codes that
appear on the wire (in L{meshroute.wire.frames.Reject}) and in the event
log (C{link.rejected} C{code}, C{link.closed} C{reason}).
"""

# Rejection codes, sent in a Reject frame.

#: A link to this router name is already alive (any stage).
NAME_IN_USE = "name-in-use"
#: A router tried to connect to itself.
OWN_NAME = "own-name"
#: The challenge-response proof was wrong: the secrets differ.
AUTH_FAILED = "auth-failed"
#: No protocol version in common.
VERSION = "version"
#: The name is malformed or not in the listener's allowed-routers list.
NOT_ALLOWED = "not-allowed"
#: The connector reached a router other than the one it is configured for.
UNEXPECTED_PEER = "unexpected-peer"

#: A replication connection reached an HA instance that is not the active
#: one: there is nothing to follow there.
NOT_ACTIVE = "not-active"

#: The peer is an instance of its router (an HA pair's) whose epoch is
#: lower than the highest this router has seen for that name: an instance
#: that lost its place.
STALE_EPOCH = "stale-epoch"

#: The pair's other instance (an HA pair's vote or replication connection)
#: is configured in another HA group: a mistyped C{group-name}.
GROUP_MISMATCH = "group-mismatch"

REJECTION_CODES = (NAME_IN_USE, OWN_NAME, AUTH_FAILED, VERSION, NOT_ALLOWED, UNEXPECTED_PEER,
                   NOT_ACTIVE, STALE_EPOCH, GROUP_MISMATCH)

# Close reasons, in link.closed events.

#: The keepalive counter reached 0: the peer stopped sending.
KEEPALIVE = "keepalive"
#: A stage before delivery did not complete within stage-valid-timeout.
STAGE_TIMEOUT = "stage-timeout"
#: The peer (or the network) closed the connection.
PEER_CLOSED = "peer-closed"
#: The handshake was refused, by either side.
REJECTED = "rejected"
#: The peer sent bytes that are not a valid frame, or a frame out of stage.
PROTOCOL_ERROR = "protocol-error"
#: This router is shutting down.
SHUTDOWN = "shutdown"
#: This router's store failed a write or read for the link (storing a
#: transfer, recording an acknowledgement, replaying the outbox, taking
#: messages from the backlog): the link closes so that nothing after the
#: failure is acknowledged, and recovery replays what is missing.  On a
#: vote connection: a voter record could not be made durable, so its
#: answer is not sent.
STORE_FAILED = "store-failed"

#: A vote connection received no request or heartbeat for
#: stage-valid-timeout.
IDLE = "idle"

#: The peer's router name serves in a higher epoch now (the new active
#: instance of an HA pair): a link from that epoch was admitted, or a
#: route advertisement from it arrived; this link, from a lower epoch,
#: gives way.
SUPERSEDED = "superseded"

CLOSE_REASONS = (KEEPALIVE, STAGE_TIMEOUT, PEER_CLOSED, REJECTED, PROTOCOL_ERROR, SHUTDOWN,
                 STORE_FAILED, IDLE, SUPERSEDED)
