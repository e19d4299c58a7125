"""
Tests for C{[[ha.colocated]]} in L{meshroute.config}: a router's file
names the files of the HA instances its process runs beside it; each is
loaded whole, relative to the including file, and what keeps them from
running side by side (one data-dir, one router name, one listening
address) is refused naming the including file and the entry's key.
C{meshroute check-config} checks the hosted files, and the pairs formed
across files.
"""

import dataclasses
import io
import os

import pytest

from meshroute import cli
from meshroute.config_writer import format_config
from meshroute.errors import ConfigError

from support.config_files import SECRET, load, secret_file  # noqa: F401 (fixtures)
from support.config_files import assert_refused as refused


def instance(name: str, role: str, ports: int, data_dir: str | None = None,
             interface: str = "127.0.0.1", extra: str = "") -> str:
    """
    The file of one HA instance of router C{name}: its client listener on
    port C{ports}, its admin endpoint on C{ports} + 1000, its replication
    listener on C{ports} + 2000, the peer's 100 above or below.
    """
    peer = ports + 100 if role == "primary" else ports - 100
    return f"""
[router]
name = "{name}"
data-dir = "{data_dir or f'var/{name}-{role}'}"

[clients.listener]
endpoint = "tcp:{ports}:interface={interface}"

[admin]
endpoint = "tcp:{ports + 1000}:interface=127.0.0.1"

[ha]
role = "{role}"
{extra}
[ha.replication]
listener = "tcp:{ports + 2000}:interface=127.0.0.1"
peer = "tcp:127.0.0.1:{peer + 2000}"
password-file = "{{secret}}"

[[ha.witness]]
router = "router-w"
endpoint = "tcp:127.0.0.1:7000"
"""


def hosting(*paths: str) -> str:
    return "".join(f'\n[[ha.colocated]]\nconfig = "{path}"\n' for path in paths)


@pytest.fixture
def files(tmp_path, secret_file):
    """
    Write files under C{tmp_path} (C{{secret}} filled in, folders made);
    return the path.
    """

    def write(name: str, text: str):
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text.replace("{secret}", str(secret_file)))
        return path

    return write


def assert_refused(path, key, *fragments):
    """
    The refusal names C{path}, exactly C{key}, and C{fragments}.
    """
    assert refused(path, key, *fragments).key == key


def test_a_router_without_ha_hosts_a_backup_named_relative_to_its_file(files, tmp_path):
    hosted = files("etc/hosted/b-backup.toml", instance("router-b", "backup", 6200))
    path = files("etc/a.toml", '[router]\nname = "router-a"\ndata-dir = "var/a"\n'
                 + hosting("hosted/b-backup.toml"))
    config = load(path)
    assert config.ha is None  # [ha] holds only [[ha.colocated]]
    [backup] = config.colocated
    assert backup == load(hosted)
    assert backup.path == str(hosted) and os.path.isabs(backup.path)
    assert (backup.name, backup.ha.role, backup.data_dir) == (
        "router-b", "backup", "var/router-b-backup")


def test_a_primary_hosts_the_backup_of_another_router(files):
    files("b-backup.toml", instance("router-b", "backup", 6200))
    config = load(files("a-primary.toml", instance("router-a", "primary", 6001)
                        + hosting("b-backup.toml")))
    assert config.ha.role == "primary" and config.ha.group_name == "router-a"
    assert [(c.name, c.ha.role) for c in config.colocated] == [("router-b", "backup")]


def test_a_missing_hosted_file_names_the_entry(files, tmp_path):
    path = files("a.toml", instance("router-a", "primary", 6001) + hosting("nowhere.toml"))
    assert_refused(path, "ha.colocated[0].config", "'nowhere.toml'",
                   str(tmp_path / "nowhere.toml"))


def test_a_hosted_file_s_own_errors_name_it(files):
    hosted = files("b-backup.toml", instance("router-b", "backup", 6200,
                                             extra='lease-timeout = "1s"\n'))
    path = files("a.toml", instance("router-a", "primary", 6001) + hosting("b-backup.toml"))
    with pytest.raises(ConfigError) as info:
        load(path)
    assert (info.value.path, info.value.key) == (str(hosted), "ha.lease-timeout")
    assert info.value.message.startswith("must exceed")
    assert info.value.message.endswith(f"(hosted by {path}, ha.colocated[0].config)")


