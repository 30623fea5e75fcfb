"""``slash bench ssb``: state-backend update rate against DuckDB, one thread.

The workload: ``--records`` rows of (key int64, time int64 ms, price int64)
held in memory as Arrow columns, keys drawn from ``[0, --keys)`` uniformly or
from a bounded Zipf law (``--dist zipf:S``, any S >= 0), event times rising
evenly over ``--span`` (a stream in time order). Both sides compute
``count(*)`` and ``sum(price)`` per (10 s tumbling window, key):

* Slash: a :class:`slash.StateBackend` fed batches of ``--batch`` rows from
  the Arrow columns, then one ``emit`` of every window (as a RecordBatch);
* DuckDB with ``SET threads=1``: the same GROUP BY over the same Arrow table,
  fetched as an Arrow table.

Each side runs ``--repeat`` times; the best time of each is kept (the machine
is shared). Both answers are sorted and compared exactly: ``verified``.
``ratio`` = Slash records/s over DuckDB records/s, both including producing
the result.

``--agg-cost AGG`` (repeatable, e.g. ``approx_count_distinct:price``): the
per-record cost of one more aggregate over a count, measured side by side:
Slash runs ``count`` alone and ``count`` + AGG on the same table, in
alternation, ``--repeat`` times each, best of each kept; ``agg_cost[AGG]``
gives both in ns a record (update and emit) and ``added`` = with / alone - 1.
"""
from __future__ import annotations

import argparse
import logging
import time
from dataclasses import asdict, dataclass
from typing import Any, Dict, Sequence, Tuple

import numpy as np
import pyarrow as pa

from slash.errors import InvalidArgument
from slash.state import StateBackend, StateConfig
from slash.window import Tumbling, parse_duration, parse_window

log = logging.getLogger(__name__)

NAME = "ssb"
HELP = "state-backend count+sum tumbling-window update rate against DuckDB (one thread each)"


