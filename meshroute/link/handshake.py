"""
The handshake: what each side of a connection checks in the connect and
authentication stages, and the frames it answers with.

In connect, the connector says who it is and which versions it speaks
(L{hello}: a L{Hello}, or for a vote or replication connection a
L{VoteHello} or L{ReplicaHello}); the listener vets it (L{vet_hello}) and
answers with its keepalive interval and its challenge (L{welcome}), which
the connector vets in turn (L{vet_welcome}).  In authentication each side
proves that it knows the mesh's secret (L{meshroute.link.auth}): the
connector first (L{connector_proof}, vetted by L{vet_authenticate}), then
the listener (L{listener_proof}, vetted by L{vet_authenticated}).  Each
check returns why it refuses, C{(code, detail)} (L{meshroute.link.reasons}),
or None; the machine (L{meshroute.link.machine}) feeds that back as its
C{accepted} or C{refused} input, and L{refuse} tells the peer why.

A routing link claims its peer's router name in the registry once the
peer's proof is good (L{meshroute.link.registry}); a vote or replication
connection claims nothing: it is not a link, and the peer's routing link
(or a pair's other instance, which has the same name) may be up.

Epochs (docs/protocol.md): the instances of an HA pair share a router
name, and each says in L{Hello} (connector) or L{Welcome} (listener) the
epoch it serves in.  A peer from an epoch lower than the highest seen
for its name is refused (C{stale-epoch}); one from a higher epoch than
the link holding its name is not refused C{name-in-use}: once it has
proved the secret and its epoch is durable (L{meshroute.link.epochs};
until then the verdict on its proof is a Deferred), it takes the name,
and the older link closes at once (C{superseded}), its delivery channel
first, so that the two never share the name's outbox.

These are functions of the link's core (L{meshroute.link.core.LinkCore}):
what the handshake settles (the peer's name, epoch, protocol version and
keepalive interval) is the link's for its whole life.
"""

import re

from twisted.internet.defer import Deferred
from twisted.logger import Logger

from meshroute import events
from meshroute.link import auth, reasons
from meshroute.link.core import LinkCore
from meshroute.link.stages import REPLICA, ROUTING, VOTES
from meshroute.wire.frames import (
    CHALLENGE_SIZE,
    EPOCH_VERSION,
    REPLICATION_VERSIONS,
    SUPPORTED_VERSIONS,
    VOTE_VERSIONS,
    Authenticate,
    Authenticated,
    Hello,
    Reject,
    ReplicaHello,
    VoteHello,
    Welcome,
)

log = Logger()


def _versions(purpose: str) -> tuple[int, ...]:
    """
    The protocol versions a connection for C{purpose} may use.
    """
    return {ROUTING: SUPPORTED_VERSIONS, VOTES: VOTE_VERSIONS,
            REPLICA: REPLICATION_VERSIONS}[purpose]


#: What a router name may be.
ROUTER_NAME = re.compile(r"[A-Za-z0-9._-]{1,64}\Z")


def check_fields(frame) -> str | None:
    """
    Wire-level sanity the codec cannot know: challenge sizes and a
    positive keepalive interval.
    """
    challenge = getattr(frame, "challenge", None)
    if challenge is not None and len(challenge) != CHALLENGE_SIZE:
        return f"challenge must be {CHALLENGE_SIZE} bytes"
    if isinstance(frame, Welcome) and frame.keepalive_interval_ms < 1:
        return "keepalive interval must be positive"
    return None


# -- the listener's checks ------------------------------------------------


