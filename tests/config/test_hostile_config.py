"""
Hostile configuration files: a valid router configuration with keys
given arbitrary TOML values (wrong types, huge or negative numbers,
non-finite floats, NUL and control characters, dates, nested arrays and
tables), unknown keys, or whole sections replaced.  Loading one either
gives a configuration or raises L{ConfigError} naming the file and the
key (the section's, at least) — never another exception.
"""

import datetime
import json

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from twisted.internet.testing import MemoryReactor

from meshroute.config import load_config
from meshroute.errors import ConfigError
from meshroute.router.settings import RouterConfig

HOSTILE = settings(max_examples=300, deadline=None,
                   suppress_health_check=[HealthCheck.function_scoped_fixture])


def base(directory) -> dict:
    """
    A valid configuration using every section but [ha], as a document.
    """
    secret = directory / "secret"
    secret.write_text("s3cret\n")
    return {
        "router": {"name": "a", "data-dir": str(directory / "data")},
        "routing": {
            "max-hops": 16, "max-backlog": 1000, "max-transient-backlog": 100,
            "reroute-delay": "5s",
            "listener": {"endpoint": "tcp:0:interface=127.0.0.1", "password-file": str(secret),
                         "keepalive-interval": "1s", "stage-valid-timeout": "15s",
                         "reject-disconnect-delay": "5s", "allowed-routers": ["b"]},
            "connector": [{"router": "b", "endpoint": "tcp:127.0.0.1:7002",
                           "password-file": str(secret), "retry-interval": 100,
                           "retry-interval-multiplier": 2.0, "max-retry-interval": 1000,
                           "reconnect-attempts": -1, "stage-valid-timeout": "15s"}],
        },
        "store": {"sync": "normal"},
        "clients": {
            "listener": {"endpoint": "tcp:0:interface=127.0.0.1",
                         "connection-ttl-override": -1, "connection-ttl-check-interval": 2000,
                         "duplicate-id-window": "1h", "send-answer-hold": "2ms",
                         "max-frame-size": 65536,
                         "max-connections": 10, "max-sessions": 10, "max-subscriptions": 10,
                         "max-unacknowledged": 100, "max-headers": 8,
                         "max-header-size": 1024, "stage-valid-timeout": "2s"},
            "reconnect": {"keep-alive": "60s", "max-depth": 10,
                          "max-depth-policy": "drop-oldest", "recovery-buffer-size": 8},
        },
        "admin": {"endpoint": "tcp:0:interface=127.0.0.1"},
        "security": {"permission": [{"users": ["app-*"], "send": ["q@*"], "consume": ["q"],
                                     "publish": ["prices.*.gbp"], "subscribe": ["prices.#"]}]},
    }


def leaves(document: dict, path=()) -> list[tuple]:
    """
    The path of every key and table of C{document}, list items included.
    """
    found = []
    for key, value in document.items():
        here = (*path, key)
        found.append(here)
        if isinstance(value, dict):
            found.extend(leaves(value, here))
        elif isinstance(value, list) and value and isinstance(value[0], dict):
            for index, item in enumerate(value):
                found.extend(leaves(item, (*here, index)))
    return found


_text = st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=12)
_scalar = st.one_of(
    st.booleans(),
    st.integers(-2**63, 2**63 - 1),
    st.floats(allow_nan=True, allow_infinity=True),
    _text,
    st.sampled_from(["", "\x00", "-1", "1e9", "15s", "0ms", "9999999999h", "tcp:99999",
                     "ssl:0", "unix:/nonexistent/x", "drop-newest", "../../etc/passwd",
                     "a" * 300]),
    st.datetimes(min_value=datetime.datetime(1, 1, 1), max_value=datetime.datetime(9999, 1, 1)),
    st.dates(),
)
VALUE = st.recursive(
    _scalar,
    lambda inner: st.one_of(st.lists(inner, max_size=3),
                            st.dictionaries(_text, inner, max_size=3)),
    max_leaves=6,
)


