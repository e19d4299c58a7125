"""
The audit's outputs for people: C{summary.json}, the console lines and a
self-contained C{report.html} with inline SVG plots.

Everything here works on plain Python values (rows collected from the
views as dicts), never on Spark, so it is tested and rendered without a
JVM and the page has no dependency: no script, no external file.
"""

import datetime
import html
import math

from meshroute.audit import topic_report

#: Message counts of the summary and of every route, in display order.
MESSAGE_COUNTS = ("accepted", "enqueued", "consumed", "lost", "lost_non_persistent",
                  "in_flight", "expired", "dead_lettered", "dropped", "duplicated",
                  "duplicate_copies", "duplicates_dropped", "orphans", "unobserved")

LATENCIES = ("latency_p50_ms", "latency_p95_ms", "latency_p99_ms", "latency_max_ms")

#: The HA counts of summary.json's C{ha} (L{meshroute.audit.views.ha_totals}).
HA_COUNTS = ("failovers", "takeovers", "handovers", "fenced", "epochs", "alone_epochs",
             "forced_activations")

SESSION_COUNTS = ("session_opened", "session_disconnected", "session_reattached",
                  "session_recreated", "session_expired", "session_closed")

#: How many rows of long tables the page and summary.json show.
PAGE_ROWS = 200
SUMMARY_EXAMPLES = 20
TIMELINE_SESSIONS = 3000

#: Colours, by fate and by close reason.
FATE_COLOURS = [("enqueued", "#2e7d32"), ("in_flight", "#1e88e5"), ("expired", "#9e9d24"),
                ("dead_lettered", "#757575"), ("dropped", "#bdbdbd"), ("lost_non_persistent", "#fb8c00"), ("lost", "#d50000")]
REASON_COLOURS = {"keepalive": "#d50000", "stage-timeout": "#fb8c00", "peer-closed": "#8e24aa",
                  "rejected": "#6d4c41", "protocol-error": "#c2185b", "shutdown": "#546e7a"}
ROUTE_COLOURS = ["#1e88e5", "#d81b60", "#43a047", "#fb8c00", "#5e35b1", "#00897b", "#6d4c41",
                 "#c0ca33"]


def _number(value, default=0):
    return default if value is None else value


def _sum(rows: list[dict], key: str) -> int:
    return sum(_number(row.get(key)) for row in rows)


def _clean(value):
    """
    JSON-safe: NaN and infinities (no JSON for them) become None.
    """
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _clean(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_clean(v) for v in value]
    if isinstance(value, datetime.datetime):
        return value.isoformat()
    return value


def stamp(seconds: float | None) -> str:
    """
    Epoch seconds as UTC, to the millisecond.
    """
    if seconds is None:
        return "-"
    moment = datetime.datetime.fromtimestamp(seconds, datetime.timezone.utc)
    return moment.strftime("%Y-%m-%d %H:%M:%S.%f")[:-3] + "Z"


def route_name(row: dict) -> str:
    return f"{row['origin']} → {row['dest']}"


def ha_summary(totals: dict, failovers: list[dict]) -> dict:
    """
    summary.json's C{ha}: the counts of L{meshroute.audit.views.ha_totals}
    (C{totals}, one row; empty for none), the failover durations'
    percentiles, and the first failovers (C{failovers}, sorted by time).
    """
    return {
        **{key: _number(totals.get(key)) for key in HA_COUNTS},
        "failover_ms": {"p50": totals.get("failover_p50_ms"),
                        "p99": totals.get("failover_p99_ms"),
                        "max": totals.get("failover_max_ms")},
        "list": [{"time_utc": stamp(row["time"]),
                  **{key: row[key] for key in ("router", "group", "from", "to", "epoch",
                                               "kind", "duration_ms")}}
                 for row in failovers[:SUMMARY_EXAMPLES]],
    }


def ha_lines(ha: dict) -> list[str]:
    """
    The console's line about HA pairs: none when the logs have no HA
    instance's event.
    """
    if not any(ha[key] for key in HA_COUNTS):
        return []
    took = ha["failover_ms"]
    durations = (f", took p50 {took['p50']:.1f} ms, max {took['max']:.1f} ms"
                 if ha["failovers"] else "")
    return [f"ha: {ha['failovers']} failover(s) ({ha['takeovers']} takeover(s), "
            f"{ha['handovers']} hand-over(s)){durations}; {ha['fenced']} fenced, "
            f"{ha['forced_activations']} forced activation(s)"]