def vet_hello(core: LinkCore, frame: Hello) -> tuple[str, str] | None:
    """
    Decide whether a connector may proceed to authentication.

    @return: C{(code, detail)} of the refusal, or None.
    """
    core.peer = frame.router
    own = core.context.name
    versions = _versions(core.purpose)
    if core.purpose == VOTES and core.context.witness is None:
        return reasons.VERSION, "this router takes no vote connections"
    if core.purpose == REPLICA and core.context.replication is None:
        return reasons.VERSION, "this router takes no replication connections"
    if core.purpose == ROUTING and core.context.engine is None:
        return reasons.NOT_ALLOWED, "this is an HA replication listener, not a routing one"
    common = set(frame.versions) & set(versions)
    if not common:
        return reasons.VERSION, f"we speak {list(versions)}"
    if not ROUTER_NAME.match(frame.router):
        core.peer = None
        return reasons.NOT_ALLOWED, "malformed router name"
    if core.context.replication is not None:
        # An HA instance's replication listener: only the pair's other
        # instance, which has the same router name, connects there.
        if frame.router != own:
            return reasons.NOT_ALLOWED, f"only {own}'s other instance connects here"
        # Its group is checked once its proof is (L{vet_authenticate}).
        core.peer_group = frame.group
    elif frame.router == own:
        return reasons.OWN_NAME, f"{own} cannot link to itself"
    allowed = core.settings.allowed_routers
    if allowed is not None and frame.router not in allowed:
        return reasons.NOT_ALLOWED, f"{frame.router} is not in allowed-routers"
    if core.purpose == ROUTING:
        core.peer_epoch = frame.epoch
        verdict = _vet_epoch(core)
        if verdict is not None:
            return verdict
    core.keepalive_interval_ms = core.settings.keepalive_interval_ms
    core.version = max(common)
    return None


def welcome(core: LinkCore) -> Welcome:
    """
    The listener's answer to a Hello it accepted: the version chosen, its
    keepalive interval, its challenge, and (from version 3) its epoch.
    """
    return Welcome(
        core.version, core.context.name, core.keepalive_interval_ms, core.own_challenge,
        core.context.epoch if core.version >= EPOCH_VERSION else 0,
    )


def vet_authenticate(core: LinkCore, frame: Authenticate) -> tuple[str, str] | Deferred | None:
    """
    Decide whether the connector's proof lets it in: the secret, the
    pair's group on a replication listener, whether this instance is the
    active one for a replication connection, then the peer's name
    (L{_claim_peer}).
    """
    core.peer_challenge = frame.challenge
    expected = auth.proof(
        core.settings.secret,
        "connector",
        core.peer,
        core.context.name,
        frame.challenge,
        core.own_challenge,
    )
    if not auth.verify(expected, frame.proof):
        return reasons.AUTH_FAILED, "wrong proof: the shared secrets differ"
    pairing = core.context.pairing
    mismatch = None if pairing is None else pairing.vet(core.peer_group)
    if mismatch is not None:
        return reasons.GROUP_MISMATCH, mismatch
    if core.purpose == REPLICA:
        return core.context.replication.refusal()
    return _claim_peer(core)


def listener_proof(core: LinkCore) -> Authenticated:
    """
    The listener's proof, once it accepted the connector's.
    """
    return Authenticated(
        auth.proof(
            core.settings.secret,
            "listener",
            core.peer,
            core.context.name,
            core.peer_challenge,
            core.own_challenge,
        )
    )


# -- the connector's checks -----------------------------------------------


def hello(core: LinkCore) -> Hello | VoteHello | ReplicaHello:
    """
    The connector's opening frame: a link's L{Hello} carries its epoch,
    a vote or replication connection's its HA group.
    """
    core.peer = core.settings.expected_peer
    kind = {ROUTING: Hello, VOTES: VoteHello, REPLICA: ReplicaHello}[core.purpose]
    if core.purpose == ROUTING:
        return Hello(list(SUPPORTED_VERSIONS), core.context.name, core.context.epoch)
    return kind(list(_versions(core.purpose)), core.context.name, core.context.group)


def vet_welcome(core: LinkCore, frame: Welcome) -> tuple[str, str] | None:
    """
    Decide whether the listener's Welcome lets us go on to authentication:
    a version we speak, the router we meant to reach, its epoch.
    """
    versions = _versions(core.purpose)
    if frame.version not in versions:
        return reasons.VERSION, f"we speak {list(versions)}"
    if frame.router != core.settings.expected_peer:
        return (
            reasons.UNEXPECTED_PEER,
            f"expected {core.settings.expected_peer}, reached {frame.router}",
        )
    if core.purpose == ROUTING:
        core.peer_epoch = frame.epoch
        verdict = _vet_epoch(core)
        if verdict is not None:
            return verdict
    core.keepalive_interval_ms = frame.keepalive_interval_ms
    core.peer_challenge = frame.challenge
    core.version = frame.version
    return None


