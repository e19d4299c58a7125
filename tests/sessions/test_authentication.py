"""
Who a client connection's client is (meshroute.sessions.authentication):
its user fixed once authenticated, the permission checks made for it, and
whether a reloaded policy still has it.  The protocols' login steps are
tested end to end in test_client_auth.py.
"""

from twisted.internet.testing import StringTransport

from meshroute.sessions.authentication import ClientAuthentication
from meshroute.wire import client_frames as f


class Events:
    def __init__(self):
        self.emitted = []

    def emit(self, event, **fields):
        self.emitted.append((event, fields))


class Policy:
    def __init__(self, users=(), named=()):
        self.users, self.named = set(users), set(named)

    def credentials(self, user):
        return object() if user in self.users else None

    def names(self, user):
        return user in self.named


def authentication(events=None):
    return ClientAuthentication(StringTransport(), events or Events(), security=object(),
                                secret=b"s", verifies_certificates=False, log_name="client")


def test_no_user_means_no_permission_checks_and_nothing_to_remove():
    auth = authentication()
    assert auth.guard("r1") is None
    assert auth.still_allowed(Policy()) is True
    assert auth.certificate_user() is None


def test_an_authenticated_user_is_recorded_and_guarded_on_this_router():
    events = Events()
    auth = authentication(events)
    auth.authenticated("alice", "PLAIN")
    assert (auth.user, auth.mechanism) == ("alice", "PLAIN")
    assert [(event, fields["user"]) for event, fields in events.emitted] == [
        ("security.authenticated", "alice")]
    guard = auth.guard("r1")
    assert (guard.user, guard.router, guard.events) == ("alice", "r1", events)


def test_a_password_user_stays_while_the_users_file_has_it():
    auth = authentication()
    auth.authenticated("alice", "PLAIN")
    assert auth.still_allowed(Policy(users={"alice"}))
    assert not auth.still_allowed(Policy(named={"alice"}))


def test_a_certificate_user_stays_while_a_permission_names_it():
    auth = authentication()
    auth.authenticated("cn-bob", f.EXTERNAL)
    assert auth.still_allowed(Policy(named={"cn-bob"}))
    assert not auth.still_allowed(Policy(users={"cn-bob"}))
