"""
The topic part of the audit's outputs for people (L{meshroute.audit.report}):
summary.json's C{topics}, the verdict's reasons and warnings about
topic copies, the console line and the page's sections.

Plain Python values only (the topic tables' rows collected as dicts),
never Spark, as the rest of the report.
"""

#: The copies of a durable subscription period, by fate
#: (L{meshroute.audit.topic_views.subscriptions}' columns).
SUBSCRIPTION_COUNTS = ("due", "enqueued", "consumed", "waiting", "deleted", "expired", "dropped",
                       "in_flight", "lost", "lost_non_persistent", "duplicated",
                       "duplicate_copies", "without_fan_out", "outside", "missed")

#: The copies between two routers, by fate (L{meshroute.audit.topic_views.link_counts}).
LINK_COUNTS = ("sent", "fanned_out", "arrived", "in_flight", "lost", "lost_non_persistent",
               "dropped", "expired", "dead_lettered", "unobserved", "duplicated",
               "duplicate_copies", "duplicates_dropped", "without_fan_out")

#: Why non-durable copies are dropped, as columns of C{topic_routers}.
DROP_REASONS = ("max_depth", "max_total_depth", "unsubscribed", "other")

#: The non-durable copies per router (L{meshroute.audit.topic_views.router_copy_counts}),
#: without the C{non_durable_} prefix and the drops by reason.
NON_DURABLE_COUNTS = ("due", "delivered", "dropped", "expired", "waiting", "in_flight", "lost",
                      "duplicated", "without_fan_out")

#: How many durable subscriptions summary.json lists one by one.
LISTED = 100


def _sum(rows: list[dict], key: str) -> int:
    return sum(row.get(key) or 0 for row in rows)


def topic_summary(subscriptions: list[dict], links: list[dict], routers: list[dict],
                  problems: int) -> dict:
    """
    summary.json's C{topics}: the counts of the topic tables' rows, over
    all of them, and each durable subscription's.

    @param problems: the rows of C{topic_problems}.
    """
    existing = {(row["router"], row["queue"]) for row in subscriptions if row["exists"]}
    return {
        "publications": _sum(routers, "publications"),
        "fanned_out": _sum(routers, "publications") + _sum(routers, "copies_taken"),
        "durable": {"subscriptions": len(existing),
                    **{key: _sum(subscriptions, key) for key in SUBSCRIPTION_COUNTS}},
        "links": {key: _sum(links, key) for key in LINK_COUNTS},
        "non_durable": {
            **{key: _sum(routers, f"non_durable_{key}") for key in NON_DURABLE_COUNTS},
            "dropped_by_reason": {reason.replace("_", "-"):
                                  _sum(routers, f"non_durable_dropped_{reason}")
                                  for reason in DROP_REASONS},
        },
        "problems": problems,
        "subscriptions": [
            {key: row.get(key) for key in ("router", "queue", "pattern", "period", "since",
                                           "until", "ended_by", "exists",
                                           *SUBSCRIPTION_COUNTS)}
            for row in subscriptions[:LISTED]],
    }


def _names(rows: list[dict], key: str, name) -> str:
    parts = [f"{name(row)}: {row[key]}" for row in rows if row.get(key)]
    return "; ".join(parts[:10]) + ("; …" if len(parts) > 10 else "")


def _subscription(row: dict) -> str:
    return f"{row['queue']}@{row['router']}"


def _link(row: dict) -> str:
    return f"{row['router']} → {row['hop']}"