def build_summary(*, totals: dict, routes: list[dict], links: list[dict], routers: list[dict],
                  inputs: list[dict], malformed: list[dict], malformed_count: int,
                  keepalive_limit: float, grace_s: float, audit: dict,
                  time_range: tuple, ha: dict, latency_windows: list[dict] = (),
                  topics: dict | None = None, subscriptions: list[dict] = (),
                  topic_links: list[dict] = ()) -> dict:
    """
    The content of summary.json: headline figures, the verdict and why.

    @param ha: L{ha_summary}.
    @param latency_windows: rows of L{meshroute.audit.views.latency_windows};
        the summary keeps each route's latest window.
    @param topics: L{topic_report.topic_summary} of the rows of the
        C{subscriptions} and C{topic_links} tables.
    """
    messages = {key: _number(totals.get(key)) for key in MESSAGE_COUNTS}
    messages["latency_ms"] = {
        "p50": totals.get("latency_p50_ms"), "p95": totals.get("latency_p95_ms"),
        "p99": totals.get("latency_p99_ms"), "max": totals.get("latency_max_ms"),
        "min": totals.get("latency_min_ms"),
    }
    closes = {}
    for row in links:
        for key, value in row.items():
            if key.startswith("closed_") and value:
                reason = key[len("closed_"):].replace("_", "-")
                closes[reason] = closes.get(reason, 0) + value
    maxima = [row["keepalive_max_intervals"] for row in links
              if row.get("keepalive_max_intervals") is not None]
    minima = [row["keepalive_min_intervals"] for row in links
              if row.get("keepalive_min_intervals") is not None]
    link_summary = {
        "links": len(links),
        "connections": _sum(links, "connections"),
        "sessions": _sum(links, "sessions"),
        "time_in_delivery_s": _sum(links, "time_in_delivery_s"),
        "closes": dict(sorted(closes.items())),
        "not_closed": _sum(links, "not_closed"),
        "rejections": _sum(links, "rejections"),
        "keepalive_closes": _sum(links, "keepalive_closes"),
        "keepalive_checked": _sum(links, "keepalive_checked"),
        "keepalive_late": _sum(links, "keepalive_late"),
        "keepalive_early": _sum(links, "keepalive_early"),
        "keepalive_max_intervals": max(maxima) if maxima else None,
        "keepalive_min_intervals": min(minima) if minima else None,
        "keepalive_limit_intervals": keepalive_limit,
    }
    router_summary = {
        "count": len(routers),
        "names": [row["router"] for row in routers],
        "starts": _sum(routers, "starts"),
        "clean_stops": _sum(routers, "clean_stops"),
        "rejections_local": _sum(routers, "rejections_local"),
        "rejections_peer": _sum(routers, "rejections_peer"),
        "connectors_exhausted": _sum(routers, "connectors_exhausted"),
        **{key: _sum(routers, key) for key in SESSION_COUNTS},
        "per_router": {
            row["router"]: {key: _number(row.get(key)) for key in
                            ("events", "starts", "clean_stops", "accepted", "enqueued",
                             "consumed", "rejections_local", "rejections_peer", *SESSION_COUNTS)}
            for row in routers
        },
    }
    first, last = time_range
    summary = {
        "ok": True,
        "reasons": [],
        "warnings": [],
        "inputs": {
            "files": len(inputs),
            "lines": _sum(inputs, "lines"),
            "events": _sum(inputs, "events"),
            "malformed": malformed_count,
            "malformed_lines": [
                {"file": row["file"], "line": row["line"], "problem": row["problem"]}
                for row in malformed[:SUMMARY_EXAMPLES]
            ],
            "per_file": [{key: row[key] for key in ("file", "lines", "events", "malformed")}
                         for row in inputs],
        },
        "time": {"first": first, "last": last,
                 "span_s": (last - first) if first is not None and last is not None else None,
                 "first_utc": stamp(first), "last_utc": stamp(last)},
        "messages": messages,
        "routes": [{key: row.get(key) for key in ("origin", "dest", *MESSAGE_COUNTS, *LATENCIES)}
                   for row in routes],
        "links": link_summary,
        "routers": router_summary,
        "ha": ha,
        "topics": topics,
        "latest_latency_windows": latest_windows(latency_windows),
        "settings": {"in_flight_grace_s": grace_s, "keepalive_limit_intervals": keepalive_limit},
        "audit": audit,
    }
    judge(summary, routes, subscriptions, topic_links)
    return _clean(summary)


