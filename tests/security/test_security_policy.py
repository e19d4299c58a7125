"""
The security policy's pattern rules and the SCRAM credentials a router keeps.
"""

import base64

from hypothesis import given, strategies as st

from meshroute.security.credentials import derive, password_matches
from meshroute.security.policy import Permission, Security, SecurityPolicy

NAME = st.text("abcxyz019._-", min_size=1, max_size=12)


def policy(*permissions: Permission) -> SecurityPolicy:
    return SecurityPolicy("router-a", {}, permissions)


def test_rfc7677_credentials_check_the_password():
    salt = base64.b64decode("W22ZaJ0SNY7soEsUEjb6gQ==")
    credentials = derive("pencil", salt=salt)
    assert password_matches(credentials, "pencil")
    assert not password_matches(credentials, "pencil ")
    assert derive("pencil").salt != derive("pencil").salt


def test_star_matches_a_run_of_name_characters_never_an_at():
    p = policy(Permission(("app",), send=("orders@*",), consume=("orders-*",)))
    assert p.may_send("app", "orders@router-b")
    assert not p.may_send("app", "orders@x@y")
    assert not p.may_send("app", "orders2@router-b")
    assert p.may_consume("app", "orders-eu")
    assert p.may_consume("app", "orders-")
    assert not p.may_consume("app", "orders")


def test_a_send_pattern_without_a_router_means_this_router():
    p = policy(Permission(("app",), send=("audit",)))
    assert p.may_send("app", "audit@router-a")
    assert not p.may_send("app", "audit@router-b")


def test_a_user_may_do_what_any_entry_allows_and_nothing_else():
    p = policy(Permission(("a",), send=("x@*",)), Permission(("a", "b"), consume=("q",)))
    assert p.may_send("a", "x@r") and p.may_consume("a", "q")
    assert not p.may_send("b", "x@r") and p.may_consume("b", "q")
    assert not p.may_send("c", "x@r") and not p.may_consume("c", "q")


@given(NAME, NAME)
def test_a_pattern_without_star_matches_only_itself(pattern, name):
    p = policy(Permission(("u",), consume=(pattern,)))
    assert p.may_consume("u", name) == (pattern == name)


def test_replacing_the_policy_tells_the_observers():
    first, second = policy(), policy(Permission(("u",), consume=("q",)))
    security = Security(first)
    seen = []
    security.observe(lambda old, new: seen.append((old, new)))
    security.replace(second)
    assert security.policy is second and seen == [(first, second)]
