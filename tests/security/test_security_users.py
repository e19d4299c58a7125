"""
The users file (L{meshroute.security.users}), the secret-file rules it
shares with the admin token (L{meshroute.security.files}), and the
C{meshroute user} commands that write it.
"""

import io
import os
import stat

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from meshroute import cli
from meshroute.cli import user_commands
from meshroute.errors import ConfigError
from meshroute.security.credentials import derive, password_matches
from meshroute.security.users import (
    format_verifier,
    parse_users,
    parse_verifier,
    read_users,
    write_users,
)

#: Fixed salts keep derivation out of the way of what is tested.
ALICE = derive("alice's secret", salt=b"a" * 16)
BOB = derive("bob's secret", salt=b"b" * 16)


def test_write_then_read(tmp_path):
    path = str(tmp_path / "users")
    write_users(path, {"alice": ALICE, "bob": BOB})
    assert read_users(path) == {"alice": ALICE, "bob": BOB}
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    # No temporary file is left behind.
    assert os.listdir(tmp_path) == ["users"]


def test_verifier_is_postgresql_layout():
    text = format_verifier(ALICE)
    mechanism, counts, keys = text.split("$")
    assert mechanism == "SCRAM-SHA-256"
    assert counts == f"4096:{'YWFhYWFhYWFhYWFhYWFhYQ=='}"
    assert len(keys.split(":")) == 2
    assert parse_verifier(text) == ALICE


def test_comments_and_blank_lines(tmp_path):
    text = f"# users\n\n  alice {format_verifier(ALICE)}  \n\t\n# bob left\n"
    assert parse_users(text, "users") == {"alice": ALICE}


@pytest.mark.parametrize("line, fragments", [
    ("alice", ["line 2 (user alice)", "got 1 fields"]),
    ("alice {v} extra", ["line 2 (user alice)", "got 3 fields"]),
    ("al/ice {v}", ["line 2", "user name"]),
    ("alice MD5$abc", ["line 2 (user alice)", "SCRAM-SHA-256$ITERATIONS"]),
    ("alice SCRAM-SHA-256$100:c2FsdA==$AAAA:AAAA", ["iterations must be 4096.."]),
    ("alice SCRAM-SHA-256$4096:c2FsdA==$AAAA:AAAA", ["32 bytes"]),
    ("alice SCRAM-SHA-256$4096:c2Fsd$AAAA:AAAA", ["invalid base64"]),
    ("bob {v}", ["line 2 (user bob)", "already named on an earlier line"]),
])
def test_malformed_lines_name_file_and_line(line, fragments):
    text = f"bob {format_verifier(BOB)}\n{line.format(v=format_verifier(ALICE))}\n"
    with pytest.raises(ConfigError) as info:
        parse_users(text, "etc/users")
    message = str(info.value)
    assert message.startswith("etc/users: line 2")
    for fragment in fragments:
        assert fragment in message


def test_error_never_repeats_the_verifier():
    verifier = format_verifier(ALICE)
    broken = verifier.replace("4096", "99")
    with pytest.raises(ConfigError) as info:
        parse_users(f"alice {broken}\n", "users")
    assert broken not in str(info.value)
    assert verifier.split("$")[2] not in str(info.value)


@pytest.mark.parametrize("mode, fragment", [
    (0o644, "readable by others (mode 0644)"),
    (0o602, "writable by others (mode 0602)"),
    (0o640, "readable by its group (mode 0640)"),
    (0o620, "writable by its group (mode 0620)"),
])
def test_exposed_file_is_refused(tmp_path, mode, fragment):
    path = str(tmp_path / "users")
    write_users(path, {"alice": ALICE})
    os.chmod(path, mode)
    with pytest.raises(ConfigError) as info:
        read_users(path)
    assert str(info.value) == f"{path}: {fragment}; run chmod 600 {path}"


def test_missing_and_binary_files(tmp_path):
    with pytest.raises(ConfigError, match="cannot read: No such file"):
        read_users(str(tmp_path / "nothing"))
    path = tmp_path / "users"
    path.write_bytes(b"alice \xff\n")
    path.chmod(0o600)
    with pytest.raises(ConfigError, match="not UTF-8 text"):
        read_users(str(path))


@settings(max_examples=300)
@given(st.text())
def test_parser_over_arbitrary_text(text):
    """
    Any text is either a valid users file or refused with a ConfigError
    naming the file and a line; nothing else escapes.
    """
    try:
        users = parse_users(text, "users")
    except ConfigError as e:
        assert e.path == "users" and e.key.startswith("line ")
    else:
        assert all(parse_verifier(format_verifier(c)) == c for c in users.values())


