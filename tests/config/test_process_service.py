"""
Tests for L{meshroute.process}: one process runs its configuration's
router and the HA instances the file hosts, each built from its own
configuration by L{instance_service}; SIGHUP reaches every one, and an
instance that ends by itself ends alone (the reactor stops with the
last).  The twistd plugin's SIGHUP is L{meshroute.tap}'s, once per
process.
"""

import os
import signal

import pytest
from twisted.application.service import Service
from twisted.internet import reactor
from twisted.internet.testing import MemoryReactorClock

from meshroute import tap
from meshroute.ha.instance import HAInstance
from meshroute.ha.shared_store import SharedStoreInstance
from meshroute.process import ProcessService, instance_service
from meshroute.router.service import RouterService, StringEndpoints

from support.config_files import load, secret_file  # noqa: F401 (a fixture)


class FakeInstance(Service):
    """
    A built instance: records its configuration and its reloads; it may
    end by itself (C{end()}, the stop it was given).
    """

    def __init__(self, config, stop_instance, reloaded: bool = False) -> None:
        self.config = config
        self.end = stop_instance
        self.reloads = 0
        self._reloaded = reloaded

    def reload_security(self) -> bool:
        self.reloads += 1
        return self._reloaded


class StoppingReactor(MemoryReactorClock):
    def __init__(self) -> None:
        super().__init__()
        self.stops = 0

    def stop(self) -> None:
        self.stops += 1


@pytest.fixture
def configs(tmp_path, secret_file):
    """
    a.toml, a router without HA hosting router-b's and router-c's backups
    (router-c's of a shared-store pair).
    """

    def instance(name: str, port: int) -> str:
        return (f'[router]\nname = "{name}"\ndata-dir = "{tmp_path / name}"\n'
                f'[ha]\nrole = "backup"\n[ha.replication]\n'
                f'listener = "tcp:{port}:interface=127.0.0.1"\npeer = "tcp:127.0.0.1:{port + 1}"\n'
                f'password-file = "{secret_file}"\n')

    (tmp_path / "b.toml").write_text(instance("router-b", 7200))
    (tmp_path / "c.toml").write_text(f'[router]\nname = "router-c"\n'
                                     f'data-dir = "{tmp_path / "router-c"}"\n'
                                     '[ha]\nrole = "backup"\npolicy = "shared-store"\n')
    path = tmp_path / "a.toml"
    path.write_text(f'[router]\nname = "router-a"\ndata-dir = "{tmp_path / "router-a"}"\n'
                    '[[ha.colocated]]\nconfig = "b.toml"\n[[ha.colocated]]\nconfig = "c.toml"\n')
    return load(path)


def fakes(reloaded=()):
    built = []

    def build(config, reactor, endpoints, stop_instance):
        built.append(FakeInstance(config, stop_instance, config.name in reloaded))
        return built[-1]

    return build, built


def test_each_configuration_is_built_once_the_file_s_own_first(configs):
    build, built = fakes()
    process = ProcessService(configs, StoppingReactor(), build=build)
    assert [instance.config.name for instance in built] == ["router-a", "router-b", "router-c"]
    assert list(process) == built


def test_a_reload_reaches_every_instance(configs):
    build, built = fakes(reloaded={"router-c"})
    process = ProcessService(configs, StoppingReactor(), build=build)
    assert process.reload_security() is True
    assert [instance.reloads for instance in built] == [1, 1, 1]
    build, built = fakes()
    assert ProcessService(configs, StoppingReactor(), build=build).reload_security() is False


def test_an_instance_that_ends_by_itself_ends_alone_and_the_last_stops_the_reactor(configs):
    build, built = fakes()
    clock = StoppingReactor()
    process = ProcessService(configs, clock, build=build)
    process.startService()
    a, b, c = built
    b.end()
    assert list(process) == [a, c] and not b.running and (a.running, c.running) == (True, True)
    b.end()  # gone already: nothing more
    a.end()
    assert list(process) == [c] and clock.stops == 0
    c.end()
    assert list(process) == [] and clock.stops == 1


def test_nothing_ends_alone_while_the_process_stops(configs):
    build, built = fakes()
    clock = StoppingReactor()
    process = ProcessService(configs, clock, build=build)
    process.startService()
    process.stopService()
    built[1].end()
    assert len(list(process)) == 3 and clock.stops == 0


def test_the_instance_service_of_a_configuration_is_its_router_or_its_ha_instance(configs):
    """
    The one place that chooses: a router for a file without C{[ha]}, an
    HA instance for one with it, of the policy its C{[ha]} names (built,
    not started).
    """
    endpoints = StringEndpoints(reactor)
    services = [instance_service(config, reactor, endpoints, lambda: None)
                for config in (configs, *configs.colocated)]
    router, replicated, shared = services
    try:
        assert type(router) is RouterService and router.config == configs
        assert type(replicated) is HAInstance and replicated.instance == "router-b/backup"
        assert type(shared) is SharedStoreInstance and shared.instance == "router-c/backup"
        assert [service.reload_security() for service in services] == [False] * 3
    finally:
        router._unlock_data_dir()
        replicated._unlock()
        shared.lock.close()
        for service in services:
            service.events.close()


def test_sighup_reloads_every_instance_of_the_process(configs):
    build, built = fakes()
    clock = StoppingReactor()
    clock.callFromThread = lambda f, *args: f(*args)
    under_twistd = tap._UnderTwistd(ProcessService(configs, clock, build=build), clock)
    previous = signal.getsignal(signal.SIGHUP)
    under_twistd.startService()
    try:
        os.kill(os.getpid(), signal.SIGHUP)
        assert [instance.reloads for instance in built] == [1, 1, 1]
    finally:
        under_twistd.stopService()
    assert signal.getsignal(signal.SIGHUP) is previous
