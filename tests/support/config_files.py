"""
Config files the config tests write and load: a password file
(C{secret_file}), a writer that fills C{{secret}} in (C{write}), the
loader on a memory reactor (L{load}), a refusal that must name the file
and the key (L{assert_refused}), and the section most files begin with
(L{ROUTER}).  An HA instance's sections are in L{ha_config_sections}.
"""

import pytest
from twisted.internet.testing import MemoryReactor

from meshroute.config import load_config
from meshroute.errors import ConfigError

SECRET = "s3cret-mesh-password"

ROUTER = """
[router]
name = "router-a"
data-dir = "var/router-a"
"""


@pytest.fixture
def secret_file(tmp_path):
    """
    A password file ending in a line end, as an editor would leave it.
    """
    path = tmp_path / "mesh.secret"
    path.write_text(SECRET + "\r\n")
    return path


@pytest.fixture
def write(tmp_path, secret_file):
    """
    Write a config file (C{{secret}} filled in) and return its path.
    """

    def write(text, name="router.toml"):
        path = tmp_path / name
        path.write_text(text.replace("{secret}", str(secret_file)))
        return path

    return write


def load(path):
    return load_config(str(path), reactor=MemoryReactor())


def assert_refused(path, key, *fragments):
    """
    Loading C{path} fails with an error naming the file, the key and any
    further C{fragments}.
    """
    with pytest.raises(ConfigError) as info:
        load(path)
    text = str(info.value)
    for expected in (str(path), key, *fragments):
        assert expected in text
    return info.value
