"""Whether this machine has an RDMA device the ofi:verbs transport can use
(a NIC, or soft-RoCE: scripts/rxe-setup.sh, or the guest of
scripts/rxe-guest.sh, where scripts/verbs-tests.sh runs these tests)."""
import os

import pytest

import slash

SYSFS_IB = "/sys/class/infiniband"


def rdma_devices():
    try:
        return sorted(os.listdir(SYSFS_IB))
    except OSError:
        return []


def have_verbs() -> bool:
    return bool(slash.have_ofi() and rdma_devices())


needs_verbs = pytest.mark.skipif(
    not have_verbs(),
    reason=f"no RDMA device ({SYSFS_IB} is empty; scripts/rxe-setup.sh makes one on kernels with "
           f"rdma_rxe, scripts/verbs-tests.sh runs these tests in a soft-RoCE guest)")
