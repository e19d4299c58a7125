"""
The interfaces between meshroute's parts.

A router's message engine talks to its store only through
L{IMessageStore} and to its routing knowledge only through
L{IRouteTable}, so each can be tested alone and replaced.
"""

from zope.interface import Attribute, Interface


class IMessageStore(Interface):
    """
    Durable state of one router: its messages and its per-link sequences.

    Every message held by a router is in exactly one place: the
    I{backlog} (waiting to be forwarded towards C{dest_router}), a link's
    I{outbox} (sent or about to be sent to a peer, with a link sequence
    number, until the peer acknowledges it), a local I{queue} (waiting for
    a consumer), or the dead-letter queue.

    Every method that changes state returns a L{Deferred} that fires only
    once the change is durable (committed with the configured sync mode).
    Changes are group-committed: everything submitted while one commit is
    in progress is written by the next one.  Changes are applied in the
    order they were submitted.
    """

    def open():
        """
        Create or upgrade the schema and load what the synchronous
        accessors need.  Fires when ready.
        """

    def close():
        """
        Finish pending writes and close.  Fires when closed.
        """

    def accept(message):
        """
        Store a message accepted from a client at its origin: into the
        local queue C{message.dest_queue} when C{dest_router} is this
        router (recording its id for duplicate detection), else into the
        backlog.

        @return: Deferred firing with None when durable; failing with
            L{meshroute.store.DuplicateMessage} if this router already
            holds, or already enqueued, a message with that id.
        """

    def accept_once(message, duplicate_id):
        """
        Like C{accept}, for a client send carrying a duplicate id: accept
        C{message} only if no send with the same C{duplicate_id} was
        accepted within the store's duplicate-id window, recording the id
        (durably, across restarts) in the same transaction as the
        message.  A non-persistent message is not stored; only its
        duplicate id is recorded.

        @return: Deferred firing with None when accepted (durable), or with
            the C{msg_id} of the message first accepted with that duplicate
            id, when nothing was changed; failing with
            L{meshroute.store.DuplicateMessage} as C{accept} does.
        """

    def duplicate_of(duplicate_id):
        """
        @return: Deferred firing with the C{msg_id} of the message accepted
            with C{duplicate_id} within the store's duplicate-id window, or
            None.
        """

    def receive(peer, seq, message, local, previous=0, claim=None):
        """
        Store a message that arrived from C{peer} with link sequence
        C{seq}, and record C{seq} as the last received from C{peer} in the
        same transaction.  C{local}: it is for one of this router's queues
        (else it goes to the backlog for forwarding).  C{previous}: the
        highest sequence the link knew to be received before this one (the
        recovery point it announced, or an earlier transfer on it; 0: none);
        if the store holds less, that transfer was not stored and this one
        is refused too, so that no later acknowledgement covers the gap.
        C{claim}: for a local message a waiting consumer may take at once,
        C{(after_entry, pending)} (L{meshroute.router.arrival_claims}): if
        its queue holds no entry above C{after_entry} but flagged ones
        with the message ids C{pending}, it is stored flagged redelivered
        and the outcome is C{("claimed", entry_id)}; else it is stored as
        without a claim.

        @return: Deferred firing with C{"stored"}, C{("claimed", entry_id)},
            C{"duplicate-seq"} (seq
            not above the last received from C{peer}: nothing changed),
            C{"recalled"} (the seq is recorded; this router's own copy was
            waiting in an outbox for its acknowledgement and is back in the
            backlog, so the copy that came back is the one kept) or
            C{"duplicate-id"} (the seq is recorded, but a message with that
            id is already held here or was already enqueued here, so it is
            dropped); failing with L{meshroute.store.MissingTransfer} when
            C{previous} is not stored.
        """

    def receive_many(peer, previous, items, claims=None):
        """
        C{receive} for each of C{items}, C{(seq, message, local)} in link
        order (C{previous}: the highest sequence known received before the
        first; C{claims}: None, or the C{claim} of each), in one call and
        one transaction: a link's whole batch.

        @return: Deferred firing with the list of their outcomes, as
            C{receive} gives them; failing with
            L{meshroute.store.MissingTransfer} (nothing stored) when
            C{previous} is not stored.
        """

    def last_received(peer):
        """
        The last link sequence durably received from C{peer} (0 if none).
        Synchronous: served from memory, kept in step with C{receive}.
        """

    store_id = Attribute(
        "This store's id, random, chosen when the store was created; the "
        "link sequence numbers it records belong to it."
    )

    def peer_store_id(peer):
        """
        The store id of C{peer} that the sequence numbers recorded for it
        belong to ("" when not known yet).  Synchronous.
        """

    def record_peer_store(peer, store_id, forget_received):
        """
        C{peer}'s store is C{store_id}; with C{forget_received}, it is a
        new store (the peer lost its data dir), so the last sequence
        received from its previous one is forgotten (back to 0).

        @return: Deferred firing with None when durable.
        """

    def reserve_seqs(peer, count):
        """
        Reserve the next C{count} link sequence numbers for C{peer}: every
        later assign, and a restart, numbers above them.

        @return: Deferred firing with the first, once durable.
        """

    def accept_to_outbox(peer, assigned):
        """
        Store a client's sends whose transfers already left: C{assigned}
        is C{(seq, message)} in seq order, numbered in a block
        L{reserve_seqs} made durable, each put in C{peer}'s outbox as if
        assigned there.

        @return: Deferred firing with None once durable; failing (nothing
            stored) with L{meshroute.store.DuplicateMessage} or the
            database's error.
        """

    def assign(peer, dest_routers, limit, max_bytes=None):
        """
        Move up to C{limit} backlog messages whose C{dest_router} is in
        C{dest_routers} into C{peer}'s outbox, oldest first, giving each
        the next link sequence number for C{peer}; with C{max_bytes}, stop
        before the message whose body would take the bodies moved past it
        (the first is moved whatever its size, so a large message is never
        stuck).

        @return: Deferred firing with a list of C{(seq, message)}, in seq
            order.
        """

    def outbox(peer, after_seq):
        """
        @return: Deferred firing with C{(seq, message)} for every message
            in C{peer}'s outbox with seq above C{after_seq}, in seq order:
            what to replay after the recovery stage.
        """

    def acknowledge(peer, up_to_seq):
        """
        C{peer} durably holds everything up to C{up_to_seq}: drop those
        messages from its outbox, and number every later transfer to it
        above C{up_to_seq} (an older copy of this store, such as a
        restored backup, would otherwise number at or below it again, and
        the peer would discard those transfers as already received).

        @return: Deferred firing with the number of messages dropped.
        """

    def return_outbox(peer):
        """
        C{peer}'s link is gone: move its unacknowledged messages back to
        the backlog (in seq order) so another route can take them.

        @return: Deferred firing with the number of messages moved.
        """

    def fetch(queue, after_entry, limit, mark=0):
        """
        @param mark: flag the first C{mark} entries fetched that are not
            flagged redelivered as L{mark_redelivered} would, in the same
            transaction (for deliveries that consumers' credit awaits).
        @return: Deferred firing with up to C{limit} C{(entry_id, message,
            redelivered)} from local queue C{queue} with entry id above
            C{after_entry}, oldest first; C{redelivered} as it was before
            the call.
        """

    def consume(entry_ids):
        """
        Consumers acknowledged these queue entries: delete them.
        """

    def commit(sends, entry_ids, xid=None, user=None):
        """
        A client transaction in one store transaction, all or nothing:
        accept each C{(message, duplicate_id)} of C{sends} as C{accept}
        (C{duplicate_id} empty) or C{accept_once} would, and delete the
        queue entries C{entry_ids} as C{consume} would; with an C{xid} (a
        two-phase transaction committed in one phase), record it as
        committed, refusing an xid prepared or committed already.

        @return: Deferred firing with one item per send, None (accepted)
            or the C{msg_id} first accepted with its duplicate id.
        """

    def prepare(xid, user, client_id, sends, entry_ids):
        """
        Prepare a client transaction as C{xid} (two-phase commit): its
        sends, as the client sent them, and the queue entries it
        acknowledged, locked to it (no fetch, consume or expiry touches
        them), durably until L{commit_prepared} or L{rollback_prepared}.
        """

    def find_xid(xid):
        """
        Fires with C{("prepared", id, user)}, C{("committed", None, user)}
        (committed within the duplicate-id window) or None.
        """

    def record_subscription(queue, client_id, name, pattern, shared, user, copies=(),
                            if_new=False):
        """
        Record a durable topic subscription (its local queue, C{queue})
        and place the retained messages C{copies} into it (with
        C{if_new}, only if it is created or replaced), in one
        transaction; fires with C{(what, deleted, placed)}: created,
        existing, or replaced (its entries deleted) when recorded before
        with another pattern; the copies placed.
        """

    def forget_subscription(queue):
        """
        Delete a durable topic subscription and its entries; fires with how
        many entries went.
        """

    def place_copies(copies, entry_ids, retained_entries=()):
        """
        The topic fan-out's persistent copies, each placed unless its id
        is held or was enqueued here, the deletion of the entries it
        copied, and the retained messages its publications made, in one
        transaction; fires with the copies placed.
        """

    def save_retained(entries):
        """
        Save retained topic messages, each unless a newer one of its
        topic is saved.
        """

    def retained_messages():
        """
        Fires with the saved retained topic messages not expired.
        """

    def save_interest(advertisements):
        """
        Save other routers' topic interest, each C{(origin, version,
        patterns)}, a newer version of an origin replacing an older one.
        """

    def topic_interest():
        """
        Fires with the saved topic interest of other routers.
        """

    def durable_subscriptions():
        """
        Fires with every durable topic subscription, oldest first.
        """

    def prepared_sends(prepared_id):
        """
        Fires with the sends of a prepared transaction, in order.
        """

    def commit_prepared(prepared_id, xid, user, sends):
        """
        Commit a prepared transaction, all or nothing: accept C{sends}
        (its sends as C{(message, duplicate_id)} pairs) as C{commit} does,
        delete the entries it locked, record its xid as committed.
        """

    def rollback_prepared(prepared_id):
        """
        Roll a prepared transaction back: the entries it locked go back
        to their queues, flagged redelivered.
        """

    def recover(user):
        """
        Fires with the xids of the transactions C{user} (None: anyone)
        prepared.
        """

    def mark_redelivered(entry_ids):
        """
        These entries are about to be delivered: from now on (durably)
        every further delivery of them is flagged redelivered.  Called
        once per batch of first deliveries, which wait for it.
        """

    def dead_letter(message, reason):
        """
        Store C{message} in the dead-letter queue (which is an ordinary
        local queue named L{meshroute.messages.DEAD_LETTER_QUEUE}) with
        C{reason} in its headers.
        """

    def expire(messages):
        """
        Move these messages, whose time to live ran out, from wherever
        this router holds them to the local queue
        L{meshroute.messages.EXPIRED_QUEUE}, in one transaction; one no
        longer held is left alone.

        @return: Deferred firing with the messages moved.
        """

    def sweep_expired(now_ms, busy_queues, limit):
        """
        Move at most C{limit} queue and backlog entries that expired at or
        before C{now_ms} (epoch milliseconds), except those of the queues
        C{busy_queues}, to L{meshroute.messages.EXPIRED_QUEUE}, in one
        transaction.

        @return: Deferred firing with the messages moved.
        """

    def outbox_peers():
        """
        Synchronous: the peers with unacknowledged messages in their
        outbox.
        """

    def outbox_depths():
        """
        Synchronous: C{{peer: {dest_router: number of messages}}} for the
        messages in each peer's outbox (not yet acknowledged).
        """

    def backlog_depths():
        """
        Synchronous: C{{dest_router: number of messages in the backlog}}.
        """

    def backlog_depth(dest_router):
        """
        Synchronous: the number of messages in the backlog for
        C{dest_router} (what acceptance asks per send, without the copy
        L{backlog_depths} makes).
        """

    def queue_depths():
        """
        Synchronous: C{{queue: number of entries}} for every local queue
        that has entries.
        """

    def queue_depth(queue):
        """
        Synchronous: the number of entries of local queue C{queue} (what
        the topic fan-out asks after each turn, without the copy
        L{queue_depths} makes).
        """


