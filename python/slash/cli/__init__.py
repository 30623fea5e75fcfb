"""The ``slash`` command line.

``slash doctor [--json]`` reports what this machine offers (transports,
libfabric providers, RDMA devices, huge pages, Java and Spark).
``slash bench NAME [options] [--json PATH]`` runs a benchmark found in
:mod:`slash.bench` and prints one summary line per run.

Exit codes: 0 success; 2 a usage error (bad option, unknown transport; the
message says what was wrong); 1 a failure of the system or a peer; 130
interrupted. Expected errors print ``slash: error: MESSAGE`` and no traceback
(``-v`` adds it to the log). Heavy modules are imported by the subcommand
that needs them, so ``slash doctor`` runs even where they are missing.

>>> from slash.cli import main
>>> main(["--version"])  # doctest: +SKIP
slash 0.1.0
0
"""
from __future__ import annotations

import argparse
import json
import logging
import os
import signal
import sys
import threading
from typing import Any, Dict, List, Optional, Sequence

log = logging.getLogger("slash.cli")

PROG = "slash"


def _version() -> str:
    from slash import __version__  # start-up: a broken compiled core is reported by main(), not at import

    return __version__


def _add_doctor(sub: "argparse._SubParsersAction[argparse.ArgumentParser]") -> None:
    p = sub.add_parser("doctor", help="what this machine offers: transports, RDMA, huge pages, Java, Spark",
                       description="Reports the transports compiled in, libfabric providers, RDMA "
                                   "devices, huge pages, Java and Spark versions, CPUs and memory.")
    p.add_argument("--json", action="store_true", help="print machine-readable JSON instead of a table")
    p.set_defaults(func=_cmd_doctor)


def _add_bench(sub: "argparse._SubParsersAction[argparse.ArgumentParser]", discover: bool) -> None:
    p = sub.add_parser("bench", help="run a benchmark (slash bench --help lists them)",
                       description="Runs a benchmark. Each reports its result against a baseline "
                                   "measured in the same run on this machine.")
    def no_name(args: argparse.Namespace) -> int:
        p.print_help(sys.stderr)
        return 2

    p.set_defaults(func=no_name)
    if not discover:
        return
    from slash.bench import discover as find  # start-up: discovering imports every benchmark (~0.75 s), only for `slash bench`

    names = p.add_subparsers(dest="bench", metavar="NAME")
    for bench in find().values():
        bp = names.add_parser(bench.name, help=bench.help, description=bench.help)
        bench.add_arguments(bp)
        bp.add_argument("--json", metavar="PATH", dest="json",
                        help="also write the result as JSON to PATH ('-' for stdout)")
        bp.set_defaults(func=_cmd_bench, benchmark=bench)


