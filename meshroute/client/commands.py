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

from collections import OrderedDict, deque
from dataclasses import dataclass

from twisted.internet.defer import Deferred

from meshroute.wire.codec import encode

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

#: The commands the router answers one by one with Confirm or Error.
ANSWERED = frozenset({SEND, SEND_BATCH, SUBSCRIBE, UNSUBSCRIBE, COMMIT, ROLLBACK})


class BatchDeferreds:
    """
    The Deferreds of the messages of one SendBatch, in order: what a
    L{Command} of kind C{send-batch} waits on.  Failing it fails every
    message not yet answered (the others have their answer already).
    """

    __slots__ = ("deferreds",)

    def __init__(self, deferreds: list) -> None:
        self.deferreds = deferreds

    def errback(self, error) -> None:
        for d in self.deferreds:
            if not d.called:
                d.errback(error)


@dataclass(eq=False, slots=True)
class Transaction:
    """
    One transaction of a transacted client: from its first send or
    acknowledgement to C{commit()} or C{rollback()}.

    @ivar begun: its C{Begin} was issued in the current session, so the
        router holds (or will hold) its work.
    @ivar rollback_only: why it can only roll back ("" while it can
        commit): the session its work was held in was lost.
    """

    begun: bool = False
    rollback_only: str = ""


@dataclass(eq=False, slots=True)
class Command:
    """
    One command of the session, before and after it is written.

    @ivar kind: C{send}, C{subscribe}, C{unsubscribe}, C{ack}, C{credit} or
        C{close}.
    @ivar frame_type: its frame class ...
    @ivar args: ... and the frame's fields after the command id (dropped
        once written: the replay buffer keeps the bytes).
    @ivar deferred: what the application waits on (None for the client's
        own commands: acknowledgements, credit, re-subscriptions).
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
        command.unanswered -= 1
        if command.unanswered:
            return command
        data = self._replay.pop(command.command_id + command.count - 1, None)
        if data is not None:
            self.replay_bytes -= len(data)
        return command

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