def latest_windows(windows) -> list[dict]:
    """
    Each route's latest latency window (rows sorted by route and window).
    """
    latest = {}
    for row in windows:
        latest[(row["origin"], row["dest"])] = row
    return [{"origin": row["origin"], "dest": row["dest"],
             "window_start_utc": stamp(row["window_start"]),
             "window_end_utc": stamp(row["window_end"]),
             **{key: row.get(key) for key in ("enqueued", *LATENCIES)}}
            for row in latest.values()]


def judge(summary: dict, routes: list[dict], subscriptions: list[dict] = (),
          topic_links: list[dict] = ()) -> None:
    """
    Set C{ok}, C{reasons} (promises broken: exit status 2) and
    C{warnings} (worth a look, not a broken promise) of C{summary}, with
    those of its topics (L{topic_report.judge_topics}, from the rows of
    C{subscriptions} and C{topic_links}).
    """
    messages, links = summary["messages"], summary["links"]
    reasons, warnings = summary["reasons"], summary["warnings"]

    def by_route(key: str) -> str:
        parts = [f"{route_name(row)}: {row[key]}" for row in routes if row.get(key)]
        return "; ".join(parts[:10]) + ("; …" if len(parts) > 10 else "")

    if messages["lost"]:
        reasons.append(f"{messages['lost']} persistent message(s) lost: accepted, never enqueued "
                       f"({by_route('lost')})")
    if messages["duplicated"]:
        reasons.append(f"{messages['duplicated']} message(s) enqueued more than once, "
                       f"{messages['duplicate_copies']} extra copies ({by_route('duplicated')})")
    if links["keepalive_late"]:
        reasons.append(
            f"{links['keepalive_late']} keepalive close(s) came later than "
            f"{links['keepalive_limit_intervals']:g} keepalive intervals after the peer's last "
            f"sign of life (longest {links['keepalive_max_intervals']:.1f} intervals)")
    if summary["inputs"]["malformed"]:
        first = summary["inputs"]["malformed_lines"][:3]
        where = ", ".join(f"{row['file']}:{row['line']} ({row['problem']})" for row in first)
        warnings.append(f"{summary['inputs']['malformed']} malformed line(s) skipped: {where}")
    if messages["in_flight"]:
        warnings.append(f"{messages['in_flight']} message(s) still in flight at the end of the "
                        f"logs (accepted within {summary['settings']['in_flight_grace_s']:g} s "
                        "of it), not counted as lost")
    if messages["lost_non_persistent"]:
        warnings.append(f"{messages['lost_non_persistent']} non-persistent message(s) never "
                        "arrived (at most once allows it)")
    if messages["orphans"]:
        warnings.append(f"{messages['orphans']} message(s) seen without their message.accepted: "
                        "is an origin's log missing or cut short?")
    if messages["unobserved"]:
        warnings.append(f"{messages['unobserved']} message(s) to routers whose event log is not "
                        f"in the input cannot be checked ({by_route('unobserved')})")
    if links["keepalive_early"]:
        warnings.append(f"{links['keepalive_early']} keepalive close(s) came after less than 4 "
                        "intervals of silence")
    forced = summary.get("ha", {}).get("forced_activations")
    if forced:
        warnings.append(f"{forced} forced activation(s) (meshroute ha force-activate): an "
                        "operator accepted losing confirmed changes the instance lacked")
    topic_report.judge_topics(summary, list(subscriptions), list(topic_links))
    summary["ok"] = not reasons


