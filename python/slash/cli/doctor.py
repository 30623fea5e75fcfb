"""``slash doctor``: what this machine offers to Slash.

:func:`collect` gathers a report (a dict of sections, JSON-ready) and
:func:`format_report` renders it as a table. Sections:

* ``transports``: each transport spec (``shm``, ``ofi:tcp``, ``ofi:verbs``)
  opened through :class:`slash.Transport`; ``available`` plus the error text
  when opening fails, and for ofi the ``address`` a listener binds by default;
* ``libfabric``: whether the ``ofi`` transport is compiled in, and the
  providers ``fi_info -l`` lists (when the binary exists);
* ``rdma``: RDMA devices and port states, through pyverbs when installed and
  from ``/sys/class/infiniband`` otherwise; with pyverbs each port's GIDs and
  the address each stands for; the ``address`` a listener of ``ofi:verbs``
  binds when none is given; and a ``verbs`` verdict with the reason;
* ``hugepages``: ``/proc/meminfo`` huge page counts and the transparent huge
  page mode;
* ``java``, ``spark``: versions (``java -version``, ``pyspark.__version__``);
* ``system``: CPUs, memory, kernel, Python.

Nothing here raises for a missing tool or module: each becomes a line that
says what is missing and what still works.

>>> from slash.cli import doctor
>>> report = doctor.collect()
>>> report["transports"]["shm"]["available"]
True
"""
from __future__ import annotations

import ipaddress
import logging
import os
import platform
import re
import secrets
import shutil
import subprocess
import sys
from typing import Any, Dict, List, Optional, Tuple

log = logging.getLogger(__name__)

TRANSPORT_SPECS = ("shm", "ofi:tcp", "ofi:verbs")
SYSFS_IB = "/sys/class/infiniband"
MEMINFO = "/proc/meminfo"
THP = "/sys/kernel/mm/transparent_hugepage/enabled"
_PORT_STATES = {0: "NOP", 1: "DOWN", 2: "INIT", 3: "ARMED", 4: "ACTIVE", 5: "ACTIVE_DEFER"}
_LINK_LAYERS = {0: "unspecified", 1: "InfiniBand", 2: "Ethernet"}


def _run(cmd: List[str], timeout: float = 10.0) -> Tuple[int, str]:
    """Runs cmd; returns (exit code, stdout+stderr). Raises OSError if it cannot start."""
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=timeout,
                       text=True, errors="replace")
    return p.returncode, p.stdout


# --- parsers (pure, so tests can feed them text) -------------------------
def parse_meminfo(text: str) -> Dict[str, int]:
    """``/proc/meminfo`` as {field: number}; kB fields stay in kB."""
    out: Dict[str, int] = {}
    for line in text.splitlines():
        m = re.match(r"^([\w()]+):\s+(\d+)", line)
        if m:
            out[m.group(1)] = int(m.group(2))
    return out


def parse_fi_info_providers(text: str) -> List[str]:
    """Provider names from ``fi_info -l`` (lines ``name:`` followed by ``version: ...``)."""
    return [m.group(1) for m in re.finditer(r"^([\w;.\-]+):\s*$", text, re.MULTILINE)]


def parse_java_version(text: str) -> Optional[str]:
    """The version in ``java -version`` output (``openjdk version "17.0.15" ...``)."""
    m = re.search(r'version "([^"]+)"', text)
    return m.group(1) if m else None


def parse_thp(text: str) -> Optional[str]:
    """The selected mode in ``always [madvise] never``."""
    m = re.search(r"\[(\w+)\]", text)
    return m.group(1) if m else None


def _read(path: str) -> Optional[str]:
    try:
        with open(path) as f:
            return f.read()
    except OSError:
        return None


# --- sections ---------------------------------------------------------------
def transports() -> Dict[str, Dict[str, Any]]:
    """Opens each transport spec and reports whether it worked, with the error text if not."""
    import slash  # start-up: the report is made even where the compiled core fails to import

    out: Dict[str, Dict[str, Any]] = {}
    for spec in TRANSPORT_SPECS:
        try:
            with slash.Transport(spec) as tp:
                address = _listen_address(tp) if spec.startswith("ofi:") else None
        except slash.errors.SlashError as e:
            out[spec] = {"available": False, "detail": f"{type(e).__name__}: {e}"}
        else:
            out[spec] = {"available": True, "detail": "opened"}
            if address is not None:
                out[spec]["address"] = address
    return out


