"""
The routers a router has heard of, kept in its store.

A client's send to a router is refused (C{unknown-router}) only when no
router of that name was ever heard of: a router heard of but unreachable
now gets the send into its backlog, forwarded once a route appears
(docs/routing.md).  The route table knows what it heard since it was
built; a router that restarts, and the backup of an HA pair that takes
over (docs/ha.md), would start knowing no one, and refuse every send to
another router until its links were up and advertisements arrived.  So
every name heard is saved in the store once, and loaded into the route
table when the store opens.  The store of an HA pair is replicated
statement by statement, so the backup's copy holds the names as well.

Saving is off the message path: a name is news once (a router joins
the mesh), the engine hands the table's news over after a link comes up
or advertisements arrive, and nothing waits for the save.  Names heard
while a save runs go together in the next one.
"""

from twisted.internet.defer import Deferred
from twisted.logger import Logger

log = Logger()


class KnownRouters:
    """
    Loads the saved router names into a route table, and saves the names
    it hears first.

    @param store: an L{meshroute.interfaces.IKnownRouters}.
    @param table: the router's L{meshroute.interfaces.IRouteTable}.
    """

    def __init__(self, store, table) -> None:
        self._store = store
        self._table = table
        self._unsaved: set[str] = set()
        self._saving = False

    def load(self) -> Deferred:
        """
        Make the names saved by earlier runs known to the table; call
        before any link comes up.
        """
        return self._store.known_routers().addCallback(self._table.remember)

    def heard(self, routers) -> None:
        """
        The table heard of C{routers} for the first time: save them, with
        any others heard meanwhile, once the save that runs is done.
        """
        self._unsaved.update(routers)
        self._save()

    def _save(self) -> None:
        if self._saving or not self._unsaved:
            return
        batch, self._unsaved = self._unsaved, set()
        self._saving = True
        saving = self._store.save_known_routers(sorted(batch))
        saving.addCallbacks(self._saved, self._failed, errbackArgs=(batch,))

    def _saved(self, _) -> None:
        self._saving = False
        self._save()

    def _failed(self, failure, batch: set[str]) -> None:
        # The names stay known in memory; they are tried again with the
        # next names heard.
        log.failure("saving the router names {names} heard of", failure,
                    names=sorted(batch))
        self._saving = False
        self._unsaved |= batch