def console_lines(summary: dict, out_dir: str) -> list[str]:
    """
    What the command prints on stdout: the headline, the verdict, routes.
    """
    inputs, messages, links = summary["inputs"], summary["messages"], summary["links"]
    routers, latency = summary["routers"], summary["messages"]["latency_ms"]
    span = summary["time"]["span_s"]
    lines = [
        f"audit of {routers['count']} router(s), {inputs['events']} events from "
        f"{inputs['files']} file(s) ({inputs['malformed']} malformed line(s)), "
        f"{summary['time']['first_utc']} to {summary['time']['last_utc']}"
        + (f" ({span:.1f} s)" if span is not None else ""),
        "messages: " + ", ".join(f"{key.replace('_', ' ')} {messages[key]}" for key in (
            "accepted", "enqueued", "consumed", "lost", "in_flight", "expired", "dead_lettered",
            "dropped", "lost_non_persistent", "duplicated")),
    ]
    if latency["p50"] is not None:
        lines.append("latency (ms): " + ", ".join(
            f"{key} {_ms(latency[key])}" for key in ("p50", "p95", "p99", "max")))
    closes = ", ".join(f"{reason} {n}" for reason, n in links["closes"].items()) or "none"
    lines.append(f"links: {links['links']} seen, {links['sessions']} delivery sessions, "
                 f"closes: {closes}")
    if links["keepalive_closes"]:
        lines.append(f"keepalive closes: {links['keepalive_closes']}, peer silent "
                     f"{links['keepalive_min_intervals'] or 0:.1f} to "
                     f"{links['keepalive_max_intervals'] or 0:.1f} intervals, "
                     f"{links['keepalive_late']} later than "
                     f"{links['keepalive_limit_intervals']:g}")
    session_counts = ", ".join(f"{key.split('_', 1)[1]} {routers[key]}" for key in SESSION_COUNTS)
    lines.append(f"routers: starts {routers['starts']}, clean stops {routers['clean_stops']}, "
                 f"rejections {routers['rejections_local'] + routers['rejections_peer']}, "
                 f"client sessions {session_counts}")
    lines.extend(ha_lines(summary["ha"]))
    lines.extend(topic_report.console_line(summary))
    for row in summary["routes"][:20]:
        lines.append(
            f"  {route_name(row)}: accepted {row['accepted']}, enqueued {row['enqueued']}, "
            f"consumed {row['consumed']}, lost {row['lost']}, in flight {row['in_flight']}, "
            f"duplicated {row['duplicated']}, p50 {_ms(row['latency_p50_ms'])} ms, "
            f"p99 {_ms(row['latency_p99_ms'])} ms")
    if len(summary["routes"]) > 20:
        lines.append(f"  … {len(summary['routes']) - 20} more routes in {out_dir}/report.html")
    if summary["ok"]:
        lines.append("OK: every message accepted was enqueued exactly once or is accounted for")
    else:
        lines.append("NOT OK: " + " | ".join(summary["reasons"]))
    lines.extend(f"warning: {warning}" for warning in summary["warnings"])
    lines.append(f"written: {out_dir}/summary.json, {out_dir}/report.html, {out_dir}/tables/")
    return lines


def _duration(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.3g} s"
    if seconds < 7200:
        return f"{seconds / 60:.3g} min"
    return f"{seconds / 3600:.3g} h"


def _ms(value) -> str:
    if value is None:
        return "-"
    return f"{value:.3g}" if abs(value) < 100 else f"{value:.0f}"


# -- HTML ----------------------------------------------------------------------

def _e(value) -> str:
    return html.escape(str(value), quote=True)


def _cell(value) -> str:
    if value is None:
        return "<td class=null>–</td>"
    if isinstance(value, bool):
        return f"<td>{'yes' if value else 'no'}</td>"
    if isinstance(value, float):
        text = f"{value:.6g}" if abs(value) < 1e9 else stamp(value)
        return f"<td class=num>{_e(text)}</td>"
    if isinstance(value, int):
        return f"<td class=num>{value}</td>"
    return f"<td>{_e(value)}</td>"


def table(rows: list[dict], columns: list[str] | None = None, limit: int = PAGE_ROWS,
          total: int | None = None) -> str:
    if not rows:
        return "<p class=empty>none</p>"
    columns = columns or list(rows[0])
    head = "".join(f"<th>{_e(c)}</th>" for c in columns)
    body = "".join("<tr>" + "".join(_cell(row.get(c)) for c in columns) + "</tr>"
                   for row in rows[:limit])
    total = len(rows) if total is None else total
    more = (f"<p class=more>{limit} of {total} rows shown; all are in the Parquet table.</p>"
            if total > limit else "")
    return f"<div class=scroll><table><tr>{head}</tr>{body}</table></div>{more}"