def _add_run(sub: "argparse._SubParsersAction[argparse.ArgumentParser]") -> None:
    from slash.cli import run as cli_run  # start-up: ~40 ms, only for `slash run`

    p = sub.add_parser("run", help="run a windowed aggregation over Parquet/Arrow files",
                       description=cli_run.__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    cli_run.add_arguments(p)
    p.set_defaults(func=_cmd_run)


def _cmd_run(args: argparse.Namespace) -> int:
    from slash.cli import run as cli_run  # start-up: ~40 ms, only for `slash run`

    print(cli_run.summary(cli_run.run(args)), flush=True)
    return 0


def _add_ctl(sub: "argparse._SubParsersAction[argparse.ArgumentParser]", full: bool) -> None:
    p = sub.add_parser("ctl", help="control a running `slash run`: status, update, rebalance, "
                                   "scale-out, scale-in, epoch",
                       description="Sends one operation to a running stream over its control "
                                   "socket (docs/control.md).")
    p.set_defaults(func=_cmd_ctl)
    if full:  # its operations are imported only when asked for (pyarrow, numpy)
        from slash import control  # start-up: ~0.7 s (pyarrow, numpy), only for `slash ctl`

        control.add_ctl_arguments(p)


def _cmd_ctl(args: argparse.Namespace) -> int:
    from slash import control  # start-up: ~0.7 s (pyarrow, numpy), only for `slash ctl`

    print(control.run_ctl(args), flush=True)
    return 0


def build_parser(argv: Sequence[str] = ()) -> argparse.ArgumentParser:
    """The argument parser. Benchmarks are imported only when ``argv`` asks for ``bench``."""
    parser = argparse.ArgumentParser(prog=PROG, description="Slash: shuffle-free stateful stream "
                                     "processing over one-sided-write channels.")
    parser.add_argument("--version", action="version", version=f"{PROG} {_version()}")
    parser.add_argument("-v", "--verbose", action="count", default=0,
                        help="log progress (-v) or debug detail (-vv) to stderr")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    _add_doctor(sub)
    _add_run(sub)
    _add_ctl(sub, full="ctl" in argv)
    _add_bench(sub, discover="bench" in argv)
    return parser


def _cmd_doctor(args: argparse.Namespace) -> int:
    from slash.cli import doctor  # start-up: ~30 ms, only for `slash doctor`

    report = doctor.collect()
    if args.json:
        json.dump(report, sys.stdout, indent=2, default=str)
        sys.stdout.write("\n")
    else:
        sys.stdout.write(doctor.format_report(report))
    return 0


def _runs(result: Dict[str, Any]) -> List[Dict[str, Any]]:
    runs = result.get("runs")
    return list(runs) if isinstance(runs, list) else [result]


def _write_json(path: str, result: Dict[str, Any]) -> None:
    text = json.dumps(result, indent=2, default=str) + "\n"
    if path == "-":
        sys.stdout.write(text)
        return
    d = os.path.dirname(os.path.abspath(path))
    os.makedirs(d, exist_ok=True)
    tmp = f"{path}.tmp{os.getpid()}"
    with open(tmp, "w") as f:
        f.write(text)
    os.replace(tmp, path)
    log.info("wrote %s", path)


def _cmd_bench(args: argparse.Namespace) -> int:
    bench = args.benchmark
    result = bench.run(args)
    for run in _runs(result):
        print(bench.summary(run), flush=True)
    if args.json:
        from slash.bench import recorded  # start-up: imported already by `slash bench`

        _write_json(args.json, {**result, "recorded": recorded(args.argv)})
    return 0


def _configure_logging(verbosity: int) -> None:
    level = logging.WARNING if verbosity <= 0 else logging.INFO if verbosity == 1 else logging.DEBUG
    logging.basicConfig(level=level, stream=sys.stderr,
                        format="%(asctime)s %(name)s %(levelname)s: %(message)s")


def _error(msg: str, code: int) -> int:
    sys.stderr.write(f"{PROG}: error: {msg}\n")
    return code


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Runs the ``slash`` command with ``argv`` (default: ``sys.argv[1:]``) and returns the exit code."""
    argv = list(sys.argv[1:] if argv is None else argv)
    # This process is the command's: numpy's OpenBLAS would start a thread per
    # core at import that spins for work that never comes (slash does no BLAS
    # work that needs threads), 0.1 s of CPU per process on 2 cores; one
    # thread, unless the user chose (inherited by the executors' processes)
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    try:
        from slash import errors  # start-up: a missing or broken compiled core is reported, not raised
    except ImportError as e:  # the compiled core is missing or broken
        return _error(f"cannot import slash ({e}); reinstall it with `pip install .`", 1)
    parser = build_parser(argv)
    try:
        args = parser.parse_args(argv)
    except SystemExit as e:  # --help, --version, or a parse error (argparse printed it)
        return int(e.code or 0)
    args.argv = argv  # recorded with a benchmark's JSON result
    _configure_logging(args.verbose)
    if getattr(args, "func", None) is None:
        parser.print_help(sys.stderr)
        return 2
    old = _on_sigterm()
    try:
        return int(args.func(args))
    except _Terminated:
        return _error("terminated", 143)
    except errors.UsageError as e:
        log.debug("usage error", exc_info=True)
        return _error(str(e), 2)
    except (errors.SlashError, OSError) as e:
        log.debug("failure", exc_info=True)
        return _error(str(e) or type(e).__name__, 1)
    except KeyboardInterrupt:
        return _error("interrupted", 130)
    finally:
        if old is not None:
            signal.signal(signal.SIGTERM, old)


class _Terminated(KeyboardInterrupt):
    """SIGTERM, raised in the main thread as SIGINT is: the same unwinding
    (executors stopped, control socket removed), no traceback."""


def _on_sigterm() -> Any:
    """Makes SIGTERM stop the command like SIGINT; returns the old handler
    (None off the main thread, where no handler can be set)."""
    if threading.current_thread() is not threading.main_thread():
        return None

    def stop(signum: int, frame: Any) -> None:
        raise _Terminated()

    return signal.signal(signal.SIGTERM, stop)


if __name__ == "__main__":
    sys.exit(main())
