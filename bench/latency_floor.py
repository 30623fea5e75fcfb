"""The latency floor (issue 18, item 5): ``slash bench latency`` run by one
build of the core, its runs stored under ``--label`` in
bench/results/latency_floor.json (other labels already there are kept), so
two builds can be compared side by side:

    PYTHONPATH=<old build>/python python3 bench/latency_floor.py --label before
    PYTHONPATH=python python3 bench/latency_floor.py --label after

Every option of ``slash bench latency`` is accepted (``--transports``,
``--loads``, ``--seconds``, ``--epoch-ms``, ``--tick-ms``, ``--idle-seconds``).
"""
from __future__ import annotations

import argparse
import json
import logging
import os
import platform
import time

from slash import _core
from slash.bench import latency

log = logging.getLogger("latency_floor")

RESULTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "results", "latency_floor.json")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    latency.add_arguments(p)
    p.add_argument("--out", default=RESULTS, help="the JSON file (default bench/results/latency_floor.json)")
    args = p.parse_args()
    if not args.label:
        p.error("--label is required (e.g. before / after)")
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    res = latency.run(args)
    res.update(time=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), host=platform.node(),
               cpus=os.cpu_count(), load_average=os.getloadavg(), core=os.path.dirname(_core.__file__))
    doc = {}
    if os.path.exists(args.out):
        with open(args.out) as f:
            doc = json.load(f)
    doc.setdefault("labels", {})[args.label] = res
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    with open(args.out, "w") as f:
        json.dump(doc, f, indent=2)
    for r in res["runs"]:
        log.info("%s: %s", args.label, latency.summary(r))
    for r in res["idle"]:
        log.info("%s: idle %s: CPU load per executor %s", args.label, r["transport"],
                 r["cpu_load_per_executor"])


if __name__ == "__main__":
    main()
