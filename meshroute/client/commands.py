"""
The bookkeeping of a session's commands, without I/O: ids, the replay
buffer bounded by C{confirmation-window-size}, the answers awaited, and the
commands waiting for room (docs/client-protocol.md, "Sessions that survive
failures").

A transacted client's sends and acknowledgements belong to a
L{Transaction}, which the client opens with a C{Begin} before the first
of them and ends with C{Commit} or C{Rollback} (answered like a C{Send}).

A L{Command} gets its id only when it is written: a command that waits for
room in the replay buffer waits in L{CommandLog.waiting}, in order, and
takes the next id when it fits.  A written command is I{done} when it is
answered (C{Confirm}/C{Error}; C{Send}, C{Subscribe}, C{Unsubscribe}) or
covered by C{Processed} (C{Ack}, C{Credit}, C{Close}, which have no answer
of their own); it leaves the replay buffer when answered or covered by
C{Processed}, whichever comes first.  L{CommandLog.answered_up_to} is the
highest id up to which every command is done: what C{Received} and
C{Open} report.
"""

from bisect import bisect_right
from collections import OrderedDict, deque
from dataclasses import dataclass

from twisted.internet.defer import Deferred

from meshroute.client.two_phase import BY_XID, ENDING
from meshroute.wire.client_frames import SendBatch
from meshroute.wire.codec import encode, encode_items

SEND = "send"
SEND_BATCH = "send-batch"
SUBSCRIBE = "subscribe"
UNSUBSCRIBE = "unsubscribe"
ACK = "ack"
CREDIT = "credit"
CLOSE = "close"
BEGIN = "begin"
COMMIT = "commit"
ROLLBACK = "rollback"

SEND_BATCH_TYPE = SendBatch.TYPE

#: The commands the router answers one by one with Confirm or Error (a
#: Recover with Recovered).
ANSWERED = frozenset({SEND, SEND_BATCH, SUBSCRIBE, UNSUBSCRIBE, COMMIT, ROLLBACK,
                      *ENDING, *BY_XID})


class SendDeferred(Deferred):
    """
    The Deferred of one message's send (L{Client.send}, L{Producer.send}):
    a target of L{SendOutcomes}, firing with the message id or failing.

    @ivar on_settled: called with 1 once the send has its outcome, before
        the Deferred fires (a L{Producer}'s window); None for none.
    """

    on_settled = None

    def answered(self, index: int, msg_ids: list) -> None:
        if self.on_settled is not None:
            self.on_settled(1)
        self.callback(msg_ids[0])

    def failed(self, index: int, count: int, error) -> None:
        if self.on_settled is not None:
            self.on_settled(1)
        self.errback(error)


class SendGroup:
    """
    The outcome of the sends one call made (L{Client.send_many},
    L{Producer.send_many}): ONE Deferred for all of them, so that a
    high-rate producer pays for a Deferred per call rather than per
    message.  It fires with the message ids in order once every send was
    accepted, or fails with the failure of the first refused message (in
    message order) once every send has its outcome.

    @ivar deferred: what the application waits on.
    @ivar on_settled: called with how many sends of the group just got
        their outcome, as they come (a L{Producer}'s window); None for none.
    """

    __slots__ = ("deferred", "on_settled", "_msg_ids", "_unsettled", "_failed_at", "_failure")

    def __init__(self, count: int, on_settled=None) -> None:
        self.deferred = Deferred()
        self.on_settled = on_settled
        self._msg_ids: list = [None] * count
        self._unsettled = count
        self._failed_at = count
        self._failure = None

    def answered(self, index: int, msg_ids: list) -> None:
        """
        The sends C{index} on were accepted, with C{msg_ids}.
        """
        self._msg_ids[index:index + len(msg_ids)] = msg_ids
        self._settled(len(msg_ids))

    def failed(self, index: int, count: int, error) -> None:
        """
        The C{count} sends from C{index} on failed with C{error}.
        """
        if index < self._failed_at:
            self._failed_at, self._failure = index, error
        self._settled(count)

    def _settled(self, count: int) -> None:
        self._unsettled -= count
        if self.on_settled is not None:
            self.on_settled(count)
        if self._unsettled:
            return
        if self._failure is None:
            self.deferred.callback(self._msg_ids)
        else:
            self.deferred.errback(self._failure)


def _start(segment: tuple) -> int:
    return segment[0]