def _listen_address(tp: Any) -> Optional[str]:
    """The address a listener of transport ``tp`` binds when none is given
    (the one executors announce), or None when it cannot listen."""
    import slash  # start-up: see transports()

    try:
        with slash.Listener(tp, token=secrets.token_hex(8)) as lst:
            return str(lst.address)
    except slash.errors.SlashError as e:
        log.debug("%s cannot listen: %s", tp.spec, e)
        return None


def libfabric() -> Dict[str, Any]:
    import slash  # start-up: the report is made even where the compiled core fails to import

    info: Dict[str, Any] = {"compiled_in": bool(slash.have_ofi()), "fi_info": shutil.which("fi_info"),
                            "providers": []}
    if info["fi_info"] is None:
        info["detail"] = "fi_info not found (apt-get install libfabric-bin to list providers)"
        return info
    try:
        rc, text = _run([info["fi_info"], "-l"])
    except (OSError, subprocess.TimeoutExpired) as e:
        info["detail"] = f"fi_info -l failed: {e}"
        return info
    info["providers"] = parse_fi_info_providers(text)
    info["detail"] = (f"{len(info['providers'])} providers listed by fi_info -l" if rc == 0
                      else f"fi_info -l exited {rc}: {text.strip()[:200]}")
    return info


def _sysfs_devices(root: Optional[str] = None) -> List[Dict[str, Any]]:
    """RDMA devices and port states from sysfs (``ports/N/state`` reads ``4: ACTIVE``)."""
    root = root or SYSFS_IB
    devices: List[Dict[str, Any]] = []
    if not os.path.isdir(root):
        return devices
    for name in sorted(os.listdir(root)):
        ports = []
        pdir = os.path.join(root, name, "ports")
        for port in sorted(os.listdir(pdir), key=lambda p: int(p) if p.isdigit() else 0) \
                if os.path.isdir(pdir) else []:
            state = (_read(os.path.join(pdir, port, "state")) or "?").strip()
            layer = (_read(os.path.join(pdir, port, "link_layer")) or "?").strip()
            ports.append({"port": int(port) if port.isdigit() else port,
                          "state": state.split(":", 1)[-1].strip(), "link_layer": layer})
        devices.append({"name": name, "source": "sysfs", "ports": ports})
    return devices


def gid_address(gid: str) -> Optional[str]:
    """The IP address a RoCE GID stands for (``::ffff:10.0.2.15`` is
    10.0.2.15, other GIDs are IPv6 addresses); None for an empty entry or
    text that is no GID."""
    try:
        a = ipaddress.IPv6Address(gid)
    except ValueError:
        return None
    if a == ipaddress.IPv6Address(0):
        return None
    return str(a.ipv4_mapped or a)


def _pyverbs_gids(ctx: Any, port: int, table_len: int) -> List[Dict[str, Any]]:
    """A port's filled GID entries: index, GID and the address it stands for."""
    from pyverbs.pyverbs_error import PyverbsError  # optional dependency, imported by the caller

    gids = []
    for index in range(table_len):
        try:
            gid = str(ctx.query_gid(port, index))
        except PyverbsError:  # an empty entry (the kernel answers EINVAL or ENODATA)
            continue
        if gid_address(gid) is not None:
            gids.append({"index": index, "gid": gid, "address": gid_address(gid)})
    return gids


