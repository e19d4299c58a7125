"""
Tests for reading C{[ha]}, C{[ha.replication]} and C{[[ha.witness]]} in
L{meshroute.config} into L{meshroute.harules.settings.HASettings}: every
refusal names the file and the dotted key, and C{meshroute check-config}
prints the warnings.
"""

import dataclasses
import io

import pytest

from meshroute import cli
from meshroute.config import config_warnings
from meshroute.config_writer import format_config
from meshroute.harules.settings import HASettings, ReplicationSettings, WitnessSettings

from support.config_files import SECRET, load, secret_file, write  # noqa: F401 (fixtures)
from support.config_files import assert_refused as refused
from support.ha_config_sections import HA, REPLICATION, ROUTER

CLIENTS = """
[clients.listener]
endpoint = "tcp:6002:interface=127.0.0.1"
"""

WITNESS = """
[[ha.witness]]
router = "router-a"
endpoint = "tcp:127.0.0.1:7001"
"""


def assert_refused(path, key, *fragments):
    """
    The refusal names the file, exactly C{key}, and C{fragments}.
    """
    assert refused(path, key, *fragments).key == key


def test_the_issues_example_with_defaults(write, secret_file):
    path = write(ROUTER + CLIENTS + HA + REPLICATION + WITNESS)
    assert load(path).ha == HASettings(
        role="primary",
        group_name="router-b",
        replication=ReplicationSettings(
            listener="tcp:7102:interface=127.0.0.1",
            peer="tcp:127.0.0.1:7202",
            password_file=str(secret_file),
            secret=SECRET.encode(),
        ),
        witnesses=(WitnessSettings("router-a", "tcp:127.0.0.1:7001"),),
    )


def test_a_router_without_ha_has_none(write):
    assert load(write(ROUTER)).ha is None


def test_explicit_values(write):
    path = write(ROUTER + CLIENTS + """
[ha]
role = "backup"
group-name = "pair-b"
heartbeat-interval = "250ms"
lease-timeout = "2s"
replication-timeout = 4000
replica-sync = "normal"
allow-failback = false
restart-backup = false
failover-on-shutdown = false
initial-replication-sync-timeout = "1m"
max-saved-replicated-journals-size = 5
client-endpoints = ["tcp:127.0.0.1:6002", "tcp:127.0.0.1:6102"]
""" + REPLICATION + WITNESS + WITNESS.replace("router-a", "router-c").replace("7001", "7003"))
    ha = load(path).ha
    assert (ha.role, ha.group_name, ha.heartbeat_interval_ms, ha.lease_timeout_ms,
            ha.replication_timeout_ms, ha.replica_sync) == (
        "backup", "pair-b", 250, 2000, 4000, "normal")
    assert (ha.allow_failback, ha.restart_backup, ha.failover_on_shutdown) == (False,) * 3
    assert ha.initial_replication_sync_timeout_ms == 60000
    assert ha.max_saved_replicated_journals_size == 5
    assert ha.client_endpoints == ("tcp:127.0.0.1:6002", "tcp:127.0.0.1:6102")
    assert [w.router for w in ha.witnesses] == ["router-a", "router-c"]


@pytest.mark.parametrize("text,key,fragment", [
    ('role = "live"', "ha.role", "primary, backup"),
    ('role = "primary"\ngroup-name = "pair b"', "ha.group-name", "not a router name"),
    ('role = "primary"\nreplica-sync = "async"', "ha.replica-sync", "full, normal"),
    ('role = "primary"\nallow-failback = "yes"', "ha.allow-failback", "true or false"),
    ('role = "primary"\nheartbeat-interval = "500"', "ha.heartbeat-interval", "500ms"),
    ('role = "primary"\nheartbeat-interval = 0', "ha.heartbeat-interval", "at least 1"),
    ('role = "primary"\nlease-timeout = "2h"', "ha.lease-timeout", "at most 3600000"),
    ('role = "primary"\nmax-saved-replicated-journals-size = -1',
     "ha.max-saved-replicated-journals-size", "at least 0"),
    ('role = "primary"\nrole-name = "x"', "ha.role-name", "unknown key"),
    ('group-name = "router-b"', "ha.role", "required key is missing"),
    # Impossible timings: a combination, judged by HASettings.errors.
    ('role = "primary"\nlease-timeout = "1s"', "ha.lease-timeout",
     "must exceed 2 × heartbeat-interval (1000 ms)"),
    ('role = "primary"\nheartbeat-interval = "3s"', "ha.lease-timeout",
     "must exceed 2 × heartbeat-interval (6000 ms)"),
])
def test_ha_refusals_name_the_key(write, text, key, fragment):
    assert_refused(write(ROUTER + "[ha]\n" + text + "\n" + REPLICATION + WITNESS), key, fragment)