class IVoterRecords(Interface):
    """
    A witness's durable HA voter records, one per group it votes for
    (L{meshroute.harules.quorum.VoterRecord}, docs/ha.md).  A voter
    answers a request only once the record the answer rests on is
    durable.
    """

    def voter_records():
        """
        Fires with C{{group: (VoterRecord, lease_timeout_ms)}}: every
        group's record as last saved, and the longest lease-timeout its
        instances have told this voter.
        """

    def save_voter_record(group, record, lease_timeout_ms):
        """
        Replace C{group}'s record.  Fires with None once durable (committed
        with the store's sync mode), in submission order with every other
        write; an HA instance that does not serve fails the save of another
        group's record with L{meshroute.errors.NotServing}.
        """


class ICommitGate(Interface):
    """
    Where a replicated store's executor hands each transaction it ends
    (L{meshroute.store.transactions}, "Replication"): the store's seam for
    replication, in the store's own terms (L{meshroute.store.changes}),
    so that the store knows nothing of who replicates it.  The active HA
    instance's L{meshroute.ha.gate.ReplicationGate} is one; a router
    without HA has none.
    """

    epoch = Attribute(
        "The epoch to tag each new L{meshroute.store.changes.ChangeBatch} with.")

    def prepared(batch):
        """
        A transaction wrote C{batch} (its L{meshroute.store.changes.ChangeBatch})
        and its COMMIT is starting: on the reactor thread, in commit
        order, before C{committed} of the same transaction.  The gate may
        pass it on now, while the store's own commit runs; it may confirm
        nothing of it before C{committed}.
        """

    def abandoned(batch):
        """
        The COMMIT of a C{prepared} batch failed: the store does not hold
        it, though whoever the gate passed it to may.  On the reactor
        thread, before C{committed} of the same transaction (whose
        outcomes are then failures).
        """

    def committed(batch, fire):
        """
        A transaction ended (committed with or without writes, or
        failed), on the reactor thread, in commit order: C{batch} is its
        L{meshroute.store.changes.ChangeBatch}, or None when it wrote
        nothing or failed; C{fire()} fires its callers' Deferreds.  The
        gate decides when to call it; the store's callers learn of a
        change only then.
        """


