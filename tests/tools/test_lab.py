"""
How the lab (L{meshroute.lab}) words events: one line each, link and
session events in one form, and no event printed as raw JSON.
"""

import time

from meshroute.lab import describe

AT = time.mktime((2026, 11, 23, 17, 12, 29, 0, 0, -1))
WHO = "17:12:29 router-a "
SESSION = "3f2a9c1b5d7e4f60a1b2c3d4e5f60718"


def line(event: str, **fields) -> str:
    return describe({"time": AT, "router": "router-a", "event": event, **fields}, "router-a")


def test_link_and_session_events_share_one_form():
    link = line("link.stage", link="router-a/C1", direction="connector", peer="router-b",
                stage="delivery")
    session = line("session.opened", session_id=SESSION, client_id="meshroute-27099",
                   ttl_ms=60000)

    assert link == WHO + " link router-a/C1    connector router-b  → delivery"
    assert session == (
        WHO + " session 3f2a9c1b5d  client    meshroute-27099 → opened, TTL 60000 ms")
    # The columns line up: what happened starts after the same three.
    assert link.index("router-b") == session.index("meshroute-27099")


def test_each_session_event_says_what_happened():
    fields = {"session_id": SESSION, "client_id": "app"}
    lines = [
        line("session.disconnected", reason="connection-lost", keep_alive_ms=60000,
             last_command_id=4, unacknowledged=0, **fields),
        line("session.reattached", last_command_id=4, answers_resent=0, deliveries_resent=2,
             requeued=0, disconnected_for_s=1.25, **fields),
        line("session.recreated", requested_session_id="0" * 32, **fields),
        line("session.expired", requeued=1, keep_alive_ms=60000, resumable=True, **fields),
        line("session.closed", reason="client", **fields),
    ]

    assert [text.split("app", 1)[1].strip() for text in lines] == [
        "disconnected: connection-lost",
        "→ reattached after 1.2 s, 2 deliveries resent",
        "→ recreated (session 0000000000 was gone)",
        "expired",
        "closed: client",
    ]


def test_an_event_without_words_is_its_fields_not_json():
    text = line("queue.unheard-of", count=3, where="here")

    assert text == WHO + " queue.unheard-of count=3 where=here"


def test_security_and_connector_events_have_words():
    assert line("security.denied", user="", action="send", target="orders@router-c",
                reason="not allowed") == (
        WHO + " security: send orders@router-c by ? denied: not allowed")
    assert line("connector.exhausted", peer="router-b", attempts=3) == (
        WHO + " link connector to router-b gave up after 3 attempts")


def test_message_events_are_counted_not_printed():
    assert line("message.accepted", msg_id="m", dest="q@router-b", size=1) is None
