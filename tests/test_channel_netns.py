"""Across hosts: producer and consumer in two network namespaces joined by a
veth pair (through a bridge), over ofi:tcp. Skipped with the reason where
namespaces cannot be created or libfabric is missing."""
import os
import secrets
import subprocess
import sys

import pytest

import slash

import netns

HERE = os.path.dirname(os.path.abspath(__file__))
pytestmark = netns.needs_ofi_and_namespaces()


def test_channel_between_two_namespaces_over_ofi_tcp():
    token = secrets.token_hex(8)
    n = 20000
    peer = [sys.executable, os.path.join(HERE, "netns_peer.py")]
    with netns.hosts(2) as ((ns_a, addr_a), (ns_b, _)):
        cons = netns.run_in(ns_a, peer + ["consume", "ofi:tcp", f"{addr_a}:0", token, str(n)],
                            stdout=subprocess.PIPE, text=True)
        try:
            address = cons.stdout.readline().strip()
            assert address.startswith(addr_a + ":"), address
            prod = netns.run_in(ns_b, peer + ["produce", "ofi:tcp", address, token, str(n)])
            assert prod.wait(timeout=120) == 0
            assert cons.stdout.readline().strip() == f"ok {n}"
            assert cons.wait(timeout=60) == 0
        finally:
            cons.kill()
