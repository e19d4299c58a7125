"""
Reading C{[ha] policy = "shared-store"} (docs/ha.md, "Shared store"): no
C{[ha.replication]}, no witnesses, and C{meshroute check-config} of the
two files checks that they share one data dir.
"""

import io

import pytest

from meshroute import cli
from meshroute.config_writer import format_config
from meshroute.harules.settings import REPLICATION, SHARED_STORE

from support.config_files import load, secret_file, write  # noqa: F401 (fixtures)
from support.config_files import assert_refused
from support.ha_config_sections import REPLICATION as REPLICATION_SECTION
from support.ha_config_sections import ROUTER

SHARED = """
[ha]
role = "primary"
policy = "shared-store"
"""


def test_a_shared_store_instance_needs_no_replication_section(write):
    ha = load(write(ROUTER + SHARED + 'lock-poll-interval = "250ms"\n')).ha
    assert (ha.policy, ha.replication, ha.witnesses) == (SHARED_STORE, None, ())
    assert ha.lock_poll_interval_ms == 250


def test_the_policy_is_replication_by_default(write):
    assert load(write(ROUTER + "[ha]\nrole = 'primary'\n" + REPLICATION_SECTION)).ha.policy \
        == REPLICATION


@pytest.mark.parametrize("text,key,fragment", [
    (SHARED.replace("shared-store", "shared-disk"), "ha.policy", "shared-disk"),
    (SHARED + REPLICATION_SECTION, "ha.replication", "replicates nothing"),
    (SHARED + '[[ha.witness]]\nrouter = "router-a"\nendpoint = "tcp:127.0.0.1:7001"\n',
     "ha.witness", "takes no votes"),
    ("[ha]\nrole = 'primary'\n", "ha.replication", "required section [ha.replication]"),
    (SHARED + 'lock-poll-interval = "0ms"\n', "ha.lock-poll-interval", ""),
])
def test_refusals_name_the_key(write, text, key, fragment):
    assert assert_refused(write(ROUTER + text), key, fragment).key == key


def test_format_config_round_trips(write):
    path = write(ROUTER + SHARED)
    config = load(path)
    again = write(format_config(config), "again.toml")
    assert load(again).ha == config.ha


def check(write, capsys, primary: str, backup: str) -> tuple[int, list[str], tuple]:
    paths = (write(primary, "primary.toml"), write(backup, "backup.toml"))
    status = cli.main(["check-config", *map(str, paths)], out=io.StringIO())
    return status, capsys.readouterr().err.splitlines(), paths


def test_check_config_accepts_a_pair_on_one_data_dir(write, capsys):
    status, lines, _ = check(write, capsys, ROUTER + SHARED,
                             ROUTER + SHARED.replace("primary", "backup"))
    assert (status, lines) == (0, [])


def test_check_config_reports_a_pair_on_two_data_dirs(write, capsys):
    status, lines, (primary, backup) = check(
        write, capsys, ROUTER + SHARED,
        ROUTER.replace("b-primary", "b-backup") + SHARED.replace("primary", "backup"))
    assert status == 1
    assert len(lines) == 1 and lines[0].startswith(f"meshroute: {primary}, {backup}: "
                                                   "router.data-dir: ")
    assert "share one data-dir" in lines[0]


def test_check_config_reports_two_names_on_one_shared_data_dir(write, capsys):
    status, lines, _ = check(write, capsys, ROUTER + SHARED,
                             ROUTER.replace('"router-b"', '"router-c"')
                             + SHARED.replace("primary", "backup"))
    assert status == 1
    assert [line.split(": ")[2] for line in lines] == ["router.name", "ha.group-name"]


def test_check_config_reports_mixed_policies(write, capsys):
    status, lines, _ = check(write, capsys, ROUTER + SHARED,
                             ROUTER.replace("b-primary", "b-backup")
                             + "[ha]\nrole = 'backup'\n" + REPLICATION_SECTION)
    assert status == 1
    assert "ha.policy" in [line.split(": ")[2] for line in lines]
