"""
Tests for reading C{[security]} and C{[[security.permission]]} in
L{meshroute.config}, and for L{meshroute.security.load.load_policy}: every
refusal names the file and the dotted key (or the users file and its
line), and C{meshroute check-config} refuses what would stop the router.
"""

import dataclasses
import io
import os

import pytest

from meshroute import cli
from meshroute.config_writer import format_config
from meshroute.errors import ConfigError
from meshroute.security.credentials import derive
from meshroute.security.load import load_policy
from meshroute.security.policy import Permission
from meshroute.security.settings import SecurityConfig
from meshroute.security.users import write_users

from support.config_files import ROUTER, load, secret_file, write  # noqa: F401 (fixtures)
from support.config_files import assert_refused as refused

SECURITY = """
[security]
users-file = "{users}"

[[security.permission]]
users = ["orders-app"]
send = ["orders@*", "audit@router-c"]
consume = ["orders", "orders-*"]

[[security.permission]]
users = ["ops-*"]
consume = ["*"]
publish = ["ops.#"]
subscribe = ["ops.#", "prices.*.gbp"]

[[security.permission]]
users = ["pricer"]
publish = ["prices.*.*"]
subscribe = ["#.*"]
"""


@pytest.fixture
def users_file(tmp_path):
    path = str(tmp_path / "users")
    write_users(path, {"orders-app": derive("pw", salt=b"s" * 16)})
    return path


def assert_refused(path, key, *fragments):
    assert refused(path, key, *fragments).key == key


def test_the_issues_example(write, users_file):
    config = load(write(ROUTER + SECURITY.replace("{users}", users_file)))
    assert config.security == SecurityConfig(
        users_file=users_file,
        permissions=(
            Permission(users=("orders-app",), send=("orders@*", "audit@router-c"),
                       consume=("orders", "orders-*")),
            Permission(users=("ops-*",), send=(), consume=("*",), publish=("ops.#",),
                       subscribe=("ops.#", "prices.*.gbp")),
            Permission(users=("pricer",), publish=("prices.*.*",), subscribe=("#.*",)),
        ),
    )
    policy = load_policy(config)
    assert list(policy.users) == ["orders-app"]
    assert policy.may_send("orders-app", "orders@router-b")
    assert policy.may_send("orders-app", "audit@router-c")
    assert not policy.may_send("orders-app", "audit@router-a")
    assert policy.may_consume("orders-app", "orders-eu")
    assert policy.may_consume("ops-1", "anything")
    assert not policy.may_send("ops-1", "anything@router-a")
    assert policy.may_publish("ops-1", "ops.restart")
    assert policy.may_publish("pricer", "prices.eu.gbp")
    assert not policy.may_publish("orders-app", "ops.restart")
    assert policy.may_subscribe("ops-1", "prices.eu.gbp") and policy.may_subscribe("pricer", "#")
    assert not policy.may_subscribe("ops-1", "prices.#")


def test_no_security_section(write):
    assert load(write(ROUTER)).security is None


def test_security_without_users_file_or_permissions(write):
    config = load(write(ROUTER + "[security]\n"))
    assert config.security == SecurityConfig()
    policy = load_policy(config)
    assert policy.users == {} and policy.permissions == ()


def test_round_trip(write, users_file):
    config = load(write(ROUTER + SECURITY.replace("{users}", users_file)))
    text = format_config(config)
    assert "[[security.permission]]" in text
    assert 'subscribe = ["ops.#", "prices.*.gbp"]' in text and 'subscribe = ["#.*"]' in text
    again = load(write(text, name="effective.toml"))
    assert again == dataclasses.replace(config, path=again.path)


def test_load_policy_needs_security(write):
    with pytest.raises(ValueError, match="no \\[security\\] section"):
        load_policy(load(write(ROUTER)))


