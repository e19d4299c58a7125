"""
The voting stage of a vote connection: HA's requests and their answers.

A vote connection (L{meshroute.wire.frames.VoteHello}) takes a link's
connect and authentication stages, then leaves the link's path for this
one.  The listener's side answers each vote request, heartbeat and
start-up question through its router's
L{meshroute.router.witness.Witness} (L{answer}), once the witness's
record is durable; there the stage timer is an idle timer, restarted by
each request (close reason C{idle}).  The connector's side (an HA
instance reaching a witness, L{meshroute.ha.voters}) sends its
instance's requests (L{ask}) and passes each answer to its
L{meshroute.link.context.VoteSide} (L{answered}); there the stage timer
runs only while a request is unanswered (a silent witness: close reason
C{stage-timeout}, and the connector dials again).

These are functions of the link's core (L{meshroute.link.core.LinkCore}),
as the machine (L{meshroute.link.machine}) calls them.
"""

from twisted.logger import Logger

from meshroute import events
from meshroute.link.core import LinkCore
from meshroute.link.inputs import LinkInputs
from meshroute.link.stages import VOTING
from meshroute.wire.frames import (
    Heartbeat,
    HeartbeatAnswer,
    StartAnswer,
    StartQuery,
    VoteAnswer,
    VoteRequest,
)

log = Logger()

# -- the listener: the witness's side -------------------------------------


def begin_voting(core: LinkCore, inputs: LinkInputs) -> None:
    """
    A vote connection's peer proved it belongs to the mesh: answer its
    requests and heartbeats from now on.
    """
    core.begin_stage(inputs, VOTING)
    core.paired()
    log.info("vote connection {link} from {peer} authenticated", link=core.link_id,
             peer=core.peer)


def answer(core: LinkCore, inputs: LinkInputs, asking) -> None:
    """
    Send the witness's answer once it is durable; if it cannot be made
    durable, close the connection without an answer.

    @param asking: the witness's Deferred answer.
    """
    core.heard()
    core.restart_stage_timer(inputs)

    def durable(frame) -> None:
        if core.close_reason is None:
            core.send(frame)

    def failed(failure) -> None:
        if core.close_reason is None:
            inputs.store_failed(failure.getErrorMessage())

    asking.addCallbacks(durable, failed)


# -- the connector: an HA instance's side ---------------------------------


def begin_asking(core: LinkCore) -> None:
    """
    The connector's side of a vote connection is authenticated: no
    timer runs until the first request is sent.
    """
    core.cancel_stage_timer()
    core.stage = VOTING
    core.since = core.context.clock.seconds()
    core.emit(events.LINK_STAGE, stage=VOTING, endpoint=core.endpoint)
    log.info("vote connection {link} to {peer} through {endpoint} authenticated",
             link=core.link_id, peer=core.peer, endpoint=core.endpoint)
    core.on_delivery()
    core.paired()
    core.vote_side.voting(core.link)


def ask(core: LinkCore, inputs: LinkInputs, frame: VoteRequest | Heartbeat | StartQuery) -> None:
    """
    Send a request or heartbeat to the witness; wait stage-valid-timeout
    for the oldest unanswered one.
    """
    core.send(frame)
    core.unanswered += 1
    if core.unanswered == 1:
        core.restart_stage_timer(inputs)


def answered(core: LinkCore, inputs: LinkInputs,
             frame: VoteAnswer | HeartbeatAnswer | StartAnswer) -> None:
    """
    The witness answered the oldest unanswered request (it answers in
    order): wait for the next one, if any.
    """
    core.heard()
    core.unanswered = max(0, core.unanswered - 1)
    if core.unanswered:
        core.restart_stage_timer(inputs)
    else:
        core.cancel_stage_timer()
    core.vote_side.answered(frame)
