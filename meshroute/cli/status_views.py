"""
The views of C{meshroute status}, as qdstat shows a router: one aligned
table per view, from the admin API's JSON.

Pure: each view is a list of L{Column}s that pick and render a value from
one row of the view's JSON, and L{format_table} lays any rows out (each
column as wide as its widest cell, numbers to the right).  Times the
routers report (epoch seconds) are shown as ages from C{now}.
"""

from dataclasses import dataclass
from typing import Callable

#: The views C{meshroute status VIEW} shows, and the admin API resource
#: each is read from (C{/api/v1/NAME}).
VIEWS = ("links", "routers", "queues", "topics", "sessions")

#: What a cell shows for a value the router does not have.
MISSING = "-"

#: The most patterns a cell lists; the rest are counted (C{--json} shows
#: them all).
SHOWN_PATTERNS = 4


@dataclass(frozen=True)
class Column:
    """
    One column of a view: its header, and its cell for a row (the row's
    JSON object and the time of the question, in epoch seconds).
    """

    header: str
    cell: Callable[[dict, float], object]
    numeric: bool = False


def age(then: float | None, now: float) -> str:
    """
    How long ago C{then} was, compactly: C{45s}, C{3m12s}, C{2h05m},
    C{3d04h}.
    """
    if then is None:
        return MISSING
    seconds = max(0, int(now - then))
    if seconds < 60:
        return f"{seconds}s"
    minutes, seconds = divmod(seconds, 60)
    if minutes < 60:
        return f"{minutes}m{seconds:02d}s"
    hours, minutes = divmod(minutes, 60)
    if hours < 24:
        return f"{hours}h{minutes:02d}m"
    days, hours = divmod(hours, 24)
    return f"{days}d{hours:02d}h"


def _field(name: str) -> Callable[[dict, float], object]:
    return lambda row, now: row.get(name)


def _age_of(name: str) -> Callable[[dict, float], object]:
    return lambda row, now: age(row.get(name), now)


def _rate(name: str) -> Callable[[dict, float], object]:
    return lambda row, now: f"{row.get(name, 0.0):.1f}"


def _keepalive(row: dict, now: float) -> object:
    interval = row.get("keepalive_interval_ms")
    return f"{interval} ms" if interval else None


def _last_close(row: dict, now: float) -> object:
    reason = row.get("last_close_reason")
    if reason is None:
        return None
    return f"{reason} {age(row.get('last_closed_at'), now)} ago"


def _reachable(row: dict, now: float) -> object:
    return "yes" if row.get("reachable") else "no"


def _ttl(row: dict, now: float) -> object:
    ttl = row.get("ttl_ms")
    return f"{ttl} ms" if ttl is not None and ttl >= 0 else None


def _yes(name: str) -> Callable[[dict, float], object]:
    return lambda row, now: "yes" if row.get(name) else "no"


def _subscription(row: dict, now: float) -> object:
    """
    A durable subscription by its client id and name, a non-durable one
    by its queue.
    """
    return f"{row['client_id']}:{row['name']}" if row.get("durable") else row.get("queue")


def patterns(listed: list[str]) -> str:
    """
    Topic patterns in a cell: the first L{SHOWN_PATTERNS}, and how many
    more; C{-} for none.
    """
    if not listed:
        return MISSING
    shown = ", ".join(listed[:SHOWN_PATTERNS])
    more = len(listed) - SHOWN_PATTERNS
    return f"{shown} +{more} more" if more > 0 else shown


def _patterns_of(row: dict, now: float) -> object:
    return patterns(row.get("patterns") or [])


COLUMNS: dict[str, tuple[Column, ...]] = {
    "links": (
        Column("peer", _field("peer")),
        Column("direction", _field("direction")),
        Column("stage", _field("stage")),
        Column("since", _age_of("since"), numeric=True),
        Column("keepalive", _keepalive, numeric=True),
        Column("counter", _field("keepalive_counter"), numeric=True),
        Column("in flight", _field("in_flight"), numeric=True),
        Column("sent", _field("sent"), numeric=True),
        Column("received", _field("received"), numeric=True),
        Column("last close", _last_close),
    ),
    "routers": (
        Column("name", _field("name")),
        Column("reachable", _reachable),
        Column("next hop", _field("next_hop")),
        Column("hops", _field("hops"), numeric=True),
        Column("link", _field("link")),
        Column("stage", _field("stage")),
        Column("changed", _age_of("last_change"), numeric=True),
        Column("last close", _field("last_close_reason")),
    ),
    "queues": (
        Column("queue", _field("name")),
        Column("depth", _field("depth"), numeric=True),
        Column("consumers", _field("consumers"), numeric=True),
        Column("unacked", _field("unacknowledged"), numeric=True),
        Column("in/s", _rate("in_rate"), numeric=True),
        Column("out/s", _rate("out_rate"), numeric=True),
    ),
    "topics": (
        Column("subscription", _subscription),
        Column("pattern", _field("pattern")),
        Column("durable", _yes("durable")),
        Column("shared", _yes("shared")),
        Column("consumers", _field("consumers"), numeric=True),
        Column("depth", _field("depth"), numeric=True),
        Column("unacked", _field("unacknowledged"), numeric=True),
    ),
    #: The interest a router holds of the others (C{topics}' C{interest}).
    "interest": (
        Column("router", _field("router")),
        Column("reachable", _reachable),
        Column("version", _field("version"), numeric=True),
        Column("patterns", _patterns_of),
    ),
    "sessions": (
        Column("client", _field("client_id")),
        Column("user", _field("user")),
        Column("protocol", lambda row, now: row.get("protocol", "native")),
        Column("state", _field("state")),
        Column("ttl", _ttl, numeric=True),
        Column("queued", _field("queued"), numeric=True),
    ),
}


