"""
Tests for L{meshroute.ha.reporting}: the C{ha.*} events an HA instance
writes, with the fields docs/events.md promises (the audit reads them).
"""

import pytest
from twisted.internet.task import Clock

from meshroute import events
from meshroute.ha.reporting import HAEventLog
from meshroute.harules.role import ACTIVE_ALONE, FENCED, LEASE_LOST


@pytest.fixture
def clock():
    clock = Clock()
    clock.advance(1_795_306_854.5)
    return clock


@pytest.fixture
def log(tmp_path, clock):
    event_log = events.EventLog(str(tmp_path), "router-b", clock)
    yield HAEventLog(event_log, clock, group="router-b", role="backup"), event_log
    event_log.close()


def written(event_log):
    event_log.flush()
    return [{k: v for k, v in record.items() if k not in ("time", "router")}
            for record in events.read_events(event_log.data_dir)]


def test_state_epoch_and_fenced(log):
    ha, event_log = log
    ha.state(ACTIVE_ALONE, epoch=4)
    ha.epoch(4, alone=True)
    ha.epoch(5, alone=False)
    ha.fenced(5, LEASE_LOST)
    ha.state(FENCED, epoch=5, reason=LEASE_LOST)
    common = {"group": "router-b", "role": "backup"}
    assert written(event_log) == [
        {"event": "ha.state", **common, "state": "active-alone", "epoch": 4, "reason": None},
        {"event": "ha.epoch", **common, "epoch": 4, "mode": "alone"},
        {"event": "ha.epoch", **common, "epoch": 5, "mode": "replicated"},
        {"event": "ha.fenced", **common, "epoch": 5, "reason": "lease-lost"},
        {"event": "ha.state", **common, "state": "fenced", "epoch": 5, "reason": "lease-lost"},
    ]


def test_failover_duration_runs_from_the_last_heartbeat_heard_to_serving(log, clock):
    ha, event_log = log
    last_heard = clock.seconds()
    clock.advance(3.7505)
    ha.failover(from_instance="primary", to_instance="backup", epoch=6, kind="takeover",
                last_heard=last_heard)
    [record] = written(event_log)
    assert record == {"event": "ha.failover", "group": "router-b", "role": "backup",
                      "from": "primary", "to": "backup", "epoch": 6, "kind": "takeover",
                      "duration_ms": 3750.5}


def test_a_failover_kind_is_a_takeover_or_a_handover(log):
    ha, _ = log
    with pytest.raises(ValueError):
        ha.failover(from_instance="primary", to_instance="backup", epoch=6, kind="magic",
                    last_heard=0.0)


def test_replication_and_force_activate(log):
    ha, event_log = log
    ha.replication("connected", position=10, lag=90)
    ha.replication("in-sync", position=100, lag=0)
    ha.replication("lost", position=120, lag=None)
    ha.force_activate("activated", requested_by="ops@host-1", epoch=9)
    common = {"group": "router-b", "role": "backup"}
    assert written(event_log) == [
        {"event": "ha.replication", **common, "status": "connected", "position": 10, "lag": 90},
        {"event": "ha.replication", **common, "status": "in-sync", "position": 100, "lag": 0},
        {"event": "ha.replication", **common, "status": "lost", "position": 120, "lag": None},
        {"event": "ha.force-activate", **common, "step": "activated",
         "requested_by": "ops@host-1", "epoch": 9},
    ]