@pytest.mark.parametrize("text, key, fragment", [
    ("[security]\nusers = 1\n", "security.users", "unknown key"),
    ("[security]\nusers-file = 3\n", "security.users-file", "non-empty string"),
    ("[security]\npermission = 3\n", "security.permission", "[[security.permission]]"),
    ("[[security.permission]]\nsend = []\n", "security.permission[0].users", "missing"),
    ("[[security.permission]]\nusers = []\n", "security.permission[0].users",
     "a non-empty list"),
    ("[[security.permission]]\nusers = \"a\"\n", "security.permission[0].users",
     "a non-empty list"),
    ("[[security.permission]]\nusers = [\"a@b\"]\n", "security.permission[0].users[0]",
     "not a name pattern"),
    ("[[security.permission]]\nusers = [\"a\", 3]\n", "security.permission[0].users[1]",
     "expected a pattern string"),
    ("[[security.permission]]\nusers = [\"a\"]\nsend = [\"q@r@s\"]\n",
     "security.permission[0].send[0]", "more than one @"),
    ("[[security.permission]]\nusers = [\"a\"]\nsend = [\"q@\"]\n",
     "security.permission[0].send[0]", "QUEUE or QUEUE@ROUTER"),
    ("[[security.permission]]\nusers = [\"a\"]\nsend = [\"q r\"]\n",
     "security.permission[0].send[0]", "QUEUE or QUEUE@ROUTER"),
    ("[[security.permission]]\nusers = [\"a\"]\nconsume = [\"q@r\"]\n",
     "security.permission[0].consume[0]", "not a name pattern"),
    ("[[security.permission]]\nusers = [\"a\"]\nconsume = \"q\"\n",
     "security.permission[0].consume", "a list of patterns"),
    ("[[security.permission]]\nusers = [\"a\"]\nconsume = [\"\"]\n",
     "security.permission[0].consume[0]", "not a name pattern"),
    ("[[security.permission]]\nusers = [\"a\"]\nconsme = [\"q\"]\n",
     "security.permission[0].consme", "unknown key"),
    (f"[[security.permission]]\nusers = [\"{'a' * 65}\"]\n",
     "security.permission[0].users[0]", "1 to 64"),
    ("[[security.permission]]\nusers = [\"a\"]\npublish = [\"prices..eu\"]\n",
     "security.permission[0].publish[0]",
     "each word of a pattern is [A-Za-z0-9_-]+, '*' or '#', not ''"),
    ("[[security.permission]]\nusers = [\"a\"]\nsubscribe = [\"x\", \"prices.eu*\"]\n",
     "security.permission[0].subscribe[1]", "not 'eu*'"),
    ("[[security.permission]]\nusers = [\"a\"]\npublish = \"prices.#\"\n",
     "security.permission[0].publish", "a list of patterns"),
    ("[[security.permission]]\nusers = [\"a\"]\nsubscribe = [3]\n",
     "security.permission[0].subscribe[0]", "expected a pattern string"),
    ("[[security.permission]]\nusers = [\"a\"]\nsubscribe = [\"\"]\n",
     "security.permission[0].subscribe[0]", "words separated by dots"),
    (f"[[security.permission]]\nusers = [\"a\"]\npublish = [\"{'a.' * 128}\"]\n",
     "security.permission[0].publish[0]", "at most 255 characters"),
    ("[[security.permission]]\nusers = [\"a\"]\npublish = [\"a@r\"]\n",
     "security.permission[0].publish[0]", "not 'a@r'"),
])
def test_refusals(write, text, key, fragment):
    assert_refused(write(ROUTER + text), key, fragment)


def test_security_must_be_a_table(write):
    assert_refused(write("security = 1\n" + ROUTER), "security", "expected a table")


def test_users_file_problems_name_the_users_file(write, users_file):
    config = load(write(ROUTER + SECURITY.replace("{users}", users_file)))
    with open(users_file, "a") as f:
        f.write("mallory SCRAM-SHA-256$1:AA==$AA==:AA==\n")
    with pytest.raises(ConfigError) as info:
        load_policy(config)
    assert str(info.value).startswith(f"{users_file}: line 4 (user mallory): iterations")
    os.chmod(users_file, 0o644)
    with pytest.raises(ConfigError, match="readable by others \\(mode 0644\\); run chmod 600"):
        load_policy(config)


