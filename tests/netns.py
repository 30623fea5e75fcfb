"""Test hosts on one machine: network namespaces joined by veth pairs.

`hosts(n)` makes n namespaces, each with one address in 10.199.<k>.0/24 on a
veth pair to a bridge in a hub namespace, yields their (name, address) list,
and removes everything afterwards. Traffic stays between these namespaces.
`unavailable()` says why namespaces cannot be made here, or None.
"""
from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import subprocess
from typing import Iterator, List, Optional, Tuple


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run(["ip", *args], check=check, capture_output=True, text=True)


def unavailable() -> Optional[str]:
    if shutil.which("ip") is None:
        return "iproute2's `ip` is not installed"
    if os.geteuid() != 0:
        return "creating network namespaces needs root"
    name = "slashprobe" + secrets.token_hex(3)
    r = _ip("netns", "add", name, check=False)
    if r.returncode != 0:
        return f"cannot create a network namespace: {r.stderr.strip()}"
    _ip("netns", "del", name, check=False)
    return None


@contextlib.contextmanager
def hosts(n: int) -> Iterator[List[Tuple[str, str]]]:
    tag = secrets.token_hex(2)
    hub = f"slhub{tag}"
    made: List[str] = []
    try:
        _ip("netns", "add", hub)
        made.append(hub)
        _ip("-n", hub, "link", "add", "br0", "type", "bridge")
        _ip("-n", hub, "link", "set", "br0", "up")
        _ip("-n", hub, "link", "set", "lo", "up")
        out = []
        for i in range(n):
            ns = f"slh{tag}{i}"
            _ip("netns", "add", ns)
            made.append(ns)
            a, b = f"sv{tag}{i}a", f"sv{tag}{i}b"
            _ip("link", "add", a, "type", "veth", "peer", "name", b)
            _ip("link", "set", a, "netns", ns)
            _ip("link", "set", b, "netns", hub)
            addr = f"10.199.{int(tag, 16) % 250}.{i + 1}"
            _ip("-n", ns, "addr", "add", f"{addr}/24", "dev", a)
            _ip("-n", ns, "link", "set", a, "up")
            _ip("-n", ns, "link", "set", "lo", "up")
            _ip("-n", hub, "link", "set", b, "master", "br0")
            _ip("-n", hub, "link", "set", b, "up")
            out.append((ns, addr))
        yield out
    finally:
        for ns in reversed(made):
            _ip("netns", "del", ns, check=False)


def run_in(ns: str, argv: List[str], **kw) -> subprocess.Popen:
    """Starts argv inside namespace ns."""
    return subprocess.Popen(["ip", "netns", "exec", ns, *argv], **kw)


def needs_ofi_and_namespaces() -> list:
    """pytest marks: skip (with the reason) without namespaces or libfabric."""
    import pytest

    import slash

    reason = unavailable()
    return [
        pytest.mark.netns,
        pytest.mark.skipif(reason is not None, reason=f"network namespaces unavailable: {reason}"),
        pytest.mark.skipif(not slash.have_ofi(), reason="this build has no libfabric (ofi)"),
    ]
