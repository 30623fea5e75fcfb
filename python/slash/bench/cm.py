"""``slash bench cm``: cluster monitoring (Slash paper section 8.1.2): the
average CPU request per job over 2 s tumbling windows of 64-byte task
events.

``--sample`` runs on the real Google cluster-trace sample (16,385 rows, found
in ``$SLASH_DATA_DIR`` or a ``shared/data`` folder near the working directory
or the package, or given as ``--sample PATH``; ``--records`` then caps the
rows); otherwise the synthetic generator shaped like the sample (job
popularity zipf 1.42 over 240 jobs unless ``--keys``/``--skew`` say
otherwise) at ``--rate`` events per second of event time (default 100,000,
so a 2 s window holds 200,000 events; the sample's own rate is 25/s).
``avg_cpu`` is compared with a relative tolerance of 1e-9 (sums in another
order). Engines, timing and checks: see :mod:`slash.bench._suite`.
"""
from __future__ import annotations

import argparse
from typing import Any, Dict, Optional

from slash.bench import _suite
from slash.errors import UnknownName
from slash.query import Query
from slash.spark.reference import spark_window_aggregate
from slash.workloads.gen_cm import cm_sample, find_sample

NAME = "cm"
HELP = "cluster monitoring: 2 s tumbling average CPU per job (trace sample or synthetic)"

WINDOW_MS = 2_000
COLUMNS = ("timestamp", "job_id", "cpu")


def plan(records: int, keys: int = 240, skew: str = "zipf:1.42", rate: int = 100_000, seed: int = 1,
         block: int = 1 << 16, sample: Optional[str] = None) -> _suite.Plan:
    if sample:
        rows = cm_sample(sample).num_rows
        stream = _suite.Stream("cm-sample", min(records, rows), block=min(block, 2048),
                               columns=COLUMNS, sample_path=str(sample))
    else:
        stream = _suite.Stream("cm", records, block=block, keys=keys, skew=skew, seed=seed,
                               rate=rate, columns=COLUMNS)
    w = WINDOW_MS
    return _suite.Plan(
        name=NAME, inputs=(("events", stream),), float_columns=("avg_cpu",),
        query=Query(time="timestamp", window=f"tumbling:{w}ms", key="job_id", aggregates=["avg:cpu"]),
        sql=(f"SELECT timestamp - timestamp % {w} AS window_start, "
             f"timestamp - timestamp % {w} + {w} AS window_end, job_id, "
             f"avg(cpu::DOUBLE) AS avg_cpu FROM events GROUP BY ALL"))


def spark_plan(spark: Any, paths: Dict[str, str]) -> Any:
    return spark_window_aggregate(spark, paths["events"], time="timestamp",
                                  window=f"tumbling:{WINDOW_MS}ms", key="job_id", aggs=["avg:cpu"])


def add_arguments(p: argparse.ArgumentParser) -> None:
    _suite.add_common(p, records=20_000_000, keys=240, rate=100_000, skew=False)
    p.add_argument("--skew", default="zipf:1.42",
                   help="job popularity: uniform or zipf:S (default zipf:1.42, fitted to the sample)")
    p.add_argument("--sample", nargs="?", const="", default=None, metavar="PATH",
                   help="run on the real trace sample (optionally its path) instead of the generator")


def _sample_path(arg: Optional[str]) -> Optional[str]:
    if arg is None:
        return None
    if arg:
        return arg
    found = find_sample()
    if found is None:
        raise UnknownName("cm --sample: the trace sample was not found; give its path "
                          "(--sample PATH) or set SLASH_DATA_DIR")
    return str(found)


def run(args: argparse.Namespace) -> Dict[str, Any]:
    sample = _sample_path(args.sample)
    pl = plan(args.records, args.keys, args.skew, args.rate, args.seed, args.block, sample)
    res = _suite.run_suite(pl, _suite.suite_config(args), spark_plan,
                           _suite.parameters(args, sample=sample))
    return _suite.finish(res, args)


summary = _suite.summary