class SendOutcomes:
    """
    What a send command (a Send, or a SendBatch of n messages) waits on:
    where its messages came from.  The messages of one command may come
    from several calls (a turn's L{Client.send}s) and one call's may span
    several commands (a L{SendGroup} larger than a SendBatch), so the
    command keeps I{segments}: C{(offset, target, index)}, its messages
    from C{offset} on being the target's from C{index} on, up to the next
    segment.  An answer for a run of messages is handed to each target
    once, not once per message.
    """

    __slots__ = ("_segments", "_open")

    def __init__(self, count: int, segments: list) -> None:
        self._segments = segments
        # One byte per message: 1 until it has its outcome.
        self._open = bytearray(b"\x01") * count

    def answered(self, offset: int, msg_ids: list) -> None:
        """
        The messages C{offset} to C{offset + len(msg_ids) - 1} of the
        command were accepted, with C{msg_ids}.
        """
        self._settle(offset, len(msg_ids), msg_ids, None)

    def failed(self, offset: int, error) -> None:
        """
        The command's message C{offset} failed with C{error}.
        """
        self._settle(offset, 1, None, error)

    def errback(self, error) -> None:
        """
        Every message of the command still without its outcome failed with
        C{error} (the session was lost or closed).
        """
        open_ = self._open
        start = open_.find(1)
        while start >= 0:
            end = open_.find(0, start)
            if end < 0:
                end = len(open_)
            self._settle(start, end - start, None, error)
            start = open_.find(1, end)

    def _settle(self, offset: int, count: int, msg_ids: list | None, error) -> None:
        open_, segments = self._open, self._segments
        open_[offset:offset + count] = bytes(count)
        first, end = offset, offset + count
        i = bisect_right(segments, offset, key=_start) - 1
        while offset < end:
            start, target, index = segments[i]
            i += 1
            upto = min(end, segments[i][0] if i < len(segments) else len(open_))
            if error is None:
                target.answered(index + offset - start, msg_ids[offset - first:upto - first])
            else:
                target.failed(index + offset - start, upto - offset, error)
            offset = upto


@dataclass(eq=False, slots=True)
class Transaction:
    """
    One transaction of a transacted client: from its first send or
    acknowledgement to C{commit()} or C{rollback()}.

    @ivar begun: its C{Begin} was issued in the current session, so the
        router holds (or will hold) its work.
    @ivar rollback_only: why it can only roll back ("" while it can
        commit): the session its work was held in was lost.
    @ivar xid: its xid, when C{tpc_begin} began it (a two-phase
        transaction), else None.
    @ivar prepared: the router confirmed its C{Prepare}: it is durable
        there, decided by a commit or rollback of its xid.
    """

    begun: bool = False
    rollback_only: str = ""
    xid: tuple | None = None
    prepared: bool = False


@dataclass(eq=False, slots=True)
class Command:
    """
    One command of the session, before and after it is written.

    @ivar kind: C{send}, C{subscribe}, C{unsubscribe}, C{ack}, C{credit},
        C{close}, or a transaction's (C{begin}, C{commit}, C{rollback},
        and two-phase commit's, L{meshroute.client.two_phase}).
    @ivar frame_type: its frame class ...
    @ivar args: ... and the frame's fields after the command id (dropped
        once written: the replay buffer keeps the bytes).
    @ivar deferred: what the application waits on (None for the client's
        own commands: acknowledgements, credit, re-subscriptions); for a
        C{send} or C{send-batch}, its L{SendOutcomes}.
    @ivar subscription: the subscription a (un)subscribe or credit is for.
    @ivar transaction: the L{Transaction} a transacted client's command
        belongs to (None outside transactions).
    @ivar command_id: its id once written (0 before); a C{send-batch}'s
        first, the batch being the C{count} commands from it on.
    @ivar count: how many commands it is (the messages of a batch).
    @ivar unanswered: how many of them await their answer.
    """

    kind: str
    frame_type: type
    args: tuple | None
    deferred: Deferred | None = None
    subscription: object = None
    transaction: Transaction | None = None
    command_id: int = 0
    count: int = 1
    unanswered: int = 1
    _encoded_for: int = 0
    _encoded: bytes = b""

    def encoded(self, command_id: int) -> bytes:
        """
        The bytes of this command with C{command_id}.
        """
        if self._encoded_for != command_id:
            if self.kind == SEND_BATCH:
                # Its items were checked as each message's Send (by the
                # client's calls): the frame's own check of every item
                # would cost as much again.
                self._encoded = encode_items([SEND_BATCH_TYPE, command_id, *self.args])
            else:
                self._encoded = encode(self.frame_type(command_id, *self.args))
            self._encoded_for = command_id
        return self._encoded