def _pyverbs_devices() -> List[Dict[str, Any]]:
    """RDMA devices, port states and GIDs through pyverbs (raises ImportError
    without it). No device at all is an empty list (libibverbs reports it as
    an error)."""
    from pyverbs.device import Context, get_device_list  # optional dependency (rdma-core's Python bindings)
    from pyverbs.pyverbs_error import PyverbsError

    devices: List[Dict[str, Any]] = []
    try:
        listed = get_device_list()
    except PyverbsError:
        if os.listdir(SYSFS_IB) if os.path.isdir(SYSFS_IB) else []:
            raise  # devices exist that libibverbs could not list: a real failure
        return devices
    for dev in listed:
        name = dev.name.decode() if isinstance(dev.name, bytes) else str(dev.name)
        entry: Dict[str, Any] = {"name": name, "source": "pyverbs", "ports": []}
        try:
            with Context(name=name) as ctx:
                for port in range(1, ctx.query_device().phys_port_cnt + 1):
                    attr = ctx.query_port(port)
                    entry["ports"].append({
                        "port": port,
                        "state": _PORT_STATES.get(int(attr.state), str(attr.state)),
                        "link_layer": _LINK_LAYERS.get(int(attr.link_layer), str(attr.link_layer)),
                        "gids": _pyverbs_gids(ctx, port, int(attr.gid_tbl_len)),
                    })
        except Exception as e:  # a device that cannot be opened is reported, not fatal
            entry["error"] = f"{type(e).__name__}: {e}"
        devices.append(entry)
    return devices


def rdma(transport_report: Optional[Dict[str, Dict[str, Any]]] = None) -> Dict[str, Any]:
    """RDMA devices, port states, and whether the ``ofi:verbs`` transport can run here."""
    out: Dict[str, Any] = {"pyverbs": None, "sysfs": os.path.isdir(SYSFS_IB), "devices": []}
    try:
        out["devices"] = _pyverbs_devices()
        out["pyverbs"] = "installed"
    except ImportError:
        out["pyverbs"] = "not installed (pip install pyverbs, or apt-get install python3-pyverbs)"
        out["devices"] = _sysfs_devices()
    except Exception as e:
        out["pyverbs"] = f"installed but failed: {type(e).__name__}: {e}"
        out["devices"] = _sysfs_devices()
    active = [d["name"] for d in out["devices"]
              if any(p.get("state") == "ACTIVE" for p in d["ports"])]
    tps = transport_report if transport_report is not None else transports()
    working = [spec for spec, t in tps.items() if t["available"] and spec != "ofi:verbs"]
    works = f"{' and '.join(working) or 'no transport'} work{'s' if len(working) == 1 else ''}"
    verbs_open = tps.get("ofi:verbs", {}).get("available", False)
    out["address"] = tps.get("ofi:verbs", {}).get("address")
    if active and verbs_open:
        out["verbs"] = {"available": True, "reason": f"active port on {', '.join(active)}"}
    else:
        if not out["devices"]:
            why = f"no RDMA device ({SYSFS_IB} {'is empty' if out['sysfs'] else 'is absent'})"
        elif not active:
            why = "no RDMA port is ACTIVE"
        else:
            why = f"ofi:verbs does not open: {tps['ofi:verbs']['detail']}"
        out["verbs"] = {"available": False,
                        "reason": f"{why}: the verbs provider is unavailable; {works} "
                                  f"(scripts/rxe-setup.sh creates a soft-RoCE device where the "
                                  f"kernel has rdma_rxe)"}
    return out


def hugepages() -> Dict[str, Any]:
    mi = parse_meminfo(_read(MEMINFO) or "")
    thp_text = _read(THP)
    return {
        "total": mi.get("HugePages_Total"),
        "free": mi.get("HugePages_Free"),
        "size_kb": mi.get("Hugepagesize"),
        "transparent": parse_thp(thp_text) if thp_text else None,
    }


def java() -> Dict[str, Any]:
    exe = shutil.which("java")
    if exe is None:
        return {"version": None, "detail": "java not found on PATH (Spark needs Java 17 or 21)"}
    try:
        rc, text = _run([exe, "-version"], timeout=20)
    except (OSError, subprocess.TimeoutExpired) as e:
        return {"version": None, "detail": f"java -version failed: {e}"}
    v = parse_java_version(text)
    return {"version": v, "detail": exe if v else f"java -version exited {rc}: {text.strip()[:200]}"}


def spark() -> Dict[str, Any]:
    try:
        import pyspark  # optional dependency
    except ImportError as e:
        return {"version": None, "detail": f"pyspark not importable ({e}); pip install pyspark"}
    return {"version": getattr(pyspark, "__version__", None), "detail": os.path.dirname(pyspark.__file__)}