def svg_message_counts(routes: list[dict]) -> str:
    """
    One horizontal bar per route, split by fate, scaled to the largest.
    """
    if not routes:
        return "<p class=empty>no messages</p>"
    label_w, bar_w, row_h = 260, 560, 22
    height = row_h * len(routes) + 40
    top = max(max(_number(r["accepted"]), _number(r["enqueued"])) for r in routes) or 1
    parts = [f'<svg class=chart width="{label_w + bar_w + 160}" height="{height}" '
             'xmlns="http://www.w3.org/2000/svg" font-size="12">']
    for i, row in enumerate(routes):
        y = 10 + i * row_h
        parts.append(f'<text x="{label_w - 6}" y="{y + 14}" text-anchor="end">'
                     f'{_e(route_name(row))}</text>')
        x = float(label_w)
        for key, colour in FATE_COLOURS:
            n = _number(row.get(key))
            if not n:
                continue
            w = max(bar_w * n / top, 1.0)
            parts.append(f'<rect x="{x:.1f}" y="{y + 2}" width="{w:.1f}" height="{row_h - 6}" '
                         f'fill="{colour}"><title>{_e(key)}: {n}</title></rect>')
            x += w
        note = f"{_number(row['accepted'])} accepted"
        if row.get("duplicated"):
            note += f", {row['duplicated']} duplicated"
        parts.append(f'<text x="{x + 6:.1f}" y="{y + 14}">{_e(note)}</text>')
    y = height - 14
    x = label_w
    for key, colour in FATE_COLOURS:
        label = "lost (non-persistent)" if key == "lost_non_persistent" else key.replace("_", " ")
        parts.append(f'<rect x="{x}" y="{y - 10}" width="12" height="12" fill="{colour}"/>'
                     f'<text x="{x + 16}" y="{y}">{_e(label)}</text>')
        x += 40 + 7 * len(label)
    parts.append("</svg>")
    return "".join(parts)


def svg_latency(route: dict, buckets: list[dict]) -> str:
    """
    One route's latency distribution: a bar per log-scale bucket, with
    the percentiles marked.
    """
    width, height, left, bottom = 420, 150, 40, 30
    if not buckets:
        return f"<p class=empty>{_e(route_name(route))}: no message enqueued</p>"
    lows = [math.log10(b["lower_ms"]) for b in buckets]
    highs = [math.log10(b["upper_ms"]) for b in buckets]
    marks = [math.log10(max(route[k], 1e-3)) for k in LATENCIES if route.get(k) is not None]
    lo = min(lows + marks) - 0.15
    hi = max(highs + marks) + 0.15
    top = max(b["count"] for b in buckets)
    plot_w, plot_h = width - left - 10, height - bottom - 20

    def x_of(log_ms: float) -> float:
        return left + plot_w * (log_ms - lo) / (hi - lo)

    parts = [f'<svg class=chart width="{width}" height="{height}" '
             'xmlns="http://www.w3.org/2000/svg" font-size="11">',
             f'<text x="{left}" y="12" font-weight="bold">{_e(route_name(route))}</text>',
             f'<text x="{width - 10}" y="12" text-anchor="end">'
             '<tspan fill="#2e7d32">p50</tspan> <tspan fill="#fb8c00">p95</tspan> '
             '<tspan fill="#d50000">p99</tspan></text>']
    for b, l, h in zip(buckets, lows, highs):
        bar_h = plot_h * b["count"] / top
        parts.append(
            f'<rect x="{x_of(l):.1f}" y="{20 + plot_h - bar_h:.1f}" '
            f'width="{max(x_of(h) - x_of(l) - 1, 1):.1f}" height="{bar_h:.1f}" fill="#1e88e5">'
            f'<title>{b["lower_ms"]:.3g}–{b["upper_ms"]:.3g} ms: {b["count"]}</title></rect>')
    axis_y = 20 + plot_h
    parts.append(f'<line x1="{left}" y1="{axis_y}" x2="{left + plot_w}" y2="{axis_y}" '
                 'stroke="#333"/>')
    for tick in _log_ticks(lo, hi):
        x = x_of(math.log10(tick))
        parts.append(f'<line x1="{x:.1f}" y1="{axis_y}" x2="{x:.1f}" y2="{axis_y + 4}" '
                     f'stroke="#333"/><text x="{x:.1f}" y="{axis_y + 16}" '
                     f'text-anchor="middle">{_e(_ms(tick))}</text>')
    parts.append(f'<text x="{left + plot_w}" y="{height - 2}" text-anchor="end">ms (log)</text>')
    for key, colour in (("latency_p50_ms", "#2e7d32"), ("latency_p95_ms", "#fb8c00"),
                        ("latency_p99_ms", "#d50000")):
        value = route.get(key)
        if value is None:
            continue
        x = x_of(math.log10(max(value, 1e-3)))
        parts.append(f'<line x1="{x:.1f}" y1="20" x2="{x:.1f}" y2="{axis_y}" stroke="{colour}" '
                     f'stroke-dasharray="3,2"><title>{key[8:11]}: {_ms(value)} ms</title></line>')
    parts.append("</svg>")
    return "".join(parts)