class CommandLog:
    """
    The commands of one session that are not done, and those waiting to be
    written.

    @ivar window: C{confirmation-window-size} in bytes; -1: no replay
        buffer (nothing waits for room).
    @ivar last_id: the id of the last command written in this session.
    @ivar pending: written commands awaiting their answer, by id.
    @ivar waiting: commands not yet written, in order.
    @ivar replay_bytes: the size of the replay buffer.
    """

    def __init__(self, window: int) -> None:
        self.window = window
        self.last_id = 0
        self.pending: dict[int, Command] = {}
        self.waiting: deque[Command] = deque()
        self.replay_bytes = 0
        self._replay: OrderedDict[int, bytes] = OrderedDict()
        # The written commands done only by Processed and not yet covered,
        # in order and as a set; and how far every command is known done.
        self._unprocessed: deque[int] = deque()
        self._unprocessed_ids: set[int] = set()
        self._done_up_to = 0

    def answered_up_to(self) -> int:
        """
        The highest command id up to which every command is done.
        """
        done, last = self._done_up_to, self.last_id
        pending, unprocessed = self.pending, self._unprocessed_ids
        while done < last and done + 1 not in pending and done + 1 not in unprocessed:
            done += 1
        self._done_up_to = done
        return done

    def has_room(self, size: int) -> bool:
        """
        Whether a command of C{size} bytes fits in the replay buffer now.
        An empty buffer takes any one command, however large, so that a
        command bigger than the window cannot wait forever.
        """
        return self.window < 0 or self.replay_bytes == 0 or self.replay_bytes + size <= self.window

    def next_to_write(self) -> tuple[Command, bytes] | None:
        """
        Take the first waiting command if it fits, give it the next id and
        record it as written.

        @return: the command and its bytes, or None when nothing waits or
            the first waiting command does not fit.
        """
        if not self.waiting:
            return None
        command = self.waiting[0]
        command_id = self.last_id + 1
        data = command.encoded(command_id)
        if not self.has_room(len(data)):
            return None
        self.waiting.popleft()
        self._record(command, command_id, data)
        return command, data

    def write_now(self, command: Command) -> bytes | None:
        """
        Record C{command} as written at once if nothing waits before it and
        it fits; otherwise queue it.

        @return: its bytes if it is to be written now.
        """
        if not self.waiting:
            command_id = self.last_id + 1
            data = command.encoded(command_id)
            if self.has_room(len(data)):
                self._record(command, command_id, data)
                return data
        self.waiting.append(command)
        return None

    def _record(self, command: Command, command_id: int, data: bytes) -> None:
        command.command_id = command_id
        last = self.last_id = command_id + command.count - 1
        command.args = None
        command._encoded = b""
        if self.window >= 0:
            # A batch by its last id: it is replayed until all of it is done.
            self._replay[last] = data
            self.replay_bytes += len(data)
        if command.kind in ANSWERED:
            pending = self.pending
            for one in range(command_id, last + 1):
                pending[one] = command
        else:
            self._unprocessed.append(command_id)
            self._unprocessed_ids.add(command_id)

    def answered(self, command_id: int) -> Command | None:
        """
        The router answered C{command_id}.

        @return: the command, or None if it is not awaiting an answer (an
            answer re-sent after a reattachment that had already arrived).
        """
        command = self.pending.pop(command_id, None)
        if command is None:
            return None
        self._count_answers(command, 1)
        return command

    def _count_answers(self, command: Command, n: int) -> None:
        """
        C{n} more of C{command}'s commands were answered: once all of them
        are, it leaves the replay buffer.
        """
        command.unanswered -= n
        if not command.unanswered:
            data = self._replay.pop(command.command_id + command.count - 1, None)
            if data is not None:
                self.replay_bytes -= len(data)

    def answered_run(self, first: int, count: int) -> list[tuple[Command, int, int, int]]:
        """
        The router answered the commands C{first} to C{first + count - 1}
        at once (a Confirmed).

        @return: C{(command, offset, start, n)} for each command of the run
            awaiting its answer: its commands from C{offset} on (the
            run's from C{start} on), C{n} of them, were answered; answers
            re-sent after a reattachment that had already arrived are left
            out.
        """
        pending = self.pending
        answered = []
        i = 0
        while i < count:
            command_id = first + i
            command = pending.get(command_id)
            if command is None:
                i += 1
                continue
            start = i
            end = min(count, i + command.command_id + command.count - command_id)
            while i < end and pending.get(first + i) is command:
                del pending[first + i]
                i += 1
            n = i - start
            answered.append((command, command_id - command.command_id, start, n))
            self._count_answers(command, n)
        return answered

    def processed(self, command_id: int) -> None:
        """
        The router carried out every command up to C{command_id}.
        """
        unprocessed, ids = self._unprocessed, self._unprocessed_ids
        while unprocessed and unprocessed[0] <= command_id:
            ids.discard(unprocessed.popleft())
        replay = self._replay
        while replay:
            first = next(iter(replay))
            if first > command_id:
                break
            self.replay_bytes -= len(replay.pop(first))

    def to_replay(self, last_command_id: int) -> list[bytes]:
        """
        The commands to write again, in order, after a reattachment to a
        session that received every command up to C{last_command_id}.
        """
        return [data for command_id, data in self._replay.items() if command_id > last_command_id]

    def new_session(self) -> list[Command]:
        """
        The session is gone: forget every written command.  Commands
        waiting to be written stay, to be written in the next session.

        @return: the written commands that were awaiting an answer, in
            order: their outcome is unknown.
        """
        unknown = list({self.pending[command_id]: None for command_id in sorted(self.pending)})
        self.pending = {}
        self._replay.clear()
        self.replay_bytes = 0
        self._unprocessed.clear()
        self._unprocessed_ids.clear()
        self._done_up_to = 0
        self.last_id = 0
        return unknown
