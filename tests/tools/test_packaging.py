"""
What an operator gets from C{pip install .}: the C{twistd meshroute} plugin
and the C{meshroute} command, found from any directory without PYTHONPATH.

These run the scripts installed beside the interpreter running the tests
(C{make test} installs the project into .venv without C{-e}, so this is the
installed package, not the checkout).
"""

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import twisted

BIN = Path(sys.executable).parent
REPO = Path(__file__).resolve().parents[2]


def _installed_for_real() -> bool:
    """
    Whether meshroute's plugin is installed beside Twisted, where twistd
    looks without PYTHONPATH.  An editable install does not put it there,
    so outside C{make test} (which sets C{MESHROUTE_TEST_INSTALLED=1} after
    a plain install, making these tests mandatory) they are skipped then.
    """
    if os.environ.get("MESHROUTE_TEST_INSTALLED") == "1":
        return True
    return (Path(twisted.__file__).parent / "plugins" / "meshroute_plugin.py").exists()


pytestmark = pytest.mark.skipif(
    not _installed_for_real(), reason="meshroute's plugin is not installed beside Twisted"
)


def run_installed(tool: str, *args: str, cwd: Path) -> subprocess.CompletedProcess:
    path = BIN / tool
    if not path.exists():
        pytest.skip(f"{tool} is not installed beside {sys.executable}")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    return subprocess.run([str(path), *args], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=60)


def test_twistd_finds_the_meshroute_plugin(tmp_path):
    result = run_installed("twistd", "meshroute", "--help", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert "--config" in result.stdout


def test_twistd_lists_meshroute(tmp_path):
    result = run_installed("twistd", "--help", cwd=tmp_path)
    assert "meshroute" in result.stdout


def test_meshroute_command_checks_the_sample_config(tmp_path):
    shutil.copytree(REPO / "etc", tmp_path / "etc")
    result = run_installed("meshroute", "check-config", "etc/router.toml", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert 'name = "router-a"' in result.stdout
    assert "reject-disconnect-delay = 5000" in result.stdout
    assert "lab-mesh-shared-secret" not in result.stdout


def test_twistd_refuses_a_bad_config_naming_file_and_key(tmp_path):
    config = tmp_path / "bad.toml"
    config.write_text('[router]\nname = "r"\ndata-dir = "var"\nbogus = 1\n')
    result = run_installed("twistd", "-n", "--pidfile=", "meshroute", "--config", str(config),
                           cwd=tmp_path)
    assert result.returncode != 0
    output = result.stdout + result.stderr
    assert str(config) in output
    assert "router.bogus" in output
    assert not (tmp_path / "var").exists()


def test_the_topology_page_is_installed_with_the_package(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    result = subprocess.run(
        [sys.executable, "-c",
         "from importlib.resources import files\n"
         "from meshroute.admin.page import ASSETS\n"
         "static = files('meshroute.admin') / 'static'\n"
         "print(sorted(n for n in ['index.html', *ASSETS] if (static / n).is_file()))"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60)
    assert result.stdout.split() == ["['index.html',", "'topology.css',", "'topology.js']"], (
        result.stderr)
