"""
Tests for L{meshroute.security.reload}: a reload puts a whole new policy
in force or, for anything wrong, logs why (naming the file and the key or
line) and keeps the policy in force.  The SIGHUP that triggers it in a
running router is tested with real processes (test_security_processes).
"""

import os

import pytest
from twisted.internet.testing import MemoryReactor

from meshroute.config import load_config
from meshroute.security.credentials import derive
from meshroute.security.load import load_policy
from meshroute.security.policy import Permission, Security, SecurityPolicy
from meshroute.security.reload import describe_changes, reload_security
from meshroute.security.users import write_users

ALICE = derive("a", salt=b"a" * 16)
BOB = derive("b", salt=b"b" * 16)
CAROL = derive("c", salt=b"c" * 16)

PERMISSION = """
[[security.permission]]
users = ["alice", "bob"]
consume = ["q"]
"""


@pytest.fixture
def files(tmp_path):
    """
    A router configuration with [security] and its users file (alice,
    bob); returns C{(config path, users path)}.
    """
    users = str(tmp_path / "users")
    write_users(users, {"alice": ALICE, "bob": BOB})
    config = tmp_path / "router.toml"
    config.write_text(f'[router]\nname = "router-a"\ndata-dir = "{tmp_path / "data"}"\n'
                      f'[security]\nusers-file = "{users}"\n' + PERMISSION)
    return str(config), users


def started(config_path):
    """
    The config and the L{Security} a router started with, and the
    policies its observer saw replaced, as C{(old, new)} pairs.
    """
    config = load_config(config_path, MemoryReactor())
    security = Security(load_policy(config))
    seen = []
    security.observe(lambda old, new: seen.append((old, new)))
    return config, security, seen


def reread(config):
    """
    The loader a router is given to read C{config}'s file again.
    """
    return lambda: load_config(config.path, MemoryReactor())


def policy(users, permissions=()):
    return SecurityPolicy("router-a", users, tuple(permissions))


def test_describe_changes():
    old = policy({"alice": ALICE, "bob": BOB}, [Permission(("alice",))])
    new = policy({"alice": derive("new", salt=b"x" * 16), "carol": CAROL},
                 [Permission(("alice",)), Permission(("carol",))])
    assert describe_changes(old, new) == (
        "users added: carol; users removed: bob; passwords changed: alice; "
        "2 permissions (changed)")
    assert describe_changes(old, old) == "users unchanged (2); 1 permissions (unchanged)"


def test_a_reload_puts_the_new_users_in_force(files):
    config_path, users = files
    config, security, seen = started(config_path)
    write_users(users, {"alice": ALICE, "carol": CAROL})
    assert reload_security(security, config, reread(config))
    assert list(security.policy.users) == ["alice", "carol"]
    [(old, new)] = seen
    assert list(old.users) == ["alice", "bob"] and new is security.policy
    assert security.policy.router == "router-a"


def test_a_reload_reads_the_permissions_and_keeps_the_router_name(files):
    config_path, _ = files
    config, security, _ = started(config_path)
    with open(config_path) as f:
        text = f.read()
    with open(config_path, "w") as f:
        f.write(text.replace('"router-a"', '"router-z"').replace('["q"]', '["q", "r-*"]')
                + '[[security.permission]]\nusers = ["bob"]\nsend = ["q"]\n')
    assert reload_security(security, config, reread(config))
    assert security.policy.router == "router-a"
    assert security.policy.may_consume("alice", "r-1")
    assert security.policy.may_send("bob", "q@router-a")


def refused(observe_errors, *fragments):
    [error] = observe_errors.take(lambda e: "reload refused" in e.get("log_format", ""))
    for fragment in fragments:
        assert fragment in error["error"]


@pytest.mark.parametrize("breakage, fragments", [
    ("chmod", ["readable by others (mode 0644); run chmod 600"]),
    ("garbage", ["line 5 (user mallory)"]),
    ("missing", ["cannot read"]),
])
def test_a_bad_users_file_keeps_the_policy_in_force(files, observe_errors, breakage,
                                                    fragments):
    config_path, users = files
    config, security, seen = started(config_path)
    before = security.policy
    if breakage == "chmod":
        os.chmod(users, 0o644)
    elif breakage == "garbage":
        with open(users, "a") as f:
            f.write("mallory is-not-a-verifier\n")
    else:
        os.remove(users)
    assert not reload_security(security, config, reread(config))
    refused(observe_errors, users, *fragments)
    assert security.policy is before and seen == []


def test_a_bad_config_keeps_the_policy_in_force(files, observe_errors):
    config_path, _ = files
    config, security, seen = started(config_path)
    with open(config_path, "a") as f:
        f.write('[[security.permission]]\nusers = ["a@b"]\n')
    assert not reload_security(security, config, reread(config))
    refused(observe_errors, config_path, "security.permission[1].users[0]")
    assert seen == []


def test_a_bad_topic_pattern_keeps_the_policy_in_force(files, observe_errors):
    config_path, _ = files
    config, security, seen = started(config_path)
    before = security.policy
    with open(config_path, "a") as f:
        f.write('[[security.permission]]\nusers = ["bob"]\npublish = ["prices.eu"]\n'
                'subscribe = ["prices.eu.*", "prices..eu"]\n')
    assert not reload_security(security, config, reread(config))
    refused(observe_errors, config_path, "security.permission[1].subscribe[1]", "not ''")
    assert security.policy is before and seen == []
    with open(config_path) as f:
        text = f.read()
    with open(config_path, "w") as f:
        f.write(text.replace('"prices..eu"', '"prices.us.#"'))
    assert reload_security(security, config, reread(config))
    assert security.policy.may_publish("bob", "prices.eu")
    assert security.policy.may_subscribe("bob", "prices.us.usd")
    assert not before.may_publish("bob", "prices.eu")


def test_removing_security_waits_for_a_restart(files, observe_errors):
    config_path, _ = files
    config, security, seen = started(config_path)
    with open(config_path, "w") as f:
        f.write(f'[router]\nname = "router-a"\ndata-dir = "{config.data_dir}"\n')
    assert not reload_security(security, config, reread(config))
    refused(observe_errors, config_path, "security", "removed while the router runs")
    assert seen == []


def test_adding_security_waits_for_a_restart(files, observe_errors):
    config_path, _ = files
    config = load_config(config_path, MemoryReactor())
    assert not reload_security(None, config, reread(config))
    refused(observe_errors, "added while the router runs",
            "until then the client listener stays open")


def test_nothing_to_reload_without_security(tmp_path):
    path = tmp_path / "router.toml"
    path.write_text(f'[router]\nname = "router-a"\ndata-dir = "{tmp_path}"\n')
    config = load_config(str(path), MemoryReactor())
    assert not reload_security(None, config, reread(config))
