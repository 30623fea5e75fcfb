"""``slash bench channel --transport ofi:verbs`` beside perftest's
``ib_write_bw`` and ``ib_write_lat`` on the same RDMA device in the same
machine, taking turns, reported as ratios (issue 42, item 6).

Run it where an RDMA device exists; without an RDMA NIC, in the soft-RoCE
guest (software CPU, soft-RoCE: the ratios say how close the transport comes
to the verbs its provider drives, never how fast RDMA is):

    scripts/rxe-bench.sh                 # boots the guest, runs this, keeps the JSON

Each round runs, one after the other on the same device:

* bandwidth: ``ib_write_bw -s 65536 -D SECONDS`` (RDMA writes of 64 KiB, its
  average, MiB/s converted to GB/s = 10^9 B/s) and ``slash bench channel``
  over ``ofi:verbs`` with 64 KiB buffers (8 credits), payload GB/s at the
  consumer; ratio = channel / ib_write_bw;
* latency: ``ib_write_lat -s 8`` (t_typical: the median of half a round trip
  of 8 B RDMA writes, ping-pong) and ``slash bench channel`` with its smallest
  buffer (64 B: a 16 B stamp and sequence number, 32 B of payload, the 16 B
  footer) and one credit, the median stamp-to-receipt time. With one credit
  the producer stamps a buffer and then waits for the previous one's credit,
  so the channel's figure spans about 1.5 round trips where perftest's spans
  half of one: the ratio overstates the channel's cost, never understates it.
  ``ib_write_lat -s 64`` is measured too (the channel's slot size).

Medians over ``--rounds`` are kept. The JSON (``--out``) holds every run.
"""
from __future__ import annotations

import argparse
import json
import logging
import os
import re
import statistics
import subprocess
import time
from typing import Any, Dict, List

from slash.bench.channel import ChannelBenchConfig, run_once
from slash.errors import SystemFailure

log = logging.getLogger("rxe_perftest")

LABEL = "software CPU, soft-RoCE"
MIB = 1 << 20


def _perftest(tool: str, args: List[str], device: str, address: str, timeout: float) -> str:
    """Runs a perftest server and its client on ``device`` (the client
    connects to ``address``) and returns the client's output."""
    server = subprocess.Popen([tool, "-d", device, "-F", *args], stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True)
    try:
        deadline = time.monotonic() + timeout
        while True:  # the client fails at once while the server is not listening yet
            time.sleep(0.5)
            client = subprocess.run([tool, "-d", device, "-F", *args, address], capture_output=True,
                                    text=True, timeout=max(1.0, deadline - time.monotonic()))
            if client.returncode == 0:
                break
            if time.monotonic() > deadline or server.poll() is not None:
                raise SystemFailure(f"{tool} {' '.join(args)} failed: {client.stdout[-400:]}"
                                    f"{client.stderr[-400:]}")
        server.wait(timeout=max(1.0, deadline - time.monotonic()))
        return client.stdout
    finally:
        if server.poll() is None:
            server.kill()
            server.wait()


def _data_row(text: str, size: int) -> List[float]:
    """The numbers of perftest's result line for message size ``size``."""
    for line in text.splitlines():
        fields = line.split()
        if len(fields) >= 4 and fields[0] == str(size) and all(
                re.fullmatch(r"[\d.]+", f) for f in fields[:5]):
            return [float(f) for f in fields]
    raise SystemFailure(f"no result line for {size} B in perftest's output:\n{text[-800:]}")


def parse_bw_gbps(text: str, size: int) -> float:
    """``ib_write_bw``'s average bandwidth (column 4, MiB/s) in GB/s."""
    return _data_row(text, size)[3] * MIB / 1e9


def parse_lat_us(text: str, size: int) -> float:
    """``ib_write_lat``'s t_typical (column 5, us): its median latency."""
    return _data_row(text, size)[4]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--device", default="rxe0")
    p.add_argument("--address", default="10.0.2.15", help="the device's address (the guest's eth0)")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--seconds", type=float, default=3.0, help="each bandwidth run")
    p.add_argument("--lat-iters", type=int, default=2000, help="ib_write_lat exchanges")
    p.add_argument("--out", default=None, help="write the JSON here")
    args = p.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    transport = f"ofi:verbs@{args.device}"
    secs = max(2, int(round(args.seconds)))
    runs: List[Dict[str, Any]] = []
    for r in range(args.rounds):
        bw = parse_bw_gbps(_perftest("ib_write_bw", ["-s", "65536", "-D", str(secs)], args.device,
                                     args.address, 120), 65536)
        ch = run_once(ChannelBenchConfig(transport, 65536, 8, seconds=args.seconds))
        lat8 = parse_lat_us(_perftest("ib_write_lat", ["-s", "8", "-n", str(args.lat_iters)],
                                      args.device, args.address, 120), 8)
        lat64 = parse_lat_us(_perftest("ib_write_lat", ["-s", "64", "-n", str(args.lat_iters)],
                                       args.device, args.address, 120), 64)
        small = run_once(ChannelBenchConfig(transport, 64, 1, seconds=args.seconds, sample_every=1))
        run = {"round": r + 1, "ib_write_bw_gbps": bw, "channel_gbps": ch["throughput_gbps"],
               "channel_tcp_socket_gbps": ch["baseline_gbps"], "bw_ratio": ch["throughput_gbps"] / bw,
               "ib_write_lat_8_us": lat8, "ib_write_lat_64_us": lat64,
               "channel_64_p50_us": small["p50_us"], "lat_ratio_8": small["p50_us"] / lat8,
               "lat_ratio_64": small["p50_us"] / lat64}
        log.info("round %d: %s", r + 1, json.dumps(run))
        runs.append(run)
    med = {k: statistics.median(run[k] for run in runs) for k in runs[0] if k != "round"}
    doc = {"label": LABEL, "device": args.device, "transport": transport, "rounds": runs,
           "median": med, "guest_cpus": os.cpu_count(), "guest_load_average": os.getloadavg(),
           "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    print(f"{LABEL}: 64 KiB bandwidth, slash channel over ofi:verbs / ib_write_bw = "
          f"{med['bw_ratio']:.2f} ({med['channel_gbps']:.3f} / {med['ib_write_bw_gbps']:.3f} GB/s); "
          f"p50 latency, channel 64 B one credit / ib_write_lat 8 B = {med['lat_ratio_8']:.2f} "
          f"({med['channel_64_p50_us']:.1f} / {med['ib_write_lat_8_us']:.1f} us; "
          f"/ ib_write_lat 64 B = {med['lat_ratio_64']:.2f}); medians of {len(runs)} rounds")
    if args.out:
        with open(args.out, "w") as f:
            json.dump(doc, f, indent=1)
            f.write("\n")


if __name__ == "__main__":
    main()