@pytest.mark.parametrize("text,key,fragment", [
    (REPLICATION.replace("tcp:7102:interface=127.0.0.1", "tcp:127.0.0.1:7102"),
     "ha.replication.listener", "invalid server endpoint"),
    (REPLICATION.replace("tcp:127.0.0.1:7202", "tcp:127.0.0.1:99999"),
     "ha.replication.peer", "port must be 1..65535"),
    (REPLICATION.replace("{secret}", "/nonexistent/mesh"), "ha.replication.password-file",
     "cannot read password file"),
    (REPLICATION.replace('peer = "tcp:127.0.0.1:7202"\n', ""), "ha.replication.peer",
     "required key is missing"),
    ("", "ha.replication", "required section [ha.replication] is missing"),
    ("[ha.replication]\n", "ha.replication.listener", "required key is missing"),
])
def test_replication_refusals_name_the_key(write, text, key, fragment):
    assert_refused(write(ROUTER + HA + text + WITNESS), key, fragment)


@pytest.mark.parametrize("text,key,fragment", [
    (WITNESS.replace("tcp:127.0.0.1:7001", "7001"), "ha.witness[0].endpoint",
     "invalid client endpoint"),
    (WITNESS + WITNESS.replace("router-a", "router b"), "ha.witness[1].router",
     "not a router name"),
    (WITNESS + WITNESS, "ha.witness[1].router", "listed twice"),
    (WITNESS.replace("router-a", "router-b"), "ha.witness[0].router", "is this router"),
    ("[ha.witness]\nrouter = 'router-a'\n", "ha.witness", "[[ha.witness]] tables"),
])
def test_witness_refusals_name_the_key(write, text, key, fragment):
    assert_refused(write(ROUTER + HA + REPLICATION + text), key, fragment)


@pytest.mark.parametrize("value,key,fragment", [
    ("[]", "ha.client-endpoints", "a non-empty list"),
    ('["6002"]', "ha.client-endpoints[0]", "invalid client endpoint"),
    ('["tcp:h:6002", "tcp:h:6002"]', "ha.client-endpoints", "repeated"),
])
def test_client_endpoints_refusals(write, value, key, fragment):
    text = ROUTER + CLIENTS + HA + f"client-endpoints = {value}\n" + REPLICATION + WITNESS
    assert_refused(write(text), key, fragment)


def test_client_endpoints_need_a_client_listener(write):
    text = ROUTER + HA + 'client-endpoints = ["tcp:h:6002", "tcp:h:6102"]\n' + REPLICATION
    assert_refused(write(text), "ha.client-endpoints", "[clients.listener]")


def test_ha_must_be_a_table(write):
    assert_refused(write('ha = "primary"\n' + ROUTER), "ha", "expected a table")


def test_format_config_round_trip(write):
    path = write(ROUTER + CLIENTS + HA + 'allow-failback = false\nlease-timeout = "2.5s"\n'
                 + 'client-endpoints = ["tcp:127.0.0.1:6002", "tcp:127.0.0.1:6102"]\n'
                 + REPLICATION + WITNESS + WITNESS.replace("router-a", "router-c"))
    loaded = load(path)
    text = format_config(loaded)
    assert SECRET not in text and SECRET not in repr(loaded)
    assert "allow-failback = false" in text
    assert "lease-timeout = 2500" in text
    assert "group-name = \"router-b\"" in text
    again = load(write(text, name="effective.toml"))
    assert again == dataclasses.replace(loaded, path=again.path)


def test_format_config_without_client_endpoints_round_trips(write):
    loaded = load(write(ROUTER + HA + REPLICATION + WITNESS))
    again = load(write(format_config(loaded), name="effective.toml"))
    assert again == dataclasses.replace(loaded, path=again.path)


def test_warnings_name_file_and_key(write):
    path = write(ROUTER + HA + 'replica-sync = "normal"\n' + REPLICATION)
    warnings = config_warnings(load(path))
    assert [w.split(": ")[:2] for w in warnings] == [
        [str(path), "ha.witness"], [str(path), "ha.replica-sync"]]
    assert "no automatic failover" in warnings[0]


def test_a_router_without_ha_has_no_warnings(write):
    assert config_warnings(load(write(ROUTER))) == []


def test_check_config_prints_warnings_on_stderr(write, capsys):
    path = write(ROUTER + HA + REPLICATION + WITNESS + WITNESS.replace("router-a", "router-c"))
    out = io.StringIO()
    assert cli.main(["check-config", str(path)], out=out) == 0
    err = capsys.readouterr().err
    assert f"meshroute: warning: {path}: ha.witness: 4 voters need a majority of 3" in err
    assert "[ha]" in out.getvalue() and "warning" not in out.getvalue()


def test_check_config_refuses_impossible_timings(write, capsys):
    path = write(ROUTER + HA + 'lease-timeout = "1s"\n' + REPLICATION + WITNESS)
    assert cli.main(["check-config", str(path)], out=io.StringIO()) == 1
    assert "ha.lease-timeout: must exceed 2 × heartbeat-interval" in capsys.readouterr().err


# -- meshroute check-config FILE FILE: the two files of one pair ---------------

BACKUP_ROUTER = ROUTER.replace("b-primary", "b-backup")
BACKUP_HA = HA.replace("primary", "backup")
BACKUP_REPLICATION = """
[ha.replication]
listener = "tcp:7202:interface=127.0.0.1"
peer = "tcp:127.0.0.1:7102"
password-file = "{secret}"
"""


