"""scripts/rxe-setup.sh: usage, and a clear refusal where the kernel has no soft-RoCE."""
import os
import shutil
import subprocess

import pytest

SCRIPT = os.path.join(os.path.dirname(__file__), os.pardir, "scripts", "rxe-setup.sh")


def _run(*args):
    return subprocess.run(["bash", SCRIPT, *args], capture_output=True, text=True, timeout=60)


def _links():
    if shutil.which("rdma") is None:
        return None
    return subprocess.run(["rdma", "link", "show"], capture_output=True, text=True).stdout


def test_help():
    r = _run("--help")
    assert r.returncode == 0
    assert r.stdout.startswith("Usage:") and "--remove" in r.stdout and "IFACE" in r.stdout


@pytest.mark.parametrize("args, msg", [(["--bogus"], "unknown option: --bogus"),
                                       (["eth0", "eth1"], "only one interface"),
                                       (["--name"], "--name needs a value"),
                                       (["--name", "bad name!"], "bad device name")])
def test_bad_usage_exits_2(args, msg):
    r = _run(*args)
    assert r.returncode == 2
    assert msg in r.stderr


def test_check_changes_nothing_and_explains():
    before = _links()
    r = _run("--check")
    assert _links() == before
    if os.path.isdir("/sys/module/rdma_rxe"):
        assert r.returncode == 0 and "rdma_rxe available" in r.stdout
    else:
        assert r.returncode in (0, 3), r.stderr
        if r.returncode == 3:
            assert "cannot create soft-RoCE devices" in r.stderr
            assert "shm and ofi:tcp transports work" in r.stderr


@pytest.mark.skipif(os.path.isdir("/sys/module/rdma_rxe") or os.geteuid() != 0,
                    reason="needs root on a kernel without rdma_rxe loaded")
def test_create_fails_gracefully_without_rdma_rxe():
    """Here (no RDMA in the kernel) creating a device must fail with exit 3 and create nothing."""
    check = _run("--check")
    if check.returncode == 0:
        pytest.skip("this kernel can load rdma_rxe; creating a device is left to the admin")
    before = _links()
    r = _run()
    assert r.returncode == 3, r.stderr
    assert "rdma_rxe" in r.stderr and "Traceback" not in r.stderr
    assert _links() == before


def test_remove_without_device_is_a_no_op():
    if shutil.which("rdma") is None:
        pytest.skip("no rdma command (iproute2)")
    if " rxe-test-none/" in (_links() or ""):
        pytest.skip("a device by that name exists")
    r = _run("--remove", "--name", "rxe-test-none")
    if os.geteuid() != 0:
        assert r.returncode == 5
    else:
        assert r.returncode == 0 and "nothing to remove" in r.stdout
