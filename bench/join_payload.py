"""Cost of string payload columns in a window join against the same join with a
numeric payload: flights joined with the weather of the same hour and origin
(one weather row per origin and hour, so one pair per flight), the flight's
carrier kept as an int64 code ("numeric") or as its name, a string of 2-24
bytes, at string_bytes 24 and 64 ("string24", "string64").

Two measures, alternating the variants in each repetition:
  * ``state``: JoinQuery.prepare + JoinBackend update + emit in this process
    (the packing and the C join state alone), rows per second;
  * ``run``: slash.runner.run over the Parquet files on 2 executors, wall clock.
Each variant's pairs are checked against the numeric one's (same flights, same
weather, carrier name = the code's name). Usage:
    PYTHONPATH=python python3 bench/join_payload.py [FLIGHTS] [REPS]
"""
import json
import os
import statistics
import sys
import time

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from slash.join import JoinBackend
from slash.query import JoinQuery
from slash.runner import run

HOUR = 3_600_000
ORIGINS, HOURS = 300, 48
NAMES = ["UA", "AA", "DL", "B6", "Southwest Airlines Co.", "JetBlue Airways", "Alaska", "Ünïcødé Air"]


def write(n: int, d: str) -> dict:
    rng = np.random.default_rng(1)
    code = rng.integers(0, len(NAMES), n)
    ts = np.sort(rng.integers(0, HOURS * HOUR, n))
    origin = rng.integers(0, ORIGINS, n)
    base = {"origin": origin, "ts": ts, "delay": rng.normal(size=n)}
    paths = {}
    for name, carrier in (("numeric", pa.array(code)),
                          ("string", pa.array(np.array(NAMES, dtype=object)[code], pa.string()))):
        paths[name] = os.path.join(d, f"flights-{name}-{n}.parquet")
        if not os.path.exists(paths[name]):
            pq.write_table(pa.table(dict(base, carrier=carrier)), paths[name], row_group_size=1 << 17)
    o, h = np.meshgrid(np.arange(ORIGINS), np.arange(HOURS))
    paths["weather"] = os.path.join(d, f"weather-{ORIGINS}x{HOURS}.parquet")
    pq.write_table(pa.table({"origin": o.ravel(), "ts": h.ravel() * HOUR + 1,
                             "temp": rng.normal(size=o.size)}), paths["weather"])
    return paths


VARIANTS = {"numeric": ("numeric", 32), "string24": ("string", 24), "string64": ("string", 64)}


def query(width: int) -> JoinQuery:
    return JoinQuery(time="ts", window="tumbling:1h", on="origin", string_bytes=width)


def state_rate(paths: dict, variant: str) -> tuple:
    kind, width = VARIANTS[variant]
    q = query(width)
    left, right = pq.read_table(paths[kind]), pq.read_table(paths["weather"])
    t0 = time.perf_counter()
    with JoinBackend(q.join_config(left.schema, right.schema)) as jb:
        for side, t in (("right", right), ("left", left)):
            for b in t.to_batches(max_chunksize=1 << 16):
                jb.update_batch(side, q.prepare(side, b, t.schema))
        log_bytes = jb.stats()["log_bytes"]
        out = jb.emit(HOURS * HOUR)
    secs = time.perf_counter() - t0
    res = q.finalize(pa.Table.from_batches([out]), left.schema, right.schema)
    return left.num_rows / secs, log_bytes, res


def main() -> None:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 1_000_000
    reps = int(sys.argv[2]) if len(sys.argv) > 2 else 5
    paths = write(n, os.environ.get("TMPDIR", "/tmp"))
    rates = {v: [] for v in VARIANTS}
    walls = {v: [] for v in VARIANTS}
    state_bytes = {}
    want = None
    for rep in range(reps):
        order = list(VARIANTS) if rep % 2 == 0 else list(reversed(VARIANTS))
        for v in order:
            rate, state_bytes[v], res = state_rate(paths, v)
            rates[v].append(rate)
            kind, width = VARIANTS[v]
            cols = ["origin", "left_ts", "left_carrier", "right_temp"]
            got = res.select(cols)
            if kind == "numeric":
                got = got.set_column(2, "left_carrier", pa.array(
                    np.array(NAMES, dtype=object)[got.column(2).to_numpy()], pa.string()))
            got = got.sort_by([(c, "ascending") for c in cols])
            assert got.num_rows == n
            if want is None:
                want = got
            assert got.equals(want), f"{v}: pairs differ from the numeric join's"
            t0 = time.perf_counter()
            out = run(query(width), (paths[kind], paths["weather"]), executors=2)
            walls[v].append(time.perf_counter() - t0)
            assert out.num_rows == n
    med = {v: {"state_rows_per_s": statistics.median(rates[v]),
               "run_wall_s": statistics.median(walls[v]), "state_log_bytes": state_bytes[v]}
           for v in VARIANTS}
    base = med["numeric"]
    for v in VARIANTS:
        med[v]["state_cost_ratio"] = base["state_rows_per_s"] / med[v]["state_rows_per_s"]
        med[v]["run_wall_ratio"] = med[v]["run_wall_s"] / base["run_wall_s"]
    print(json.dumps({"flights": n, "reps": reps, "variants": med}, indent=1))


if __name__ == "__main__":
    main()