class IPeerEpochs(Interface):
    """
    The highest epoch a router has seen per peer router name, durably
    (L{meshroute.link.epochs.PeerEpochs}, docs/protocol.md "Epochs").
    """

    def peer_epochs():
        """
        Fires with C{{peer: epoch}} for every peer router name seen with an
        epoch above 0.
        """

    def save_peer_epoch(peer, epoch):
        """
        Raise C{peer}'s epoch to C{epoch} (a lower one than held changes
        nothing).  Fires with None once durable, in submission order with
        every other write.
        """


class IKnownRouters(Interface):
    """
    The router names a router has heard of, durably
    (L{meshroute.routing.known.KnownRouters}, docs/routing.md).
    """

    def known_routers():
        """
        Fires with the set of router names saved.
        """

    def save_known_routers(names):
        """
        Save those of the router names C{names} that are not saved yet (a
        saved name is never changed).  Fires with None once durable, in
        submission order with every other write.
        """


class IRouteTable(Interface):
    """
    What a router knows of the mesh's topology, and the next hop for each
    destination router.
    """

    name = Attribute("This router's name.")

    def link_up(peer):
        """
        A link to C{peer} reached delivery.

        @return: the advertisements to send to every neighbour (at least
            this router's own, updated).
        """

    def link_down(peer):
        """
        The link to C{peer} is gone.

        @return: the advertisements to send to the remaining neighbours.
        """

    def advertisements():
        """
        Every advertisement known, to send in full to a new neighbour.
        """

    def received(advertisement):
        """
        An advertisement arrived from a neighbour.

        @return: the advertisements to pass on to the other neighbours
            (empty when it was not news).
        """

    def next_hop(router):
        """
        The neighbour to forward to for C{router}, or None when it is not
        reachable now (or is this router).
        """

    def known(router):
        """
        Whether C{router} has ever been heard of (reachable or not), by
        this table or, as L{remember} told it, by an earlier one.
        """

    def remember(routers):
        """
        Routers heard of before this table existed (saved by an earlier
        run): known from now on, and not news for L{newly_heard}.
        """

    def newly_heard():
        """
        The routers first heard of since the last call (not remembered
        ones): what is left to save.
        """

    def routes():
        """
        C{{router: (next_hop, hops)}} for every reachable router other
        than this one.
        """

    def heard():
        """
        Every router known, this one included.
        """

    def changes():
        """
        C{{router: seconds}}: when each router's links last changed, as
        this table took it (the admin API's C{routers} view).
        """

    def adjacencies():
        """
        C{{(router, router): both}}: every sorted pair of routers one of
        which advertises a link to the other, C{both} when the other
        advertises it back (the admin API's C{topology}).
        """


