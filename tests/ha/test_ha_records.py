"""
Tests for L{meshroute.ha.records}: an HA instance's own records in
C{DATA-DIR/ha.db} (its voter records, who it is, a forced activation),
kept across reopening, and C{meshroute ha force-activate}, the one
explicit way around the start-up rule.
"""

import fcntl
import io
import sqlite3

import pytest
from twisted.internet.task import Clock

from meshroute import cli, events
from meshroute.errors import NotServing
from meshroute.ha.records import (
    HA_DB,
    ForcedActivation,
    HARecords,
    InstanceIdentity,
    InstanceVoterRecords,
    read_identity,
)
from meshroute.harules.quorum import LogPosition, VoterRecord
from meshroute.store import InlineExecutor
from meshroute.router.witness import Witness

IDENTITY = InstanceIdentity(router="router-b", group="router-b", role="primary")
RECORD = VoterRecord(7, "router-b/backup", LogPosition(6, 120), LogPosition(6, 118))


def opened(data_dir, identity=IDENTITY) -> HARecords:
    records = HARecords(str(data_dir / HA_DB), InlineExecutor())
    d = records.open(identity)
    assert d.called and d.result is None
    return records


def result(d):
    assert d.called
    return d.result


def test_voter_records_are_kept_across_reopening(tmp_path):
    records = opened(tmp_path)
    assert result(records.voter_records()) == {}
    result(records.save_voter_record("router-b", RECORD, 3000))
    result(records.close())
    again = opened(tmp_path)
    assert result(again.voter_records()) == {"router-b": (RECORD, 3000)}
    result(again.close())


def test_a_learned_record_is_kept_across_reopening(tmp_path):
    """
    That the voter learned its epoch from the winner's heartbeats, and
    never granted it, survives a restart of the instance.
    """
    learned = VoterRecord(8, "router-b/primary", LogPosition(7, 3), LogPosition(7, 3), True)
    records = opened(tmp_path)
    result(records.save_voter_record("router-b", learned, 3000))
    result(records.close())
    again = opened(tmp_path)
    assert result(again.voter_records()) == {"router-b": (learned, 3000)}
    result(again.close())


def test_the_table_is_the_stores(tmp_path):
    """
    The instance's own voter record has the columns of the store's
    C{ha_voter_records} (schema 004 and 009), so the two read alike.
    """
    result(opened(tmp_path).close())
    with sqlite3.connect(tmp_path / HA_DB) as db:
        columns = [row[1] for row in db.execute("PRAGMA table_info(ha_voter_records)")]
    assert columns == ["group_name", "granted_epoch", "granted_to", "granted_at_epoch",
                       "granted_at_position", "confirmed_epoch", "confirmed_position",
                       "lease_timeout_ms", "learned"]


def test_the_upgrade_from_version_1_reads_old_records_as_granted(tmp_path):
    records = opened(tmp_path)
    result(records.save_voter_record("router-b", RECORD, 3000))
    result(records.close())
    with sqlite3.connect(tmp_path / HA_DB) as db:
        db.execute("ALTER TABLE ha_voter_records DROP COLUMN learned")
        db.execute("PRAGMA user_version = 1")
    again = opened(tmp_path)
    assert result(again.voter_records()) == {"router-b": (RECORD, 3000)}
    result(again.close())
    with sqlite3.connect(tmp_path / HA_DB) as db:
        assert db.execute("PRAGMA user_version").fetchone() == (2,)


def test_a_witness_loads_from_it(tmp_path):
    records = opened(tmp_path)
    result(records.save_voter_record("router-b", RECORD, 3000))
    witness = Witness("router-b/primary", records, Clock(), None)
    result(witness.load())
    assert witness.records() == {"router-b": RECORD}


def test_an_instance_keeps_its_own_group_in_ha_db_and_other_groups_in_the_serving_store(
        tmp_path):
    """
    Its own record is the instance's alone; another group's is saved
    only while serving, to the store (here a second file of the same
    rows), and read from it only then.
    """
    (tmp_path / "own").mkdir()
    (tmp_path / "store").mkdir()
    own, store = opened(tmp_path / "own"), opened(tmp_path / "store")
    records = InstanceVoterRecords("router-b", own)
    other = VoterRecord(3, "router-x/primary", LogPosition(2, 9), LogPosition(2, 9))
    refused = []
    records.save_voter_record("router-x", other, 3000).addErrback(refused.append)
    assert refused[0].check(NotServing)  # a follower answers no other group
    result(records.save_voter_record("router-b", RECORD, 3000))
    records.serve(store)
    result(records.save_voter_record("router-x", other, 3000))
    assert result(own.voter_records()) == {"router-b": (RECORD, 3000)}
    assert result(store.voter_records()) == {"router-x": (other, 3000)}
    assert result(records.voter_records()) == {"router-b": (RECORD, 3000),
                                               "router-x": (other, 3000)}
    records.stop_serving()
    assert result(records.voter_records()) == {"router-b": (RECORD, 3000)}