def toml_value(value) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if value != value:
            return "nan"
        if value in (float("inf"), float("-inf")):
            return "inf" if value > 0 else "-inf"
        return repr(value)
    if isinstance(value, str):
        return json.dumps(value).replace("\x7f", "\\u007f")
    if isinstance(value, (datetime.datetime, datetime.date)):
        return value.isoformat()
    if isinstance(value, list):
        return "[" + ", ".join(toml_value(item) for item in value) + "]"
    return "{" + ", ".join(f"{json.dumps(k)} = {toml_value(v)}" for k, v in value.items()) + "}"


def toml_document(document: dict) -> str:
    """
    C{document} as TOML: scalars first, then one table per section, with
    nested tables inline.
    """
    lines = [f"{json.dumps(k)} = {toml_value(v)}" for k, v in document.items()
             if not isinstance(v, dict)]
    for name, section in document.items():
        if isinstance(section, dict):
            lines.append(f"[{json.dumps(name)}]")
            lines.extend(f"{json.dumps(k)} = {toml_value(v)}" for k, v in section.items())
    return "\n".join(lines) + "\n"


def put(document: dict, path: tuple, value) -> None:
    target = document
    for part in path[:-1]:
        target = target[part]
    target[path[-1]] = value


@HOSTILE
@given(st.data())
def test_arbitrary_values_are_config_errors_naming_file_and_key(tmp_path, data):
    document = base(tmp_path)
    targets = leaves(document)
    changed = data.draw(st.lists(st.sampled_from(targets), min_size=1, max_size=3, unique=True))
    # Parents before children, so that each change lands where it points.
    for path in sorted(changed, key=len):
        try:
            put(document, path, data.draw(VALUE))
        except (KeyError, IndexError, TypeError):
            pass  # a parent was replaced by a value: the child is gone
    if data.draw(st.booleans()):
        section = data.draw(st.sampled_from([(), ("routing",), ("clients", "listener")]))
        target = document
        for part in section:
            target = target.get(part) if isinstance(target, dict) else None
        if isinstance(target, dict):
            target[data.draw(_text.filter(bool))] = data.draw(VALUE)
    path = tmp_path / "router.toml"
    path.write_text(toml_document(document), encoding="utf-8")
    try:
        config = load_config(path, reactor=MemoryReactor())
    except ConfigError as e:
        assert e.path == str(path)
        assert str(path) in str(e)
        if e.key is not None:
            assert e.key and str(e).startswith(f"{path}: {e.key}: ")
        else:
            assert "TOML" in e.message, e.message
        return
    assert isinstance(config, RouterConfig)


@HOSTILE
@given(st.binary(max_size=300))
def test_arbitrary_bytes_are_config_errors_naming_the_file(tmp_path, data):
    path = tmp_path / "router.toml"
    path.write_bytes(data)
    try:
        load_config(path, reactor=MemoryReactor())
    except ConfigError as e:
        assert e.path == str(path)


#: Values that have broken loaders: NUL and control characters in paths and
#: endpoints, numbers at and past every bound, types where others are due.
NASTY = ["\x00", "a\x00b", "\n", "\x7f", " ", "~", "/", "..", "-1", "1e999", "9" * 40,
         "tcp:-1", "tcp:65536", "tcp:0:interface=\x00", "ssl:0:privateKey=/nonexistent",
         -1, 0, 2**63 - 1, -2**63, 1.5, float("inf"), float("nan"), True, [], {}, [[]],
         {"": {}}, datetime.date(1, 1, 1)]


def test_every_key_takes_every_nasty_value_as_a_value_or_a_config_error(tmp_path):
    targets = leaves(base(tmp_path))
    loaded = refused = 0
    for target in targets:
        for value in NASTY:
            document = base(tmp_path)
            put(document, target, value)
            path = tmp_path / "router.toml"
            path.write_text(toml_document(document), encoding="utf-8")
            try:
                load_config(path, reactor=MemoryReactor())
            except ConfigError as e:
                assert e.path == str(path) and e.key, (target, value, e)
                refused += 1
            else:
                loaded += 1
    assert refused > loaded > 0
