"""
C{GET /api/v1/routers}: the mesh as one router sees it, a row per router.

The route table knows every router heard of (reachable now or not), the
next hop and distance of each reachable one, and when each one's links
last changed; the link registry knows the link to each next hop and how
the last link to each neighbour ended.  This joins them, from memory.
"""


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
