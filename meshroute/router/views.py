"""
The router's views of the mesh, from memory: the routers it knows
(C{/api/v1/routers}), the graph of their links (C{/api/v1/topology}) and
its topics (C{/api/v1/topics}).
The router core builds them, because another router may ask for them
through the mesh (L{meshroute.router.remote_views}) as well as the admin
API.

B{C{GET /api/v1/routers}}: the mesh as one router sees it, a row per router.

The route table knows every router heard of (reachable now or not), the
next hop and distance of each reachable one, and when each one's links
last changed; the link registry knows the link to each next hop and how
the last link to each neighbour ended.  This joins them, from memory.

B{C{GET /api/v1/topology}}: the mesh as this router knows it, for the
topology page at the admin endpoint's C{/} (L{meshroute.admin.page}).

Every router floods an advertisement listing its delivery-stage links
(L{meshroute.routing.table}), so each one holds the whole graph: the
routers (nodes) and the links their ends advertise (edges).  A link both
ends advertise is up; one that only one end still advertises was closed
by the other (or the advertising end has fallen silent, frozen or dead,
and still says what it last said): that is how a router shows the links
of a router it can no longer hear as closed.  This router's own links
add what only it knows: the stage of a link still coming up, and how
full a delivery link's window is.

B{C{GET /api/v1/topics}}: this router's topic subscriptions, the
interest it advertises and the interest of every other router as it
holds it (flooded over the links, L{meshroute.router.topic_interest}),
and what its fan-out did and has waiting (docs/topics.md).

In-memory state only: the route table, the open links, the topic
tables, and the store's counts it keeps in memory; the store is never
asked, so polling this costs the router next to nothing.
"""

from meshroute.link.stages import AUTHENTICATION, CONNECT, DELIVERY, RECOVERY
from meshroute.messages import TOPIC_QUEUE
from meshroute.router.peer_channel import WINDOW
from meshroute.topics.patterns import format_words

#: An edge neither end advertises any more, but one end still does.
CLOSED = "closed"

#: How far along a link is: the furthest of two links to one peer wins.
_PROGRESS = {CONNECT: 0, AUTHENTICATION: 1, RECOVERY: 2, DELIVERY: 3}


def _own_links(router) -> dict[str, dict]:
    """
    This router's links that have named their peer, by peer, as
    C{/api/v1/links} describes them: the one furthest along when there
    are two (a second one about to be refused).
    """
    own: dict[str, dict] = {}
    for link in router.describe_links():
        if link["peer"] is None or link["stage"] not in _PROGRESS:
            continue
        held = own.get(link["peer"])
        if held is None or _PROGRESS[link["stage"]] > _PROGRESS[held["stage"]]:
            own[link["peer"]] = link
    return own


def _edge(a: str, b: str, stage: str, name: str, own: dict, closed: dict) -> dict:
    peer = b if a == name else a if b == name else None
    return {"a": a, "b": b, "stage": stage,
            "link": own.get(peer) if peer is not None else None,
            "last_close": closed.get(peer) if peer is not None else None}


def describe_topology(router) -> dict:
    """
    The topology of C{router} (a L{meshroute.router.service.RouterService}) as JSON:

      - C{router}: this router's name; C{changed_at}: when (epoch
        seconds) a router's list of links last changed here (the last
        topology change; this router's start before any);
        C{window}: the most transfers a link has unacknowledged;
      - C{nodes}: every router known, C{{"name", "reachable", "hops",
        "next_hop"}} (this one with 0 hops and no next hop);
      - C{edges}: C{{"a", "b", "stage", "link", "last_close"}} with
        C{a < b}: C{stage}
        is C{delivery} for a link both ends advertise, C{closed} for one
        only one end advertises, and for a link of this router's still
        coming up, its stage (C{connect}, C{authentication},
        C{recovery}); C{link} is this router's own link on that edge as
        C{/api/v1/links} describes it (C{in_flight}: its unacknowledged
        transfers), or None; C{last_close}, for an edge of this router's,
        how its last link on it ended (C{{"reason", "detail",
        "closed_at", ...}}), or None.
    """
    table = router.engine.routes
    name = table.name
    routes = table.routes()
    own = _own_links(router)
    closed = router.registry.last_closed()
    edges = {}
    for (a, b), both in table.adjacencies().items():
        edges[a, b] = DELIVERY if both else CLOSED
    for peer, link in own.items():
        pair = (name, peer) if name < peer else (peer, name)
        if link["stage"] == DELIVERY or pair not in edges:
            edges[pair] = link["stage"]
    names = {*table.heard(), *(router for pair in edges for router in pair)}
    nodes = []
    for router_name in sorted(names):
        route = routes.get(router_name)
        nodes.append({
            "name": router_name,
            "reachable": router_name == name or route is not None,
            "hops": 0 if router_name == name else (route[1] if route else None),
            "next_hop": route[0] if route else None,
        })
    return {
        "router": name,
        "changed_at": max(table.changes().values()),
        "window": WINDOW,
        "nodes": nodes,
        "edges": [_edge(a, b, stage, name, own, closed) for (a, b), stage in sorted(edges.items())],
    }