def judge_topics(summary: dict, subscriptions: list[dict], links: list[dict]) -> None:
    """
    Add to C{summary}'s C{reasons} and C{warnings} what its C{topics}
    shows: a durable subscription's copy lost, doubled or outside its
    life, a persistent copy lost between routers or fanned out twice
    break the promise; the rest is worth a look.
    """
    topics = summary.get("topics")
    if not topics:
        return
    durable, between, plain = topics["durable"], topics["links"], topics["non_durable"]
    reasons, warnings = summary["reasons"], summary["warnings"]
    grace = summary["settings"]["in_flight_grace_s"]
    if durable["lost"]:
        reasons.append(f"{durable['lost']} persistent copy(ies) due to durable subscriptions "
                       f"lost: fanned out to them, never enqueued "
                       f"({_names(subscriptions, 'lost', _subscription)})")
    if durable["duplicated"]:
        reasons.append(f"{durable['duplicated']} copy(ies) enqueued or consumed more than once "
                       f"in durable subscriptions, {durable['duplicate_copies']} extra "
                       f"({_names(subscriptions, 'duplicated', _subscription)})")
    if durable["outside"]:
        reasons.append(f"{durable['outside']} copy(ies) reached durable subscriptions before "
                       f"they were made or after they were forgotten "
                       f"({_names(subscriptions, 'outside', _subscription)})")
    if between["lost"]:
        missed = (f"; missed by {_names(subscriptions, 'missed', _subscription)}"
                  if durable["missed"] else "")
        reasons.append(f"{between['lost']} persistent copy(ies) between routers lost on the way "
                       f"({_names(links, 'lost', _link)}){missed}")
    if between["duplicated"]:
        reasons.append(f"{between['duplicated']} copy(ies) between routers fanned out more than "
                       f"once ({_names(links, 'duplicated', _link)})")
    in_flight = durable["in_flight"] + between["in_flight"]
    if in_flight:
        warnings.append(f"{in_flight} topic copy(ies) still in flight at the end of the logs "
                        f"(made within {grace:g} s of it), not counted as lost")
    if between["arrived"]:
        warnings.append(f"{between['arrived']} copy(ies) between routers arrived without their "
                        "router's topic.fanned-out: was it killed before its last records "
                        f"were written? ({_names(links, 'arrived', _link)})")
    unexplained = durable["without_fan_out"] + between["without_fan_out"] + plain[
        "without_fan_out"]
    if unexplained:
        warnings.append(f"{unexplained} topic copy(ies) seen without the topic.fanned-out that "
                        "made them: is a router's log missing or cut short?")
    if plain["dropped"]:
        reasons_text = ", ".join(f"{reason} {n}" for reason, n in
                                 plain["dropped_by_reason"].items() if n)
        warnings.append(f"{plain['dropped']} copy(ies) to non-durable subscriptions dropped "
                        f"({reasons_text})")
    if plain["lost"] or plain["duplicated"]:
        warnings.append(f"non-durable subscriptions: {plain['lost']} copy(ies) never enqueued, "
                        f"{plain['duplicated']} enqueued more than once (at most once allows "
                        "the first; a copy round a routing loop the second)")
    lost_in_memory = durable["lost_non_persistent"] + between["lost_non_persistent"]
    if lost_in_memory:
        warnings.append(f"{lost_in_memory} non-persistent topic copy(ies) never arrived (at "
                        "most once allows it)")
    if between["unobserved"]:
        warnings.append(f"{between['unobserved']} copy(ies) between routers went to routers "
                        "whose event log is not in the input and cannot be checked")
    if between["dropped"]:
        warnings.append(f"{between['dropped']} copy(ies) for other routers dropped (max-backlog: "
                        "too many waited for their routers already; or, in memory, on the "
                        "way): their subscribers never get them "
                        f"({_names(links, 'dropped', _link)})")
    if between["dead_lettered"]:
        warnings.append(f"{between['dead_lettered']} copy(ies) between routers dead-lettered "
                        "(max-hops): their subscribers never get them")


def console_line(summary: dict) -> list[str]:
    """
    The console's line about topics: none when the logs have no topic
    traffic.
    """
    topics = summary.get("topics")
    if not topics or not (topics["fanned_out"] or topics["durable"]["subscriptions"]):
        return []
    durable, between, plain = topics["durable"], topics["links"], topics["non_durable"]
    return [f"topics: {topics['publications']} publication(s); {durable['subscriptions']} "
            f"durable subscription(s): due {durable['due']}, consumed {durable['consumed']}, "
            f"waiting {durable['waiting']}, lost {durable['lost']}, duplicated "
            f"{durable['duplicated']}; between routers: sent {between['sent']}, lost "
            f"{between['lost']}, in flight {between['in_flight']}; non-durable: delivered "
            f"{plain['delivered']}, dropped {plain['dropped']}"]


def page_sections(tables: dict, counts: dict, table) -> list[tuple[str, str]]:
    """
    The page's topic sections, (title, HTML), drawn with C{table}
    (L{meshroute.audit.report.table}).
    """
    return [
        ("Topics: durable subscriptions (copies by fate, per period of each)",
         table(tables.get("subscriptions", []))),
        ("Topics: copies between routers", table(tables.get("topic_links", []))),
        ("Topics per router (fan-outs, non-durable deliveries and drops)",
         table(tables.get("topic_routers", []))),
        ("Topic copies to look at (lost, doubled)",
         table(tables.get("topic_problems", []), total=counts.get("topic_problems"))),
    ]