def _log_ticks(lo: float, hi: float) -> list[float]:
    """
    1-2-5 values between 10**lo and 10**hi, at most about six of them.
    """
    ticks = []
    for decade in range(math.floor(lo), math.ceil(hi) + 1):
        for step in (1, 2, 5):
            value = step * 10.0 ** decade
            if lo <= math.log10(value) <= hi:
                ticks.append(value)
    while len(ticks) > 6:
        ticks = ticks[::2]
    return ticks


def _active_periods(boots: list[dict], first: float, last: float) -> list[tuple[float, float]]:
    """
    The spans of time some router was logging, merged; idle stretches
    longer than a tenth of the active time (a lab run today, another
    tomorrow) stay apart, so the timeline can leave them out.
    """
    spans = sorted((b["first_time"], b["last_time"]) for b in boots
                   if b.get("first_time") is not None) or [(first, last)]
    active = sum(end - start for start, end in spans) or 1e-3
    merged = [list(spans[0])]
    for start, end in spans[1:]:
        if start - merged[-1][1] <= max(1.0, active / 10):
            merged[-1][1] = max(merged[-1][1], end)
        else:
            merged.append([start, end])
    return [(start, end) for start, end in merged]


class TimeAxis:
    """
    Time → x for the timeline: the active periods share the width in
    proportion to their length (each at least 30 px), the idle gaps
    between them take 40 px each.
    """

    GAP_PX = 40.0
    MIN_PX = 30.0

    def __init__(self, periods: list[tuple[float, float]], left: float, width: float) -> None:
        self.periods = periods
        room = width - self.GAP_PX * (len(periods) - 1)
        total = sum(max(end - start, 1e-3) for start, end in periods)
        widths = [max(room * max(end - start, 1e-3) / total, self.MIN_PX)
                  for start, end in periods]
        scale = room / sum(widths)
        self._segments = []
        x = left
        for (start, end), w in zip(periods, widths):
            self._segments.append((start, end, x, x + w * scale))
            x += w * scale + self.GAP_PX

    def x(self, t: float) -> float:
        for start, end, x0, x1 in self._segments:
            if t <= end:
                if t < start:
                    return x0 - self.GAP_PX / 2
                return x0 + (x1 - x0) * (t - start) / max(end - start, 1e-3)
        return self._segments[-1][3]

    def gaps(self):
        """
        ((x0, x1), (from, to)) for each idle gap.
        """
        for (s0, e0, _, x0), (s1, e1, x1, _) in zip(self._segments, self._segments[1:]):
            yield (x0, x1), (e0, s1)