def test_a_witness_loaded_again_keeps_the_voters_it_holds_and_retain_forgets_the_others(
        tmp_path):
    records = opened(tmp_path)
    result(records.save_voter_record("router-b", RECORD, 3000))
    witness = Witness("router-b/primary", records, Clock(), None)
    result(witness.load())
    newer = VoterRecord(9, "router-b/backup", LogPosition(8, 1), LogPosition(8, 1))
    result(records.save_voter_record("router-b", newer, 3000))
    result(records.save_voter_record("router-x", newer, 3000))
    result(witness.load())
    assert witness.records() == {"router-b": RECORD, "router-x": newer}
    witness.retain("router-b")
    assert witness.records() == {"router-b": RECORD}


def test_the_identity_is_written_at_each_open(tmp_path):
    assert read_identity(str(tmp_path)) is None
    result(opened(tmp_path).close())
    assert read_identity(str(tmp_path)) == IDENTITY
    backup = InstanceIdentity("router-b", "router-b", "backup")
    result(opened(tmp_path, backup).close())
    assert read_identity(str(tmp_path)) == backup


def test_no_forced_activation_by_default(tmp_path):
    assert result(opened(tmp_path).forced_activation()) is None


# -- meshroute ha force-activate ----------------------------------------------


@pytest.fixture
def force(capsys):
    """
    Run C{meshroute ha force-activate ARGV}: (exit status, stdout, stderr).
    """

    def force(*argv):
        out = io.StringIO()
        code = cli.main(["ha", "force-activate", *argv], out=out)
        return code, out.getvalue(), capsys.readouterr().err

    return force


@pytest.fixture
def data_dir(tmp_path):
    """
    The data dir of an instance that has run (and stopped).
    """
    result(opened(tmp_path).close())
    return tmp_path


def test_force_activate_records_the_marker_and_logs_it(data_dir, force):
    code, out, err = force("--data-dir", str(data_dir), "--accept-data-loss")
    assert (code, err) == (0, "")
    assert "router-b/primary" in out and "next start" in out
    records = opened(data_dir)
    marker = result(records.forced_activation())
    assert isinstance(marker, ForcedActivation) and "@" in marker.requested_by
    [record] = events.read_events(str(data_dir))
    assert record["router"] == "router-b"
    assert {k: record[k] for k in ("event", "group", "role", "step", "epoch")} == {
        "event": "ha.force-activate", "group": "router-b", "role": "primary",
        "step": "recorded", "epoch": None}
    assert record["requested_by"] == marker.requested_by
    assert record["time"] == pytest.approx(marker.requested_at)
    # The instance carries it out once, then clears it.
    result(records.clear_forced_activation())
    assert result(records.forced_activation()) is None


def test_force_activate_refuses_without_accept_data_loss(data_dir, force):
    code, out, err = force("--data-dir", str(data_dir))
    assert code == 2
    assert "refused without --accept-data-loss" in err and "lost for good" in err
    assert result(opened(data_dir).forced_activation()) is None


def test_force_activate_needs_a_data_dir(force):
    code, _, err = force("--accept-data-loss")
    assert code == 2 and "--data-dir" in err


def test_force_activate_refuses_a_data_dir_of_no_ha_instance(tmp_path, force):
    code, _, err = force("--data-dir", str(tmp_path), "--accept-data-loss")
    assert code == 1
    assert "no HA instance" in err and str(tmp_path) in err
    assert not (tmp_path / HA_DB).exists()


def test_force_activate_refuses_a_missing_data_dir(tmp_path, force):
    code, _, err = force("--data-dir", str(tmp_path / "nothing"), "--accept-data-loss")
    assert code == 1 and "not a directory" in err


def test_force_activate_refuses_while_a_router_runs_on_the_data_dir(data_dir, force):
    with open(data_dir / "router.lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        code, _, err = force("--data-dir", str(data_dir), "--accept-data-loss")
    assert code == 1 and "in use by a running router" in err
    assert result(opened(data_dir).forced_activation()) is None
    assert events.event_files(str(data_dir)) == []