def connector_proof(core: LinkCore) -> Authenticate:
    """
    The connector's proof, and its challenge for the listener's.
    """
    return Authenticate(
        auth.proof(
            core.settings.secret,
            "connector",
            core.context.name,
            core.peer,
            core.own_challenge,
            core.peer_challenge,
        ),
        core.own_challenge,
    )


def vet_authenticated(core: LinkCore, frame: Authenticated) -> tuple[str, str] | Deferred | None:
    """
    Decide whether the listener's proof is good, then claim the peer's
    name (L{_claim_peer}).
    """
    expected = auth.proof(
        core.settings.secret,
        "listener",
        core.context.name,
        core.peer,
        core.own_challenge,
        core.peer_challenge,
    )
    if not auth.verify(expected, frame.proof):
        return reasons.AUTH_FAILED, "listener's proof is wrong: the shared secrets differ"
    return _claim_peer(core)


def _claim_peer(core: LinkCore) -> tuple[str, str] | Deferred | None:
    """
    Make this the one link to the (now authenticated) peer, unless
    another link of its epoch or a newer one authenticated first, or
    its epoch is stale; once its epoch, if it is the highest seen, is
    durable (then the verdict is a Deferred).  A vote or replication
    connection claims nothing: it is not a link, and the peer's routing
    link (or a pair's other instance, which has the same name) may be
    up.
    """
    if core.purpose != ROUTING:
        return None
    peer_epochs = core.context.peer_epochs
    saving = None if peer_epochs is None else peer_epochs.raise_to(core.peer,
                                                                   core.peer_epoch)
    if saving is None:
        return _take_name(core)
    # A link that closed while the epoch was saved takes no name.
    return saving.addCallback(
        lambda _: _take_name(core) if core.close_reason is None else None)


def _take_name(core: LinkCore) -> tuple[str, str] | None:
    """
    The epoch checks again (another link may have raised the epoch or
    taken the name meanwhile), then the name: a link holding it from an
    older epoch is superseded.
    """
    verdict = _vet_epoch(core)
    if verdict is not None:
        return verdict
    registry = core.context.registry
    holder = registry.holder(core.peer)
    if holder is not None and holder is not core.link:
        holder.supersede(core.peer_epoch)
    registry.claim(core.peer, core.link)
    return None


def _vet_epoch(core: LinkCore) -> tuple[str, str] | None:
    """
    Whether the peer's epoch may link: not below the highest seen for
    its name, and above the epoch of a link that holds the name.
    """
    peer, epoch = core.peer, core.peer_epoch
    highest = 0 if core.context.peer_epochs is None else core.context.peer_epochs.highest(peer)
    if epoch < highest:
        return (reasons.STALE_EPOCH,
                f"{peer} serves in epoch {highest}, this instance in epoch {epoch}")
    holder = core.context.registry.holder(peer)
    if holder is not None and holder is not core.link and holder.core.peer_epoch >= epoch:
        return reasons.NAME_IN_USE, f"{peer} is already connected"
    return None


# -- refusals -------------------------------------------------------------


def refuse(core: LinkCore, code: str, detail: str) -> None:
    """
    Tell the peer why we refuse the handshake and record it.

    The refusal is why this link ends, even if the peer hangs up
    before we do (a refused connector usually does).
    """
    if core.close_reason is None:
        core.close_reason = reasons.REJECTED
        core.close_detail = code
    core.cancel_stage_timer()
    core.send(Reject(code, detail))
    core.emit(events.LINK_REJECTED, code=code, detail=detail, by="local")
    log.warn(
        "refused link {link} from {peer} ({direction}): {code} {detail}",
        link=core.link_id,
        peer=core.peer,
        direction=core.direction,
        code=code,
        detail=detail,
    )


def peer_refused(core: LinkCore, frame: Reject) -> None:
    """
    The peer refused the handshake: record it (and tell the pairing of a
    group mismatch).
    """
    core.emit(events.LINK_REJECTED, code=frame.code, detail=frame.detail, by="peer")
    if frame.code == reasons.GROUP_MISMATCH and core.context.pairing is not None:
        core.context.pairing.refused_by_peer(frame.detail)
    log.warn(
        "link {link} to {peer} ({direction}) refused by peer: {code} {detail}",
        link=core.link_id,
        peer=core.peer,
        direction=core.direction,
        code=frame.code,
        detail=frame.detail,
    )