def svg_timeline(sessions: list[dict], boots: list[dict], first: float, last: float,
                 total: int | None = None) -> str:
    """
    Router processes and links over time: a row per router (its boots, up
    in grey), then a row per link as one router saw it (green while in
    delivery), a tick at each close coloured by its reason.
    """
    if first is None or last is None:
        return "<p class=empty>no events</p>"
    span = max(last - first, 1e-3)
    label_w, plot_w, row_h = 220, 760, 18
    routers = sorted({b["router"] for b in boots})
    pairs = sorted({(s["router"], s["peer"] or "?") for s in sessions})
    rows = [("router", r, None) for r in routers] + [("link", r, p) for r, p in pairs]
    height = row_h * len(rows) + 74
    index = {(kind, r, p): i for i, (kind, r, p) in enumerate(rows)}

    axis = TimeAxis(_active_periods(boots, first, last), label_w, plot_w)
    x_of = axis.x

    parts = [f'<svg class=chart width="{label_w + plot_w + 20}" height="{height}" '
             'xmlns="http://www.w3.org/2000/svg" font-size="11">']
    for (kind, router, peer), i in index.items():
        y = 10 + i * row_h
        label = router if kind == "router" else f"{router} → {peer}"
        weight = ' font-weight="bold"' if kind == "router" else ""
        parts.append(f'<text x="{label_w - 6}" y="{y + 12}" text-anchor="end"{weight}>'
                     f'{_e(label)}</text>')
        parts.append(f'<line x1="{label_w}" y1="{y + 8}" x2="{label_w + plot_w}" y2="{y + 8}" '
                     'stroke="#eee"/>')
    for boot in boots:
        i = index[("router", boot["router"], None)]
        x0, x1 = x_of(boot["first_time"]), x_of(boot["last_time"])
        end = "stopped" if boot["clean_stop"] else "log ends (crash, or still running)"
        parts.append(
            f'<rect x="{x0:.1f}" y="{12 + i * row_h}" width="{max(x1 - x0, 1):.1f}" height="10" '
            f'fill="#90a4ae"><title>{_e(boot["router"])} boot {boot["boot"]}: '
            f'{stamp(boot["first_time"])} – {stamp(boot["last_time"])}, {end}</title></rect>')
    for s in sessions[:TIMELINE_SESSIONS]:
        i = index[("link", s["router"], s["peer"] or "?")]
        y = 10 + i * row_h
        if s.get("delivery_at") is not None and s.get("ended") is not None:
            x0, x1 = x_of(s["delivery_at"]), x_of(s["ended"])
            parts.append(
                f'<rect x="{x0:.1f}" y="{y + 3}" width="{max(x1 - x0, 1):.1f}" height="10" '
                f'fill="#66bb6a"><title>{_e(s["link"])} ({_e(s["direction"])}) in delivery '
                f'{stamp(s["delivery_at"])} – {stamp(s["ended"])}</title></rect>')
        if s.get("close_reason"):
            x = x_of(s["ended"])
            colour = REASON_COLOURS.get(s["close_reason"], "#000")
            extra = ""
            if s.get("silence_intervals") is not None:
                extra = (f", peer silent {s['silence_s']:.3f} s = "
                         f"{s['silence_intervals']:.1f} intervals")
            parts.append(
                f'<rect x="{x - 1.5:.1f}" y="{y}" width="3" height="16" fill="{colour}">'
                f'<title>{_e(s["link"])} closed {stamp(s["ended"])}: {_e(s["close_reason"])}'
                f'{_e(extra)}</title></rect>')
    y = height - 48
    parts.append(f'<text x="{label_w}" y="{y + 28}">{_e(stamp(first))}</text>'
                 f'<text x="{label_w + plot_w}" y="{y + 28}" text-anchor="end">'
                 f'{_e(stamp(last))}</text>')
    if len(axis.periods) == 1:
        for k in range(1, 5):
            t = first + span * k / 5
            x = x_of(t)
            parts.append(f'<line x1="{x:.1f}" y1="{y - 4}" x2="{x:.1f}" y2="{y}" stroke="#333"/>'
                         f'<text x="{x:.1f}" y="{y + 14}" text-anchor="middle">'
                         f'+{_e(_duration(t - first))}</text>')
    for (x0, x1), (gap_start, gap_end) in axis.gaps():
        parts.append(
            f'<rect x="{x0:.1f}" y="4" width="{x1 - x0:.1f}" height="{y - 4}" fill="#fafafa" '
            f'stroke="#ccc" stroke-dasharray="2,2"><title>nothing logged for '
            f'{_e(_duration(gap_end - gap_start))}</title></rect>'
            f'<text x="{(x0 + x1) / 2:.1f}" y="{y + 14}" text-anchor="middle">'
            f'{_e(_duration(gap_end - gap_start))}</text>')
    x = label_w
    for reason, colour in REASON_COLOURS.items():
        parts.append(f'<rect x="{x}" y="{y + 34}" width="10" height="10" fill="{colour}"/>'
                     f'<text x="{x + 14}" y="{y + 43}">{_e(reason)}</text>')
        x += 110
    parts.append("</svg>")
    total = len(sessions) if total is None else total
    if total > min(len(sessions), TIMELINE_SESSIONS):
        parts.append(f"<p class=more>the first {min(len(sessions), TIMELINE_SESSIONS)} of {total} "
                     "connections are drawn.</p>")
    return "".join(parts)


STYLE = """
body{font-family:system-ui,sans-serif;margin:2em;color:#222;max-width:1200px}
h1{font-size:1.5em} h2{font-size:1.2em;margin-top:2em;border-bottom:1px solid #ccc}
.verdict{padding:.8em 1em;border-radius:4px;font-weight:bold}
.ok{background:#e8f5e9;color:#1b5e20} .broken{background:#ffebee;color:#b71c1c}
.warn{background:#fff8e1;padding:.5em 1em;margin:.3em 0}
table{border-collapse:collapse;font-size:12px} td,th{border:1px solid #ddd;padding:2px 6px}
th{background:#f5f5f5;position:sticky;top:0} td.num{text-align:right}
td.null{color:#aaa;text-align:center} .scroll{max-height:480px;overflow:auto}
.more,.empty{color:#666;font-size:12px} .charts{display:flex;flex-wrap:wrap;gap:1em}
dl{display:grid;grid-template-columns:max-content auto;gap:.2em 1em} dt{font-weight:bold}
"""


