"""
Shared fixtures, for every test folder (tests/X/ holds the tests of
meshroute/X/; the helpers they share are the package tests/support).

Every test runs under L{observe_errors}: an error or a failure logged
through twisted.logger fails the test, unless the test takes the errors it
expects out of C{observe_errors.errors}.
"""

import pytest
from hypothesis import settings
from twisted.logger import LogLevel, globalLogPublisher

# Hypothesis's deadline (200 ms an example) fails a property test whose
# example met a busy machine, which says nothing of the property: none
# for every test (a test that times something says so itself).
settings.register_profile("meshroute", deadline=None)
settings.load_profile("meshroute")


#: The test files that take longest, slowest first (C{--durations} of a
#: whole run), by file name without its folder: they are collected first.
SLOWEST_FILES = (
    "test_audit_follow", "test_audit_cluster", "test_audit_topics",
    "test_ha_restarts_processes", "test_audit", "test_simulation", "test_lab_processes",
    "test_event_rotation_processes", "test_ha_faults_processes", "test_shared_store_processes",
    "test_messaging_processes", "test_sessions_processes", "test_ha_processes",
    "test_mqtt_processes", "test_stomp_processes", "test_topics_processes",
    "test_ha_catchup_processes", "test_queues", "test_audit_report_browser",
    "test_expiry_processes", "test_audit_ha",
)


def pytest_collection_modifyitems(items):
    """
    The slowest files first, the others in their order.  C{make test} runs
    two pytest-xdist workers that take whole files in collection order
    (C{--dist loadfile --no-loadscope-reorder}; a file's module-scoped
    fixtures are set up once, and some of its tests read what others
    left): a worker that takes a long file late would leave the other
    idle while it ends.
    """
    rank = {name: index for index, name in enumerate(SLOWEST_FILES)}
    items.sort(key=lambda item: rank.get(item.path.stem, len(rank)))


class ErrorObserver:
    """
    Collects logged errors and failures.
    """

    def __init__(self) -> None:
        self.errors: list[dict] = []

    def __call__(self, event: dict) -> None:
        if event.get("log_failure") is not None or event.get("log_level") in (
            LogLevel.error,
            LogLevel.critical,
        ):
            self.errors.append(event)

    def take(self, predicate) -> list[dict]:
        """
        Remove and return the logged errors matching C{predicate(event)}.
        """
        taken = [e for e in self.errors if predicate(e)]
        self.errors = [e for e in self.errors if not predicate(e)]
        return taken


@pytest.fixture(autouse=True)
def observe_errors():
    observer = ErrorObserver()
    globalLogPublisher.addObserver(observer)
    try:
        yield observer
    finally:
        globalLogPublisher.removeObserver(observer)
    if observer.errors:
        from twisted.logger import formatEvent

        messages = [
            formatEvent(e) + (f"\n{e['log_failure'].getTraceback()}" if e.get("log_failure") else "")
            for e in observer.errors
        ]
        pytest.fail("errors were logged:\n" + "\n".join(messages), pytrace=False)


@pytest.fixture
def clock():
    """
    A virtual clock: every timer of a test without sockets runs on it.
    """
    from twisted.internet.task import Clock

    return Clock()


@pytest.fixture
def engine(tmp_path, clock):
    """
    The engine a router-side client test runs against: a real store under
    L{support.fake_router.FakeEngine}, whose commits the test lets land.
    """
    from support.fake_router import FakeEngine

    engine = FakeEngine(str(tmp_path / "store.sqlite"), clock)
    yield engine
    engine.close()


@pytest.fixture
def browser():
    """
    A headless Chromium (L{support.browser.Browser}); the test is skipped where
    none is installed.
    """
    from support.browser import Browser, chromium_path

    if chromium_path() is None:
        pytest.skip("no chromium on the PATH (Debian: apt-get install chromium; "
                    "`make test` installs it where it can)")
    with Browser() as chromium:
        yield chromium


@pytest.fixture
def artifacts():
    """
    The directory a test saves screenshots and other artifacts in
    (L{support.browser.artifacts_directory}: var/test-artifacts by default).
    """
    from support.browser import artifacts_directory

    return artifacts_directory()