def describe_mesh(name: str, routes, registry) -> list[dict]:
    """
    A row per router C{routes} (a L{meshroute.routing.table.RouteTable})
    has heard of, C{name} (this router) first and then by name:
    C{{"name", "reachable", "next_hop", "hops", "link", "stage",
    "last_change", "last_close_reason"}}.  C{link} and C{stage} are those
    of this router's link to the next hop; C{last_change} is when the
    router's own links last changed as this router heard it (None if it
    never advertised any); C{last_close_reason} is why this router's last
    link to it closed, for a neighbour.
    """
    table = routes.routes()
    changes = routes.changes()
    closed = registry.last_closed()
    rows = []
    for router in [name] + sorted(routes.heard() - {name}):
        next_hop, hops = (None, 0) if router == name else table.get(router, (None, None))
        link = registry.holder(next_hop) if next_hop is not None else None
        last = closed.get(router)
        rows.append({
            "name": router,
            "reachable": router == name or next_hop is not None,
            "next_hop": next_hop,
            "hops": hops,
            "link": link.core.link_id if link is not None else None,
            "stage": link.core.stage if link is not None else None,
            "last_change": changes.get(router),
            "last_close_reason": last["reason"] if last is not None else None,
        })
    return rows


def describe_topics(engine) -> dict:
    """
    The topics of the router whose L{MessageEngine
    <meshroute.router.engine.MessageEngine>} is C{engine}, as JSON:

      - C{router}: its name;
      - C{subscriptions}: C{{"queue", "pattern", "durable", "client_id",
        "name", "shared", "consumers", "depth", "unacknowledged"}}, the
        durable ones first, then by queue: C{queue} the subscription's
        local queue (C{$durable:CLIENT:NAME}, C{$subscriber:N}),
        C{client_id} and C{name} a durable one's (None for a non-durable
        one), C{depth} the copies waiting in it (persistent in the store,
        non-persistent in memory, delivered and unacknowledged ones
        included), C{unacknowledged} those delivered and not acknowledged;
      - C{advertised}: C{{"version", "patterns"}}, the interest this
        router advertises (its subscriptions' patterns aggregated);
      - C{interest}: C{{"router", "version", "patterns", "reachable"}}
        for every other router whose interest it holds, by name (a router
        whose interest was withdrawn has no patterns; one unreachable now
        keeps its interest, its copies waiting in the backlog for it);
      - C{fan_out}: C{{"waiting", "publications", "copies", "holding",
        "publishers_held", "hold_at"}}: the publications waiting in
        C{$topic} for the fan-out, those it fanned out since the router
        started by source (C{client}, C{link}), the copies it made by
        kind (C{durable}, C{non-durable}, C{link}), whether the router
        holds its topic publishers now (L{meshroute.topics.backlog}), the
        sessions held, and C{hold-publishers-at};
      - C{retained}: C{{"count", "bytes", "cleared", "max_count",
        "max_bytes"}}: the retained messages this router holds (as every
        router does once the flood has passed), the bytes of their
        bodies, the cleared topics' tombstones, and its limits
        (C{max-retained}, C{max-retained-bytes}).
    """
    queues = engine.queues
    depths = queues.depths()
    consumers = queues.consumer_counts()
    unacknowledged = queues.unacknowledged_counts()
    held = engine.topics.describe()
    subscriptions = [
        {"queue": row["queue"], "pattern": row["pattern"], "durable": True,
         "client_id": row["client_id"], "name": row["name"], "shared": row["shared"],
         "consumers": row["consumers"]}
        for row in held["durable"]]
    subscriptions += [
        {"queue": row["queue"], "pattern": row["pattern"], "durable": False,
         "client_id": None, "name": None, "shared": False,
         "consumers": consumers.get(row["queue"], 0)}
        for row in held["non_durable"]]
    for row in subscriptions:
        row["depth"] = depths.get(row["queue"], 0)
        row["unacknowledged"] = unacknowledged.get(row["queue"], 0)
    interest = engine.interest
    reachable = engine.routes.routes()
    fan_out = engine.fan_out
    backlog = engine.topic_backlog
    return {
        "router": engine.name,
        "subscriptions": subscriptions,
        "advertised": {"version": interest.local.version,
                       "patterns": sorted(format_words(p) for p in interest.local.advertised)},
        "interest": [
            {"router": origin, "version": advertised["version"],
             "patterns": advertised["patterns"], "reachable": origin in reachable}
            for origin, advertised in interest.describe().items() if origin != engine.name],
        "fan_out": {"waiting": depths.get(TOPIC_QUEUE, 0),
                    "publications": dict(fan_out.publications),
                    "copies": dict(fan_out.copies_made),
                    "holding": backlog.holding, "publishers_held": backlog.waiting,
                    "hold_at": backlog.hold_at},
        "retained": engine.retained.describe(),
    }