@dataclass(frozen=True)
class SsbBenchConfig:
    keys: int = 100
    records: int = 20_000_000
    dist: str = "uniform"
    window: str = "tumbling:10s"
    span_ms: int = 60_000
    batch: int = 1 << 20
    repeat: int = 3
    seed: int = 1
    partitions: int = 1

    def __post_init__(self) -> None:
        for name in ("keys", "records", "batch", "repeat", "span_ms", "partitions"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise InvalidArgument(f"{name} must be an int >= 1, got {v!r}")
        zipf_exponent(self.dist)
        if not isinstance(parse_window(self.window), Tumbling):
            raise InvalidArgument(f"window: the benchmark compares tumbling windows, got {self.window!r}")


def zipf_exponent(dist: str) -> float:
    """0 for ``uniform``, S for ``zipf:S`` (S >= 0)."""
    if dist == "uniform":
        return 0.0
    kind, _, s = dist.partition(":")
    try:
        e = float(s)
    except ValueError:
        e = -1.0
    if kind != "zipf" or not e >= 0:
        raise InvalidArgument(f"dist must be 'uniform' or 'zipf:S' with S >= 0, got {dist!r}")
    return e


def bounded_zipf(rng: np.random.Generator, n: int, keys: int, s: float) -> np.ndarray:
    """n draws from [0, keys) with P(rank k) proportional to 1/(k+1)^s, by
    inverse CDF over precomputed weights (any s >= 0; s = 0 is uniform).
    Ranks are mapped to keys by a random permutation, so hot keys are spread."""
    if s == 0:
        return rng.integers(0, keys, n, dtype=np.int64)
    weights = np.arange(1, keys + 1, dtype=np.float64) ** -s
    cdf = np.cumsum(weights)
    cdf /= cdf[-1]
    ranks = np.searchsorted(cdf, rng.random(n), side="right")
    np.minimum(ranks, keys - 1, out=ranks)
    return rng.permutation(keys).astype(np.int64)[ranks]


def make_table(cfg: SsbBenchConfig) -> pa.Table:
    rng = np.random.default_rng(cfg.seed)
    keys = bounded_zipf(rng, cfg.records, cfg.keys, zipf_exponent(cfg.dist))
    times = (np.arange(cfg.records, dtype=np.int64) * cfg.span_ms) // cfg.records
    price = rng.integers(0, 1000, cfg.records, dtype=np.int64)
    return pa.table({"key": keys, "time": times, "price": price})


def run_slash(table: pa.Table, cfg: SsbBenchConfig, aggregates: Sequence[str] = ("count", "sum:price")
              ) -> Tuple[float, float, pa.RecordBatch, Dict[str, Any]]:
    """(total seconds, update-only seconds, result, stats) of one Slash run."""
    sc = StateConfig(window=cfg.window, aggregates=list(aggregates),
                     value_types={"price": "int64"}, partitions=cfg.partitions)
    key, tm, price = (table.column(c).combine_chunks() for c in ("key", "time", "price"))
    with StateBackend(sc) as sb:
        t0 = time.perf_counter()
        for lo in range(0, cfg.records, cfg.batch):
            n = min(cfg.batch, cfg.records - lo)
            sb.update(key.slice(lo, n), tm.slice(lo, n),
                      {"price": price.slice(lo, n)} if sc.value_columns else None)
        t1 = time.perf_counter()
        stats = sb.stats()
        out = sb.emit(2**62)
        t2 = time.perf_counter()
    return t2 - t0, t1 - t0, out, stats


def run_duckdb(table: pa.Table, cfg: SsbBenchConfig) -> Tuple[float, pa.Table]:
    import duckdb  # optional dependency

    size = parse_window(cfg.window).size_ms
    con = duckdb.connect()
    con.execute("SET threads=1")
    con.execute("SET enable_progress_bar=false")
    con.register("t", table)
    q = (f"SELECT time - (time % {size}) AS window_start, key, count(*) AS count, "
         f"sum(price)::BIGINT AS sum_price FROM t GROUP BY ALL")
    t0 = time.perf_counter()
    out = con.sql(q).to_arrow_table()
    t1 = time.perf_counter()
    con.close()
    return t1 - t0, out


def _sorted(t) -> Tuple[np.ndarray, ...]:
    cols = [np.asarray(t.column(c)) for c in ("window_start", "key", "count", "sum_price")]
    order = np.lexsort((cols[1], cols[0]))
    return tuple(c[order] for c in cols)


def verify(ours: pa.RecordBatch, theirs: pa.Table) -> bool:
    """Exact comparison (times are >= 0 here, so DuckDB's % is the floor)."""
    if ours.num_rows != theirs.num_rows:
        log.warning("ssb: %d result rows, DuckDB has %d", ours.num_rows, theirs.num_rows)
        return False
    return all(np.array_equal(a, b) for a, b in zip(_sorted(ours), _sorted(theirs)))


def run_config(cfg: SsbBenchConfig) -> Dict[str, Any]:
    t0 = time.perf_counter()
    table = make_table(cfg)
    log.info("ssb: generated %d records over %d keys (%s) in %.1f s", cfg.records, cfg.keys,
             cfg.dist, time.perf_counter() - t0)
    best = best_upd = best_duck = float("inf")
    verified = True
    stats: Dict[str, Any] = {}
    groups = 0
    for _ in range(cfg.repeat):
        total, upd, ours, stats = run_slash(table, cfg)
        best, best_upd = min(best, total), min(best_upd, upd)
        duck, theirs = run_duckdb(table, cfg)
        best_duck = min(best_duck, duck)
        verified = verified and verify(ours, theirs)
        groups = ours.num_rows
        del ours, theirs
    rate, drate = cfg.records / best, cfg.records / best_duck
    return {
        "records_per_s": rate,
        "duckdb_records_per_s": drate,
        "ratio": rate / drate,
        "verified": verified,
        "update_records_per_s": cfg.records / best_upd,
        "groups": groups,
        "memory_bytes": stats.get("memory_bytes", 0),
        "record_bytes": stats.get("record_bytes", 0),
        "parameters": asdict(cfg),
    }


def agg_costs(table: pa.Table, cfg: SsbBenchConfig, aggs: Sequence[str]) -> Dict[str, Any]:
    """Per aggregate: ns a record of ``count`` alone and of ``count`` + it,
    run in alternation on the same table (best of ``cfg.repeat`` each)."""
    out: Dict[str, Any] = {}
    for agg in aggs:
        alone = with_agg = float("inf")
        for _ in range(cfg.repeat):
            alone = min(alone, run_slash(table, cfg, ["count"])[0])
            with_agg = min(with_agg, run_slash(table, cfg, ["count", agg])[0])
        out[agg] = {"count_ns": alone / cfg.records * 1e9, "with_ns": with_agg / cfg.records * 1e9,
                    "added": with_agg / alone - 1}
        log.info("ssb: %s costs %.2f ns a record over a count's %.2f (+%.0f %%)", agg,
                 out[agg]["with_ns"], out[agg]["count_ns"], 100 * out[agg]["added"])
    return out


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--keys", type=int, default=100, metavar="N", help="distinct keys (default 100)")
    parser.add_argument("--records", type=int, default=20_000_000, metavar="M",
                        help="records (default 20M)")
    parser.add_argument("--dist", default="uniform", help="uniform (default) or zipf:S, e.g. zipf:1.5")
    parser.add_argument("--window", default="tumbling:10s", help="tumbling window (default tumbling:10s)")
    parser.add_argument("--span", default="60s", help="event-time span of the records (default 60s)")
    parser.add_argument("--batch", type=int, default=1 << 20, metavar="ROWS",
                        help="rows per update call (default 1Mi)")
    parser.add_argument("--repeat", type=int, default=3, metavar="R",
                        help="runs per side; the best is kept (default 3)")
    parser.add_argument("--partitions", type=int, default=1, metavar="P",
                        help="key partitions of the state backend (default 1)")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--agg-cost", action="append", default=[], metavar="AGG",
                        help="also measure the per-record cost of count + AGG against count alone "
                             "(repeatable; over the column price, e.g. approx_count_distinct:price)")


def run(args: argparse.Namespace) -> Dict[str, Any]:
    cfg = SsbBenchConfig(keys=args.keys, records=args.records, dist=args.dist, window=args.window,
                         span_ms=parse_duration(args.span, "span"), batch=args.batch,
                         repeat=args.repeat, seed=args.seed, partitions=args.partitions)
    result = run_config(cfg)
    if args.agg_cost:
        result["agg_cost"] = agg_costs(make_table(cfg), cfg, args.agg_cost)
    return result


def summary(result: Dict[str, Any]) -> str:
    p = result["parameters"]
    return (f"ssb keys={p['keys']} records={p['records']} dist={p['dist']}: "
            f"slash {result['records_per_s'] / 1e6:.1f} M rec/s, duckdb(1 thread) "
            f"{result['duckdb_records_per_s'] / 1e6:.1f} M rec/s, ratio {result['ratio']:.2f}, "
            f"verified={result['verified']}" +
            "".join(f"\n  {a}: {c['with_ns']:.2f} ns a record with a count, count alone "
                    f"{c['count_ns']:.2f} ns ({100 * c['added']:+.0f} %)"
                    for a, c in result.get("agg_cost", {}).items()))