class ILinkEngine(Interface):
    """
    What a routing link needs from its router's message engine.
    """

    def recovery(peer):
        """
        The L{meshroute.wire.frames.Recovery} to send C{peer}: the last link
        sequence durably received from it (0 if none), our store id, and
        the store id of C{peer}'s that the sequence belongs to.
        """

    def link_up(peer, send, fail, emit, version, flush):
        """
        A link to C{peer} reached delivery; C{send(frame)} writes to it,
        C{fail(detail)} closes it (reason C{store-failed}) and
        C{emit(event, **fields)} writes a link event; C{version} is the
        link protocol version agreed (what its frames may carry);
        C{flush()} hands what was written to the kernel now, not at the
        reactor's next poll (for the batch written at the end of a turn).

        @return: the link's L{ILinkChannel}.
        """


class ILinkChannel(Interface):
    """
    One delivery-stage link as the engine sees it: the link feeds it the
    peer's frames and tells it when it is gone.
    """

    def recovered(frame):
        """
        The peer's L{meshroute.wire.frames.Recovery}: it durably holds our
        transfers up to C{frame.last_received} (if C{frame.peer_store_id}
        is our store), and its store is C{frame.store_id}.  Called once, on
        entering delivery.
        """

    def transferred(frame):
        """
        A L{meshroute.wire.frames.Transfer} arrived.
        """

    def transferred_batch(frame):
        """
        A L{meshroute.wire.frames.TransferBatch} arrived (version 4).
        """

    def acknowledged(frame):
        """
        An L{meshroute.wire.frames.Ack} arrived.
        """

    def fast_transferred(frame):
        """
        A L{meshroute.wire.frames.FastTransfer} arrived.
        """

    def fast_transferred_batch(frame):
        """
        A L{meshroute.wire.frames.FastTransferBatch} arrived (version 4).
        """

    def interest(frame):
        """
        An L{meshroute.wire.frames.Interest} arrived (version 5).
        """

    def routes(frame):
        """
        A L{meshroute.wire.frames.Routes} arrived.
        """

    def pause():
        """
        The link's transport is full: write no more messages until
        C{resume}.
        """

    def resume():
        """
        The link's transport has drained.
        """

    def closed():
        """
        The link is gone.
        """


