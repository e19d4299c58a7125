"""
A small file system of a test's own, to fill: a tmpfs mounted under the
test's temporary directory (it needs the right to mount; the test is
skipped without it), and a way to fill it to the last byte.
"""

import contextlib
import os
import subprocess

import pytest


@contextlib.contextmanager
def small_disk(path, size: str, *options: str):
    """
    A tmpfs of C{size} (as mount's C{size=}: C{"1m"}) mounted at C{path}
    (made if need be) for the block's length, with mount's C{options}.
    """
    os.makedirs(path, exist_ok=True)
    try:
        mounted = subprocess.run(
            ["mount", "-t", "tmpfs", "-o", ",".join([f"size={size}", *options]), "tmpfs",
             str(path)], capture_output=True, text=True)
    except FileNotFoundError:
        pytest.skip("cannot mount a tmpfs here: no mount command")
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.strip() or mounted.returncode}")
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], capture_output=True)


def fill(directory) -> str:
    """
    Fill the file system of C{directory} with a file until a write fails
    for want of space; the file's path (remove it to free the space).
    """
    filler = os.path.join(directory, "filler")
    chunk = b"\0" * 65536
    with open(filler, "wb", buffering=0) as f:
        while True:
            try:
                written = f.write(chunk)
            except OSError:
                break
            if written < len(chunk):
                chunk = chunk[:1]
    return filler