def render_html(summary: dict, tables: dict[str, list[dict]],
                counts: dict[str, int] | None = None) -> str:
    """
    The report page: verdict, headline figures, plots, then the tables.
    """
    counts = counts or {}
    messages, links = summary["messages"], summary["links"]
    verdict = ("<div class='verdict ok'>OK: the mesh kept its promises</div>" if summary["ok"]
               else "<div class='verdict broken'>NOT OK<ul>"
               + "".join(f"<li>{_e(r)}</li>" for r in summary["reasons"]) + "</ul></div>")
    warnings = "".join(f"<div class=warn>⚠ {_e(w)}</div>" for w in summary["warnings"])
    facts = {
        "inputs": f"{summary['inputs']['files']} file(s), {summary['inputs']['lines']} lines, "
                  f"{summary['inputs']['malformed']} malformed",
        "time": f"{summary['time']['first_utc']} – {summary['time']['last_utc']}",
        "routers": ", ".join(summary["routers"]["names"]),
        "messages": ", ".join(f"{k.replace('_', ' ')} {messages[k]}" for k in MESSAGE_COUNTS),
        "latency": ", ".join(f"{k} {_ms(v)} ms" for k, v in messages["latency_ms"].items()),
        "links": f"{links['links']} seen, {links['sessions']} delivery sessions, "
                 f"{links['time_in_delivery_s']:.1f} s in delivery in all, closes "
                 + (", ".join(f"{k} {v}" for k, v in links["closes"].items()) or "none"),
        "keepalive": f"{links['keepalive_closes']} closes, {links['keepalive_late']} later than "
                     f"{links['keepalive_limit_intervals']:g} intervals",
        "settings": f"in-flight grace {summary['settings']['in_flight_grace_s']:g} s; "
                    f"Spark {summary['audit'].get('spark_version')} "
                    f"({summary['audit'].get('master')})",
    }
    facts_html = "<dl>" + "".join(f"<dt>{_e(k)}</dt><dd>{_e(v)}</dd>" for k, v in facts.items()) \
        + "</dl>"
    histogram = tables.get("latency_histogram", [])
    latency_charts = "".join(
        svg_latency(route, [b for b in histogram
                            if b["origin"] == route["origin"] and b["dest"] == route["dest"]])
        for route in tables.get("routes", [])[:24])
    sections = [
        ("Messages per route", svg_message_counts(tables.get("routes", []))
         + table(tables.get("routes", []))),
        ("Latency per route (accepted → enqueued)", f"<div class=charts>{latency_charts}</div>"),
        ("Latency per route and time window", table(tables.get("latency_windows", []),
                                                     total=counts.get("latency_windows"))),
        ("Links and routers over time", svg_timeline(tables.get("link_sessions", []),
                                                      tables.get("boots", []),
                                                      summary["time"]["first"],
                                                      summary["time"]["last"],
                                                      counts.get("link_sessions"))),
        ("HA failovers", table(tables.get("failovers", []), total=counts.get("failovers"))),
        ("HA instances", table(tables.get("ha_groups", []))),
        ("Links (as each router saw them)", table(tables.get("links", []))),
        ("Keepalive closes", table(tables.get("keepalive_closes", []),
                                   total=counts.get("keepalive_closes"))),
        ("Routers", table(tables.get("routers", []))),
        ("Router processes", table(tables.get("boots", []))),
        ("Rejections", table(tables.get("rejections", []))),
        ("Client requests denied (per user)", table(tables.get("denials", []))),
        ("Messages to look at (lost, duplicated, orphaned)",
         table(tables.get("message_problems", []), total=counts.get("message_problems"))),
        *topic_report.page_sections(tables, counts, table),
        ("Malformed lines", table(tables.get("malformed_lines", []),
                                  total=counts.get("malformed_lines"))),
        ("Inputs", table(tables.get("inputs", []))),
    ]
    body = "".join(f"<h2>{_e(title)}</h2>{content}" for title, content in sections)
    return (
        "<!DOCTYPE html><html><head><meta charset='utf-8'>"
        "<title>meshroute audit</title>"
        f"<style>{STYLE}</style></head><body>"
        f"<h1>meshroute audit</h1>{verdict}{warnings}{facts_html}{body}"
        f"<p class=more>generated {_e(summary['audit'].get('generated_at'))} by meshroute "
        f"{_e(summary['audit'].get('meshroute_version'))}</p>"
        "</body></html>\n"
    )
