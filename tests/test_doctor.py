"""`slash doctor`: the report's sections, parsers, and the verbs verdict."""
import sys

import pytest

import slash
from slash.cli import doctor

from _rdma import needs_verbs, rdma_devices

SECTIONS = {"slash", "transports", "libfabric", "rdma", "hugepages", "java", "spark", "system"}

MEMINFO = """MemTotal:       24617208 kB
MemAvailable:   24211876 kB
HugePages_Total:      16
HugePages_Free:        9
Hugepagesize:       2048 kB
"""

FI_INFO_L = """psm2:
    version: 117.0
ofi_rxm:
    version: 117.0
tcp:
    version: 117.0
ofi_hook_perf:
    version: 117.0
"""


@pytest.fixture(scope="module")
def report():
    return doctor.collect()


def test_collect_has_every_section(report):
    assert set(report) == SECTIONS


def test_shm_is_available(report):
    assert report["transports"]["shm"] == {"available": True, "detail": "opened"}


def test_ofi_matches_build(report):
    assert report["libfabric"]["compiled_in"] == slash.have_ofi()
    tcp = report["transports"]["ofi:tcp"]
    if not slash.have_ofi():
        assert not tcp["available"] and "libfabric" in tcp["detail"]


def test_verbs_line_has_a_reason(report):
    verbs = report["rdma"]["verbs"]
    assert isinstance(verbs["available"], bool)
    assert verbs["reason"]
    if not verbs["available"]:
        assert "verbs provider is unavailable" in verbs["reason"]
        assert "shm" in verbs["reason"]  # says what still works
    line = [v for s, i, v in doctor.rows(report) if (s, i) == ("rdma", "verbs")]
    assert line and line[0].endswith(verbs["reason"])


def test_table_names_every_section(report):
    text = doctor.format_report(report)
    firsts = {line.split()[0] for line in text.splitlines() if line[:1].strip()}
    assert firsts == SECTIONS


def test_hugepages_and_system_numbers(report):
    hp, sy = report["hugepages"], report["system"]
    assert hp["size_kb"] is None or hp["size_kb"] > 0
    assert sy["cpus"] >= 1 and 1 <= sy["cpus_usable"] <= sy["cpus"]
    assert sy["memory_total_bytes"] > 0


def test_parse_meminfo():
    mi = doctor.parse_meminfo(MEMINFO)
    assert mi == {"MemTotal": 24617208, "MemAvailable": 24211876, "HugePages_Total": 16,
                  "HugePages_Free": 9, "Hugepagesize": 2048}


def test_parse_fi_info():
    assert doctor.parse_fi_info_providers(FI_INFO_L) == ["psm2", "ofi_rxm", "tcp", "ofi_hook_perf"]
    assert doctor.parse_fi_info_providers("") == []


def test_parse_java_and_thp():
    text = 'openjdk version "17.0.15" 2025-04-15\nOpenJDK Runtime Environment (build 17.0.15+6)\n'
    assert doctor.parse_java_version(text) == "17.0.15"
    assert doctor.parse_java_version("bash: java: command not found") is None
    assert doctor.parse_thp("always [madvise] never\n") == "madvise"


def test_missing_tools_are_lines_not_errors(monkeypatch):
    monkeypatch.setattr(doctor.shutil, "which", lambda name: None)
    assert doctor.libfabric()["detail"].startswith("fi_info not found")
    j = doctor.java()
    assert j["version"] is None and "java not found" in j["detail"]


def test_missing_pyspark(monkeypatch):
    monkeypatch.setitem(sys.modules, "pyspark", None)
    s = doctor.spark()
    assert s["version"] is None and "pyspark" in s["detail"]


def _without_pyverbs(monkeypatch):
    """import pyverbs (and its modules, even once imported) raises ImportError."""
    for name in ("pyverbs", "pyverbs.device", "pyverbs.pyverbs_error"):
        monkeypatch.setitem(sys.modules, name, None)