def test_a_hosted_file_hosts_nothing_itself(files):
    files("c-backup.toml", instance("router-c", "backup", 6300))
    hosted = files("b-backup.toml", instance("router-b", "backup", 6200)
                   + hosting("c-backup.toml"))
    path = files("a.toml", instance("router-a", "primary", 6001) + hosting("b-backup.toml"))
    with pytest.raises(ConfigError) as info:
        load(path)
    assert (info.value.path, info.value.key) == (str(hosted), "ha.colocated")
    assert info.value.message == ("a hosted instance hosts none itself (hosted by "
                                  f"{path}, ha.colocated[0].config)")
    assert len(load(hosted).colocated) == 1  # run on its own, it may


def test_a_hosted_file_is_an_ha_instance(files):
    hosted = files("b.toml", '[router]\nname = "router-b"\ndata-dir = "var/b"\n')
    path = files("a.toml", instance("router-a", "primary", 6001) + hosting("b.toml"))
    with pytest.raises(ConfigError) as info:
        load(path)
    assert (info.value.path, info.value.key) == (str(hosted), "ha")
    assert f"{path} hosts this file's HA instance (ha.colocated[0].config)" in str(info.value)


@pytest.mark.parametrize("table, key, fragment", [
    ('[ha]\ncolocated = []\n', "ha.colocated", "expected [[ha.colocated]] tables"),
    ('[ha]\ncolocated = "b.toml"\n', "ha.colocated", "expected [[ha.colocated]] tables"),
    ('[[ha.colocated]]\nconfig = "b.toml"\nrole = "backup"\n', "ha.colocated[0].role",
     "unknown key"),
    ('[[ha.colocated]]\n', "ha.colocated[0].config", "required key is missing"),
    ('[[ha.colocated]]\nconfig = 7\n', "ha.colocated[0].config", "expected a non-empty string"),
])
def test_colocated_entries_are_checked(files, table, key, fragment):
    path = files("a.toml", '[router]\nname = "router-a"\ndata-dir = "var/a"\n' + table)
    assert_refused(path, key, fragment)


def test_a_plain_empty_ha_section_is_still_refused(files):
    path = files("a.toml", '[router]\nname = "router-a"\ndata-dir = "var/a"\n[ha]\n')
    assert_refused(path, "ha.role", "required key is missing")


# -- what keeps two instances from running in one process ----------------------


@pytest.mark.parametrize("hosted, fragment", [
    (instance("router-b", "backup", 6200, data_dir="var/router-a-primary"),
     "router.data-dir 'var/router-a-primary' is the data-dir of"),
    (instance("router-b", "backup", 6200, data_dir="var/../var/router-a-primary"),
     "is the data-dir of"),
    (instance("router-a", "primary", 6200, data_dir="var/other"),
     "router 'router-a' runs in this process already"),
    (instance("router-a", "backup", 6100),
     "both instances of router 'router-a''s pair would run in one process"),
    (instance("router-b", "backup", 6001),
     "clients.listener.endpoint 'tcp:6001:interface=127.0.0.1' listens where"),
    (instance("router-b", "backup", 6200).replace("tcp:6200:interface=127.0.0.1", "tcp:7500"),
     "clients.listener.endpoint 'tcp:7500' listens where"),
])
def test_instances_that_cannot_run_side_by_side_are_refused(files, hosted, fragment):
    host = instance("router-a", "primary", 6001)
    files("b.toml", hosted)
    path = files("a.toml", host.replace("[admin]", '[routing.listener]\nendpoint = '
                                        '"tcp:7500:interface=127.0.0.1"\npassword-file = '
                                        '"{secret}"\n\n[admin]') + hosting("b.toml"))
    assert_refused(path, "ha.colocated[0].config", fragment)


def test_listeners_on_other_interfaces_or_any_free_port_do_not_clash(files):
    files("b.toml", instance("router-b", "backup", 6200).replace(
        "tcp:6200:interface=127.0.0.1", "tcp:6001:interface=127.0.0.2"))
    files("c.toml", instance("router-c", "backup", 6300).replace("tcp:7300:", "tcp:0:"))
    path = files("a.toml", instance("router-a", "primary", 6001).replace("tcp:7001:", "tcp:0:")
                 + hosting("b.toml", "c.toml"))
    assert len(load(path).colocated) == 2


