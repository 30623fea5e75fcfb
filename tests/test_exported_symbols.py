"""The extension exports only its module init and the public C API: the slash_*
functions declared in src/slashcore/include/slash/*.h. Internal symbols of the
core (ssb_*, join_*, exec_*, the transports' own slash_* helpers) stay local,
so they cannot clash with another library loaded into the same process."""
from __future__ import annotations

import glob
import os
import re
import shutil
import subprocess

import pytest

from slash import _core

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def public_api() -> set:
    names = set()
    for h in glob.glob(os.path.join(ROOT, "src/slashcore/include/slash/*.h")):
        with open(h) as f:
            names |= set(re.findall(r"\b(slash_\w+)\s*\(", f.read()))
    return names


def exported() -> list:
    out = subprocess.run(["nm", "-D", "--defined-only", _core.__file__], check=True,
                         capture_output=True, text=True).stdout
    return [line.split()[-1] for line in out.splitlines() if line.strip()]


pytestmark = pytest.mark.skipif(shutil.which("nm") is None, reason="needs nm (binutils)")


def test_no_internal_symbols_are_exported():
    syms = exported()
    internal = [s for s in syms if re.match(r"(ssb|join|exec|hidx|lss)_", s)]
    assert internal == []


def test_only_module_init_and_public_api_are_exported():
    syms = set(exported())
    assert "PyInit__core" in syms
    assert syms - {"PyInit__core"} - public_api() == set()
    assert "slash_channel_poll" in syms  # the public API stays reachable