def _text(value: object) -> str:
    return MISSING if value is None or value == "" else str(value)


def format_table(headers: list[str], rows: list[list[object]],
                 numeric: list[bool] | None = None, indent: str = "  ") -> str:
    """
    C{rows} under C{headers}, each column as wide as its widest cell (the
    header's included), two spaces apart; a column marked C{numeric} is
    aligned to the right, any other to the left; None shows as L{MISSING}.
    No trailing spaces.
    """
    numeric = numeric or [False] * len(headers)
    cells = [list(headers)] + [[_text(value) for value in row] for row in rows]
    widths = [max(len(line[i]) for line in cells) for i in range(len(headers))]
    lines = []
    for line in cells:
        padded = [cell.rjust(width) if right else cell.ljust(width)
                  for cell, width, right in zip(line, widths, numeric)]
        lines.append((indent + "  ".join(padded)).rstrip())
    return "\n".join(lines) + "\n"


def format_view(view: str, rows_by_router: dict[str, list[dict]], now: float,
                router_column: bool = False) -> str:
    """
    The table of C{view} (one of L{VIEWS}) for the rows each router
    answered, in the routers' order; with C{router_column}, a first
    column names the router each row is from.  An empty view says so.
    (C{topics}, whose answer is an object, is L{format_topics}.)
    """
    if view == "topics":
        return format_topics(rows_by_router, now, router_column)
    return _format_rows(view, rows_by_router, now, router_column)


def _format_rows(view: str, rows_by_router: dict[str, list[dict]], now: float,
                 router_column: bool = False, empty: str | None = None) -> str:
    columns = COLUMNS[view]
    headers = (["router"] if router_column else []) + [c.header for c in columns]
    numeric = ([False] if router_column else []) + [c.numeric for c in columns]
    rows = [([router] if router_column else []) + [c.cell(row, now) for c in columns]
            for router, answered in rows_by_router.items() for row in answered]
    if not rows:
        return f"  {empty or 'no ' + view}\n"
    return format_table(headers, rows, numeric)


def _fan_out(topics: dict) -> str:
    fan_out = topics["fan_out"]
    published, copies = fan_out["publications"], fan_out["copies"]
    # A router older than held publishers answers without them.
    held = (f"; publishers held ({fan_out['publishers_held']} sessions, hold-publishers-at "
            f"{fan_out['hold_at']})" if fan_out.get("holding") else "")
    return (f"{fan_out['waiting']} waiting{held}; publications {published.get('client', 0)} "
            f"from clients, {published.get('link', 0)} from links; copies "
            f"{copies.get('durable', 0)} durable, {copies.get('non-durable', 0)} non-durable, "
            f"{copies.get('link', 0)} to other routers")


def _retained(topics: dict) -> str:
    # A router older than retained messages answers without them.
    retained = topics.get("retained")
    if retained is None:
        return ""
    return (f"retained: {retained['count']} messages of max {retained['max_count']}, "
            f"{retained['bytes']} bytes, {retained['cleared']} cleared topics\n")


def format_topics(topics_by_router: dict[str, dict], now: float,
                  router_column: bool = False) -> str:
    """
    The C{topics} view: of one router, what it advertises, its fan-out,
    its subscriptions and the interest it holds of the others; of every
    router (C{router_column}), their subscriptions in one table and what
    each advertises, with how many of the other routers that answered
    hold that very version (all of them, once the interest has spread).
    """
    subscriptions = {router: topics["subscriptions"]
                     for router, topics in topics_by_router.items()}
    if not router_column:
        [topics] = topics_by_router.values()
        advertised = topics["advertised"]
        return "".join([
            f"advertised: {patterns(advertised['patterns'])} "
            f"(version {advertised['version']})\n",
            f"fan-out: {_fan_out(topics)}\n",
            _retained(topics),
            "subscriptions:\n",
            _format_rows("topics", subscriptions, now, empty="no topic subscriptions"),
            "interest held of other routers:\n",
            _format_rows("interest", {"": topics["interest"]}, now,
                         empty="no interest of other routers"),
        ])
    rows = []
    for router, topics in topics_by_router.items():
        version = topics["advertised"]["version"]
        others = [other for other in topics_by_router if other != router]
        holding = sum(1 for other in others for held in topics_by_router[other]["interest"]
                      if held["router"] == router and held["version"] == version)
        rows.append([router, version, patterns(topics["advertised"]["patterns"]),
                     f"{holding}/{len(others)}" if version else None,
                     topics["fan_out"]["waiting"],
                     topics["fan_out"]["publications"].get("client", 0)])
    return "".join([
        "subscriptions:\n",
        _format_rows("topics", subscriptions, now, router_column=True,
                     empty="no topic subscriptions"),
        "advertised interest:\n",
        format_table(["router", "version", "patterns", "held by", "waiting", "published"],
                     rows, [False, True, False, True, True, True]) if rows else "  no routers\n",
    ])


def last_topology_change(routers: list[dict], now: float) -> str:
    """
    The line above the C{routers} view: when the mesh's topology last
    changed as the router answering saw it, and whose links changed.
    """
    changes = [(row["last_change"], row["name"]) for row in routers
               if row.get("last_change") is not None]
    if not changes:
        return "last topology change: never\n"
    when, router = max(changes)
    return f"last topology change: {age(when, now)} ago ({router}'s links)\n"