def test_check_config_refuses_a_bad_users_file(write, users_file, capsys):
    path = write(ROUTER + SECURITY.replace("{users}", users_file))
    assert cli.main(["check-config", str(path)], out=io.StringIO()) == 0
    os.chmod(users_file, 0o604)
    assert cli.main(["check-config", str(path)], out=io.StringIO()) == 1
    assert f"{users_file}: readable by others (mode 0604)" in capsys.readouterr().err
    os.remove(users_file)
    assert cli.main(["check-config", str(path)], out=io.StringIO()) == 1
    assert f"{users_file}: cannot read: No such file" in capsys.readouterr().err


TOKEN = "0123456789abcdef0123456789abcdef"


@pytest.fixture
def token_file(tmp_path):
    path = tmp_path / "admin.token"
    path.write_text(TOKEN + "\n")
    path.chmod(0o600)
    return path


def admin(endpoint, token_file=None):
    text = f'[admin]\nendpoint = "{endpoint}"\n'
    return text + (f'token-file = "{token_file}"\n' if token_file else "")


@pytest.mark.parametrize("endpoint", [
    "tcp:8001:interface=127.0.0.1", "tcp:8001:interface=127.1.2.3",
    "tcp6:8001:interface=\\\\:\\\\:1", "unix:/run/meshroute/admin.sock",
])
def test_an_admin_api_without_token_on_loopback(write, endpoint):
    config = load(write(ROUTER + admin(endpoint)))
    assert config.admin.token is None and config.admin.token_file is None


@pytest.mark.parametrize("endpoint", [
    "tcp:8001", "tcp:8001:interface=0.0.0.0", "tcp:8001:interface=192.0.2.7",
    "tcp6:8001", "tcp6:8001:interface=\\\\:\\\\:",
])
def test_an_admin_api_reachable_from_elsewhere_needs_a_token(write, token_file, endpoint):
    assert_refused(write(ROUTER + admin(endpoint)), "admin.endpoint",
                   "reachable from other hosts", "no admin.token-file")
    assert load(write(ROUTER + admin(endpoint, token_file))).admin.token == TOKEN.encode()


def test_the_token_is_read_and_never_shown(write, token_file):
    config = load(write(ROUTER + admin("tcp:8001", token_file)))
    assert config.admin.token_file == str(token_file)
    assert TOKEN not in repr(config)
    text = format_config(config)
    assert TOKEN not in text and f'token-file = "{token_file}"' in text
    again = load(write(text, name="effective.toml"))
    assert again == dataclasses.replace(config, path=again.path)


@pytest.mark.parametrize("content, mode, fragment", [
    (TOKEN, 0o644, "readable by others (mode 0644); run chmod 600"),
    (TOKEN, 0o620, "writable by its group (mode 0620)"),
    ("short", 0o600, "at least 16 printable characters"),
    ("with a space in the token", 0o600, "without spaces"),
    ("", 0o600, "at least 16"),
])
def test_a_bad_token_file(write, tmp_path, content, mode, fragment):
    path = tmp_path / "admin.token"
    path.write_text(content + "\n")
    path.chmod(mode)
    error = refused(write(ROUTER + admin("tcp:8001", path)), "admin.token-file", fragment)
    assert str(path) in error.message


def test_a_missing_token_file(write, tmp_path):
    assert_refused(write(ROUTER + admin("tcp:8001", tmp_path / "nothing")),
                   "admin.token-file", "cannot read: No such file")


def test_check_config_refuses_an_open_admin_api(write, capsys):
    path = write(ROUTER + admin("tcp:8001"))
    assert cli.main(["check-config", str(path)], out=io.StringIO()) == 1
    assert "admin.endpoint" in capsys.readouterr().err