def _fake_sysfs(root, state):
    port = root / "rxe0" / "ports" / "1"
    port.mkdir(parents=True)
    (port / "state").write_text(f"{state}\n")
    (port / "link_layer").write_text("Ethernet\n")


def test_sysfs_device_without_pyverbs(monkeypatch, tmp_path):
    _fake_sysfs(tmp_path, "4: ACTIVE")
    monkeypatch.setattr(doctor, "SYSFS_IB", str(tmp_path))
    _without_pyverbs(monkeypatch)
    tps = {"shm": {"available": True}, "ofi:tcp": {"available": True},
           "ofi:verbs": {"available": True, "detail": "opened"}}
    rd = doctor.rdma(tps)
    assert rd["pyverbs"].startswith("not installed")
    assert rd["devices"] == [{"name": "rxe0", "source": "sysfs",
                              "ports": [{"port": 1, "state": "ACTIVE", "link_layer": "Ethernet"}]}]
    assert rd["verbs"] == {"available": True, "reason": "active port on rxe0"}


def test_down_port_makes_verbs_unavailable(monkeypatch, tmp_path):
    _fake_sysfs(tmp_path, "1: DOWN")
    monkeypatch.setattr(doctor, "SYSFS_IB", str(tmp_path))
    _without_pyverbs(monkeypatch)
    tps = {"shm": {"available": True}, "ofi:tcp": {"available": False},
           "ofi:verbs": {"available": True, "detail": "opened"}}
    verbs = doctor.rdma(tps)["verbs"]
    assert not verbs["available"]
    assert verbs["reason"].startswith("no RDMA port is ACTIVE")
    assert "shm works" in verbs["reason"]


def test_gid_address_reads_roce_gids():
    assert doctor.gid_address("0000:0000:0000:0000:0000:ffff:0a00:020f") == "10.0.2.15"
    assert doctor.gid_address("fe80:0000:0000:0000:5054:00ff:fe12:3456") == "fe80::5054:ff:fe12:3456"
    assert doctor.gid_address("0000:0000:0000:0000:0000:0000:0000:0000") is None
    assert doctor.gid_address("not a gid") is None


def test_ofi_transports_report_their_listen_address(report):
    tcp = report["transports"]["ofi:tcp"]
    if tcp["available"]:
        assert tcp["address"].startswith("127.0.0.1:")


def test_no_device_is_said_plainly(monkeypatch, tmp_path):
    monkeypatch.setattr(doctor, "SYSFS_IB", str(tmp_path / "absent"))
    _without_pyverbs(monkeypatch)
    tps = {"shm": {"available": True, "detail": "opened"},
           "ofi:verbs": {"available": False, "detail": "NotFound: no device"}}
    report = {"rdma": doctor.rdma(tps)}
    assert report["rdma"]["devices"] == [] and report["rdma"]["address"] is None
    assert report["rdma"]["verbs"]["reason"].startswith("no RDMA device")
    assert report["rdma"]["pyverbs"].startswith("not installed")


@needs_verbs
def test_pyverbs_lists_the_device_and_the_gid_the_transport_listens_on(report):
    """Read independently through pyverbs (rdma-core's bindings): the address
    ofi:verbs listens on by default is a GID of an ACTIVE port."""
    pytest.importorskip("pyverbs", reason="apt-get install python3-pyverbs (scripts/install.sh does)")
    rd = report["rdma"]
    assert rd["pyverbs"] == "installed" and rd["devices"]
    assert {d["name"] for d in rd["devices"]} == set(rdma_devices())
    host = rd["address"].rsplit(":", 1)[0].strip("[]")
    served = {g["address"] for d in rd["devices"] for p in d["ports"] if p["state"] == "ACTIVE"
              for g in p["gids"]}
    assert host in served, (rd["address"], served)
    rows = dict(((s, i), v) for s, i, v in doctor.rows(report))
    assert rows[("rdma", "ofi:verbs listens on")] == rd["address"]