class IChannelEngine(Interface):
    """
    What a link's delivery stage (L{meshroute.router.peer_channel.PeerChannel})
    asks of its router's message engine.
    """

    def assignable(peer):
        """
        The destination routers whose backlog C{peer} may take now.
        """

    def accepting(router):
        """
        Persistent messages for C{router} submitted to the store and not
        yet in its backlog: clients' sends being accepted, and copies the
        topic fan-out is placing.
        """

    def acknowledge_due():
        """
        Every link sends its due acknowledgement now: transfers are about
        to go, and one may carry a message an acknowledgement covers.
        """

    def emit_forwarded_many(peer, messages):
        """
        C{message.forwarded} for C{messages}, which C{peer} acknowledged.
        """

    def outbox_resolved(count, peer):
        """
        C{count} messages left C{peer}'s outbox (acknowledged, or set
        aside): what they held back may move on other links.
        """

    def dead_lettered(message, reason):
        """
        C{message} is now in this router's dead-letter queue, for C{reason}.
        """

    def moved_to_expired(messages, where):
        """
        C{messages} expired C{where} and are now in this router's
        C{$expired}.
        """

    def link_resumed(peer):
        """
        The link to C{peer} takes messages again: non-persistent ones
        waiting for it may go.
        """

    def link_down(peer, channel):
        """
        The link to C{peer}, whose channel is C{channel}, is gone.
        """

    def arrivals_held():
        """
        Whether persistent messages arriving on links are to be held now,
        neither stored nor acknowledged (the disk is low): the peer's
        window bounds what a link holds, and keepalives go on.
        """

    def arrived(peer, seq, previous, message):
        """
        A persistent message arrived from C{peer}: store it.

        @return: Deferred firing once it is durable with the destination
            routers whose backlog it added to.
        """

    def arrived_many(peer, previous, arrivals):
        """
        C{arrived} for each of C{arrivals}, C{(seq, message)}, in one
        store call.
        """

    def arrived_transient(message):
        """
        A non-persistent message arrived from a peer.
        """

    def arrived_transient_many(messages):
        """
        Non-persistent messages arrived from a peer, in order.
        """

    def routes_received(peer, frame):
        """
        A L{meshroute.wire.frames.Routes} arrived from C{peer}.
        """

    def interest_received(peer, frame):
        """
        A L{meshroute.wire.frames.Interest} arrived from C{peer}.

        @raise meshroute.errors.WireError: it names a pattern that is not
            one (the link closes).
        """

    def pump_towards(router):
        """
        The backlog for C{router} grew: its next hop's link may take it.
        """


class IHAInstanceView(Interface):
    """
    What the admin API reads of an HA instance (L{meshroute.admin.api}),
    which serves whether or not the instance is the active one.
    """

    name = Attribute("The router's name (the same on both instances).")
    router = Attribute(
        "The RouterService serving while this instance is the active one; None otherwise.")

    def ha_status():
        """
        The instance's L{meshroute.ha.status.HAStatus} now.
        """

    def uptime_s():
        """
        Seconds since the instance started (not its current router).
        """

    def reload_security():
        """
        Read C{[security]} and the users file again into the serving
        router; whether a new policy is in force.
        """