def test_two_hosted_instances_are_checked_against_each_other(files):
    files("b.toml", instance("router-b", "backup", 6200))
    files("c.toml", instance("router-b", "backup", 6300, data_dir="var/c"))
    path = files("a.toml", instance("router-a", "primary", 6001) + hosting("b.toml", "c.toml"))
    assert_refused(path, "ha.colocated[1].config", "router 'router-b' runs in this process "
                   "already")


def test_format_config_round_trips_the_hosted_files(files):
    files("etc/b-backup.toml", instance("router-b", "backup", 6200))
    loaded = load(files("etc/a.toml", instance("router-a", "primary", 6001)
                        + hosting("b-backup.toml")))
    text = format_config(loaded)
    assert SECRET not in text
    assert f'[[ha.colocated]]\nconfig = "{loaded.colocated[0].path}"' in text
    # Absolute: the effective configuration loads from anywhere.
    again = load(files("elsewhere/effective.toml", text))
    assert again == dataclasses.replace(loaded, path=again.path)


# -- meshroute check-config -----------------------------------------------------------


def check(files, capsys, *paths) -> tuple[int, str, list[str]]:
    """
    C{meshroute check-config} of C{paths}: its status, its output, and its
    stderr lines that are not warnings.
    """
    out = io.StringIO()
    status = cli.main(["check-config", *map(str, paths)], out=out)
    errors = [line for line in capsys.readouterr().err.splitlines() if "warning" not in line]
    return status, out.getvalue(), errors


def two_routers_backing_each_other_up(files, backup_of_b: str = ""):
    """
    a.toml runs router-a's primary and hosts router-b's backup; b.toml
    the other way round.
    """
    hosted_b = files("hosted/b-backup.toml", backup_of_b or instance("router-b", "backup", 6200))
    hosted_a = files("hosted/a-backup.toml", instance("router-a", "backup", 6101))
    a = files("a.toml", instance("router-a", "primary", 6001) + hosting("hosted/b-backup.toml"))
    b = files("b.toml", instance("router-b", "primary", 6100) + hosting("hosted/a-backup.toml"))
    return a, b, hosted_a, hosted_b


def test_check_config_checks_and_prints_the_hosted_files_and_their_pairs(files, capsys):
    a, b, hosted_a, hosted_b = two_routers_backing_each_other_up(files)
    status, out, errors = check(files, capsys, a, b)
    assert (status, errors) == (0, [])
    assert [line for line in out.splitlines() if line.startswith("# effective")] == [
        f"# effective configuration of {a}",
        f"# effective configuration of {hosted_b} (hosted by {a})",
        f"# effective configuration of {b}",
        f"# effective configuration of {hosted_a} (hosted by {b})"]


def test_check_config_reports_a_pair_formed_across_files(files, capsys):
    a, b, _, hosted_b = two_routers_backing_each_other_up(
        files, instance("router-b", "backup", 6200, extra='group-name = "router-bb"\n'))
    status, _, errors = check(files, capsys, a, b)
    assert status == 1
    assert errors == [f"meshroute: {hosted_b}, {b}: ha.group-name: 'router-bb' in {hosted_b}, "
                      f"'router-b' in {b}: the instances would refuse each other "
                      "(group-mismatch)"]


def test_check_config_checks_a_file_once_when_it_is_given_and_hosted(files, capsys):
    a, b, hosted_a, hosted_b = two_routers_backing_each_other_up(files)
    status, out, errors = check(files, capsys, hosted_b, a, b)
    assert (status, errors) == (0, [])
    assert out.count(f"# effective configuration of {hosted_b}") == 1


def test_check_config_refuses_a_file_hosted_by_two_files(files, capsys):
    a, _, _, hosted_b = two_routers_backing_each_other_up(files)
    other = files("c.toml", instance("router-c", "primary", 6300) + hosting(str(hosted_b)))
    status, _, errors = check(files, capsys, a, other)
    assert status == 1
    assert errors == [f"meshroute: {other}: ha.colocated[0].config: {hosted_b} is hosted by "
                      f"{a} too: two processes would run its instance"]