def system() -> Dict[str, Any]:
    mi = parse_meminfo(_read(MEMINFO) or "")
    try:
        usable = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        usable = os.cpu_count()
    return {
        "cpus": os.cpu_count(),
        "cpus_usable": usable,
        "memory_total_bytes": mi["MemTotal"] * 1024 if "MemTotal" in mi else None,
        "memory_available_bytes": mi["MemAvailable"] * 1024 if "MemAvailable" in mi else None,
        "kernel": platform.release(),
        "python": sys.version.split()[0],
    }


def collect() -> Dict[str, Any]:
    """Gathers every section into one JSON-ready dict (see the module docstring)."""
    import slash  # start-up: the report is made even where the compiled core fails to import

    tps = transports()
    return {
        "slash": {"version": slash.__version__, "ofi_compiled_in": bool(slash.have_ofi())},
        "transports": tps,
        "libfabric": libfabric(),
        "rdma": rdma(tps),
        "hugepages": hugepages(),
        "java": java(),
        "spark": spark(),
        "system": system(),
    }


# --- rendering --------------------------------------------------------------
def _gib(n: Optional[int]) -> str:
    return "?" if n is None else f"{n / 2**30:.1f} GiB"


def rows(report: Dict[str, Any]) -> List[Tuple[str, str, str]]:
    """The report as (section, item, value) rows."""
    r: List[Tuple[str, str, str]] = [("slash", "version", str(report["slash"]["version"]))]
    for spec, t in report["transports"].items():
        r.append(("transports", spec, "available" if t["available"] else f"unavailable: {t['detail']}"))
    lf = report["libfabric"]
    r.append(("libfabric", "ofi transport", "compiled in" if lf["compiled_in"] else
              "not compiled in (apt-get install libfabric-dev, then reinstall slash)"))
    r.append(("libfabric", "providers", (", ".join(lf["providers"]) + f" ({lf['detail']})")
              if lf["providers"] else lf["detail"]))
    rd = report["rdma"]
    r.append(("rdma", "pyverbs", rd["pyverbs"]))
    for d in rd["devices"]:
        ports = ", ".join(f"port {p['port']} {p['state']} ({p['link_layer']})" for p in d["ports"])
        r.append(("rdma", d["name"], (ports or "no ports") + (f"; {d['error']}" if "error" in d else "")))
        for p in d["ports"]:
            for g in p.get("gids", []):
                r.append(("rdma", f"{d['name']} port {p['port']} gid {g['index']}",
                          f"{g['gid']} ({g['address']})"))
    if not rd["devices"]:
        r.append(("rdma", "devices", "none (no RDMA device on this machine)"))
    if rd.get("address"):
        r.append(("rdma", "ofi:verbs listens on", rd["address"]))
    v = rd["verbs"]
    r.append(("rdma", "verbs", ("available: " if v["available"] else "unavailable: ") + v["reason"]))
    hp = report["hugepages"]
    r.append(("hugepages", f"{hp['size_kb']} kB pages", f"{hp['total']} total, {hp['free']} free"))
    r.append(("hugepages", "transparent", str(hp["transparent"])))
    for name in ("java", "spark"):
        s = report[name]
        r.append((name, "version", f"{s['version']} ({s['detail']})" if s["version"] else s["detail"]))
    sy = report["system"]
    r.append(("system", "cpus", f"{sy['cpus']} ({sy['cpus_usable']} usable)"))
    r.append(("system", "memory", f"{_gib(sy['memory_total_bytes'])} total, "
                                  f"{_gib(sy['memory_available_bytes'])} available"))
    r.append(("system", "kernel", f"{sy['kernel']}, Python {sy['python']}"))
    return r


def format_report(report: Dict[str, Any]) -> str:
    """A plain-text table of the report, one row per item, section names shown once."""
    table = rows(report)
    w0 = max(len(s) for s, _, _ in table)
    w1 = max(len(i) for _, i, _ in table)
    lines, last = [], None
    for section, item, value in table:
        lines.append(f"{section if section != last else '':<{w0}}  {item:<{w1}}  {value}")
        last = section
    return "\n".join(lines) + "\n"