@settings(max_examples=100)
@given(st.lists(st.sampled_from([
    "", "# comment", "alice", "bob", format_verifier(ALICE), "SCRAM-SHA-256$4096:",
    "SCRAM-SHA-256$", "$", ":", "==", "c2FsdA==", " ", "\t", "\u00a0", "4096",
]), max_size=12).map(" ".join))
def test_parser_over_near_misses(text):
    try:
        parse_users(text, "users")
    except ConfigError as e:
        assert e.key.startswith("line ")


def test_write_refuses_a_bad_name(tmp_path):
    with pytest.raises(ValueError, match="not a user name"):
        write_users(str(tmp_path / "users"), {"a b": ALICE})


def run_user(argv, stdin=""):
    out, err = io.StringIO(), io.StringIO()
    options = cli.Options()
    options.parseOptions(["user", *argv])
    sub = options.subOptions
    command = user_commands.USER_COMMANDS[sub.subCommand]
    kwargs = {"stdin": io.StringIO(stdin)} if sub.subCommand == "add" else {}
    code = command(sub.subOptions, out, err, **kwargs)
    return code, out.getvalue(), err.getvalue()


def test_user_add_remove_list(tmp_path):
    path = str(tmp_path / "users")
    assert run_user(["add", "--file", path, "--password-stdin", "alice"], "pw-a\n") == (
        0, f"added user alice in {path}\n", "")
    assert run_user(["add", "-f", path, "--password-stdin", "bob"], "pw-b\n")[0] == 0
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    users = read_users(path)
    assert password_matches(users["alice"], "pw-a")
    assert password_matches(users["bob"], "pw-b")
    code, out, err = run_user(["list", "--file", path])
    assert (code, out, err) == (0, "alice\nbob\n", "")
    assert "SCRAM" not in out
    assert run_user(["remove", "--file", path, "alice"]) == (
        0, f"removed user alice from {path}\n", "")
    assert list(read_users(path)) == ["bob"]


def test_user_add_existing_needs_replace(tmp_path):
    path = str(tmp_path / "users")
    run_user(["add", "--file", path, "--password-stdin", "alice"], "old\n")
    code, _, err = run_user(["add", "--file", path, "--password-stdin", "alice"], "new\n")
    assert code == 1 and "already holds user alice; --replace" in err
    assert password_matches(read_users(path)["alice"], "old")
    code, out, _ = run_user(["add", "--file", path, "--password-stdin", "--replace", "alice"],
                            "new\n")
    assert (code, out) == (0, f"changed the password of user alice in {path}\n")
    assert password_matches(read_users(path)["alice"], "new")


def test_user_add_prompts_twice(tmp_path, monkeypatch):
    path = str(tmp_path / "users")
    answers = iter(["typed", "typed", "one", "other"])
    prompts = []

    def getpass(prompt):
        prompts.append(prompt)
        return next(answers)

    monkeypatch.setattr("getpass.getpass", getpass)
    assert run_user(["add", "--file", path, "carol"])[0] == 0
    assert prompts == ["password for carol: ", "again: "]
    assert password_matches(read_users(path)["carol"], "typed")
    code, _, err = run_user(["add", "--file", path, "dave"])
    assert (code, err) == (1, "meshroute: the passwords differ; nothing changed\n")
    assert list(read_users(path)) == ["carol"]


def test_user_add_refuses_empty_password(tmp_path):
    path = str(tmp_path / "users")
    code, _, err = run_user(["add", "--file", path, "--password-stdin", "alice"], "\n")
    assert (code, err) == (1, "meshroute: the password is empty; nothing changed\n")
    assert not os.path.exists(path)


def test_user_commands_refuse_an_exposed_file(tmp_path):
    path = str(tmp_path / "users")
    write_users(path, {"alice": ALICE})
    os.chmod(path, 0o644)
    for argv in (["list", "--file", path], ["remove", "--file", path, "alice"],
                 ["add", "--file", path, "--password-stdin", "bob"]):
        code, _, err = run_user(argv, "pw\n")
        assert code == 1 and f"readable by others (mode 0644); run chmod 600 {path}" in err
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o644


def test_user_usage_errors(tmp_path, capsys):
    assert cli.main(["user", "add", "alice"]) == 2
    assert "--file FILE is required" in capsys.readouterr().err
    assert cli.main(["user", "add", "--file", str(tmp_path / "u"), "no/pe"]) == 2
    assert "is not a user name" in capsys.readouterr().err
    assert cli.main(["user"]) == 2
    assert cli.main(["user", "remove", "--file", str(tmp_path / "u"), "x"]) == 1
    assert "holds no user x" in capsys.readouterr().err
    assert cli.main(["user", "list", "--file", str(tmp_path / "u")]) == 1
    assert "does not exist" in capsys.readouterr().err
