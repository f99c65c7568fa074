"""pytest fixtures: the RsDLPack Python bridge loaded through ctypes (rsdlpack_ctypes.py)."""

import ctypes
import os

import pytest

from rsdlpack_ctypes import Bridge


def library_path():
    path = os.environ.get("RSDLPACK_PYTHON_LIB")
    if not path or not os.path.exists(path):
        pytest.fail("RSDLPACK_PYTHON_LIB must name the built bridge (scripts/test.sh sets it)")
    return path


@pytest.fixture(scope="session")
def bridge():
    """Loaded as Julia does: a plain shared library, GIL released around each call."""
    return Bridge(library_path(), ctypes.CDLL)


@pytest.fixture(scope="session")
def bridge_with_gil():
    """Loaded with ctypes.PyDLL: the GIL stays held across each call."""
    return Bridge(library_path(), ctypes.PyDLL)