def check_pair(write, capsys, primary: str, backup: str) -> tuple[int, list[str], tuple]:
    """
    C{meshroute check-config} of the two files: its status, its stderr
    lines that are not warnings, and the two paths.
    """
    paths = (write(primary, "primary.toml"), write(backup, "backup.toml"))
    status = cli.main(["check-config", *map(str, paths)], out=io.StringIO())
    lines = [line for line in capsys.readouterr().err.splitlines() if "warning" not in line]
    return status, lines, paths


def test_check_config_accepts_a_pair_that_agrees(write, capsys):
    out = io.StringIO()
    paths = (write(ROUTER + HA + REPLICATION + WITNESS, "primary.toml"),
             write(BACKUP_ROUTER + BACKUP_HA + BACKUP_REPLICATION + WITNESS, "backup.toml"))
    assert cli.main(["check-config", *map(str, paths)], out=out) == 0
    assert capsys.readouterr().err == ""
    assert [line for line in out.getvalue().splitlines() if line.startswith("# effective")] == [
        f"# effective configuration of {path}" for path in paths]


def test_check_config_reports_a_pair_whose_group_names_differ(write, capsys):
    status, lines, (primary, backup) = check_pair(
        write, capsys, ROUTER + HA + 'group-name = "pair-b"\n' + REPLICATION + WITNESS,
        BACKUP_ROUTER + BACKUP_HA + 'group-name = "pair-b2"\n' + BACKUP_REPLICATION + WITNESS)
    assert status == 1
    assert lines == [f"meshroute: {primary}, {backup}: ha.group-name: 'pair-b' in {primary}, "
                     f"'pair-b2' in {backup}: the instances would refuse each other "
                     "(group-mismatch)"]


def test_check_config_reports_peers_that_do_not_reach_each_other(write, capsys):
    status, lines, (primary, backup) = check_pair(
        write, capsys, ROUTER + HA + REPLICATION + WITNESS,
        BACKUP_ROUTER + BACKUP_HA + BACKUP_REPLICATION.replace("7102", "7103") + WITNESS)
    assert status == 1
    assert lines == [f"meshroute: {backup}, {primary}: ha.replication.peer: "
                     "'tcp:127.0.0.1:7103' does not reach the other instance's listener "
                     "'tcp:7102:interface=127.0.0.1'"]


def test_check_config_pairs_by_endpoints_and_reports_differing_router_names(
        write, capsys, tmp_path):
    other_secret = tmp_path / "other.secret"
    other_secret.write_text("another secret\n")
    status, lines, _ = check_pair(
        write, capsys, ROUTER + HA + REPLICATION + WITNESS,
        BACKUP_ROUTER.replace('"router-b"', '"router-bb"') + HA
        + BACKUP_REPLICATION.replace("{secret}", str(other_secret)) + WITNESS)
    assert status == 1
    assert [line.split(": ")[2] for line in lines] == [
        "router.name", "ha.group-name", "ha.role", "ha.replication.password-file"]
    assert "'router-b' in " in lines[0] and "'router-bb' in " in lines[0]
    assert "both are 'primary'" in lines[2]


def test_check_config_reports_witnesses_and_client_endpoints_that_differ(write, capsys):
    status, lines, _ = check_pair(
        write, capsys,
        ROUTER + CLIENTS + HA + 'client-endpoints = ["tcp:127.0.0.1:6002"]\n' + REPLICATION
        + WITNESS,
        BACKUP_ROUTER + CLIENTS + BACKUP_HA + 'lease-timeout = "4s"\n' + BACKUP_REPLICATION
        + WITNESS.replace("router-a", "router-c"))
    assert status == 1
    assert [line.split(": ")[2] for line in lines] == [
        "ha.witness", "ha.lease-timeout", "ha.client-endpoints"]


def test_check_config_reports_a_third_instance_of_a_router(write, capsys):
    paths = [write(ROUTER + HA + REPLICATION + WITNESS, f"{n}.toml") for n in range(3)]
    assert cli.main(["check-config", *map(str, paths)], out=io.StringIO()) == 1
    assert f"{', '.join(map(str, paths))}: router.name: 3 HA instances of router 'router-b'" \
        in capsys.readouterr().err


@pytest.mark.parametrize("client, server, reaches", [
    ("tcp:127.0.0.1:7102", "tcp:7102:interface=127.0.0.1", True),
    ("tcp:host=127.0.0.1:port=7102", "tcp:port=7102", True),
    ("tcp:10.0.0.2:7102", "tcp:7102:interface=10.0.0.1", False),
    ("tcp:b.example:7102", "tcp:7102:interface=10.0.0.1", True),  # names are not resolved
    ("tcp:127.0.0.1:7103", "tcp:7102", False),
    ("tcp6:\\:\\:1:7102", "tcp6:port=7102:interface=\\:\\:1", True),
    ("unix:/run/b.sock", "unix:/run/b.sock", True),
    ("unix:/run/b.sock", "tcp:7102", False),
])
def test_which_peer_endpoints_reach_a_listener(client, server, reaches):
    from meshroute.harules.settings import endpoint_reaches

    assert endpoint_reaches(client, server) is reaches
