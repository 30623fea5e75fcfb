"""The `slash` command line: subcommand discovery, exit codes, --json, --version."""
import argparse
import json
import os
import subprocess
import sys
import uuid

import pytest

import slash
import slash.bench
from slash import cli, errors
from slash.bench import discover

GOOD_BENCH = '''
NAME = "{name}"
HELP = "a test benchmark"

def add_arguments(parser):
    parser.add_argument("--n", type=int, default=2)

def run(args):
    return {{"runs": [{{"i": i, "value": i * 1.5}} for i in range(args.n)]}}
'''


def _run_cli(*argv, env_extra=None, timeout=120):
    env = dict(os.environ, **(env_extra or {}))
    return subprocess.run([sys.executable, "-m", "slash", *argv], capture_output=True, text=True,
                          timeout=timeout, env=env, cwd="/")


@pytest.fixture
def fake_package(tmp_path, monkeypatch):
    """A throwaway package with a benchmark, a private module, a helper and a broken module."""
    name = f"fakebench_{uuid.uuid4().hex[:8]}"
    pkg = tmp_path / name
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "good.py").write_text(GOOD_BENCH.format(name="goodname"))
    (pkg / "_private.py").write_text(GOOD_BENCH.format(name="private"))
    (pkg / "helper.py").write_text("def run(args):\n    return {}\n")
    (pkg / "broken.py").write_text("import module_that_does_not_exist_xyz\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    yield name
    for mod in [m for m in sys.modules if m == name or m.startswith(name + ".")]:
        del sys.modules[mod]


def test_version_flag(capsys):
    assert cli.main(["--version"]) == 0
    assert capsys.readouterr().out.strip() == f"slash {slash.__version__}"


def test_version_through_python_m():
    r = _run_cli("--version")
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == f"slash {slash.__version__}"


def test_channel_is_discovered():
    benches = discover()
    assert "channel" in benches
    assert benches["channel"].module is not None
    # helpers in slash.bench are not subcommands
    assert not {"baselines", "plot", "_harness"} & set(benches)


def test_discovery_rules(fake_package):
    found = discover(fake_package)
    assert set(found) == {"goodname", "broken"}
    assert found["goodname"].help == "a test benchmark"
    assert "module_that_does_not_exist_xyz" in found["broken"].error
    with pytest.raises(errors.NotSupported, match="module_that_does_not_exist_xyz"):
        found["broken"].run(argparse.Namespace())


def test_discovered_benchmark_runs_with_json(fake_package, monkeypatch, tmp_path, capsys):
    monkeypatch.setattr(slash.bench, "discover", lambda: discover(fake_package))
    out = tmp_path / "sub" / "r.json"
    assert cli.main(["bench", "goodname", "--n", "3", "--json", str(out)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines == ["goodname: i=0 value=0", "goodname: i=1 value=1.5", "goodname: i=2 value=3"]
    written = json.loads(out.read_text())
    assert written.pop("recorded").keys() >= {"date", "commit", "load", "machine", "command"}
    assert written == {"runs": [{"i": i, "value": i * 1.5} for i in range(3)]}


def _fake_bench(exc):
    def run(args):
        raise exc

    mod = type(sys)("fake_failing_bench")
    mod.NAME, mod.HELP, mod.add_arguments, mod.run = "failing", "fails", lambda p: None, run
    return {"failing": slash.bench.Benchmark("failing", "fails", mod.__name__, mod)}


@pytest.mark.parametrize("exc, code", [
    (errors.UnknownName("unknown widget \"x\""), 2),
    (errors.InvalidArgument("credits must be positive"), 2),
    (errors.PeerDisconnected("the producer went away"), 1),
    (errors.Timeout("no answer within 5 s"), 1),
])
def test_expected_errors_exit_codes_without_traceback(monkeypatch, capsys, exc, code):
    monkeypatch.setattr(slash.bench, "discover", lambda: _fake_bench(exc))
    assert cli.main(["bench", "failing"]) == code
    err = capsys.readouterr().err
    assert err == f"slash: error: {exc}\n"


def test_bench_without_name_is_usage_error(capsys):
    assert cli.main(["bench"]) == 2
    assert "channel" in capsys.readouterr().err


def test_unknown_option_is_usage_error(capsys):
    assert cli.main(["bench", "channel", "--no-such-option"]) == 2
    assert "--no-such-option" in capsys.readouterr().err


def test_unknown_transport_exits_2_with_clear_message():
    r = _run_cli("bench", "channel", "--transport", "carrier-pigeon", "--seconds", "0.1")
    assert r.returncode == 2
    assert r.stderr.startswith("slash: error: ")
    assert "carrier-pigeon" in r.stderr and "Traceback" not in r.stderr


def test_bad_buffer_size_exits_2():
    r = _run_cli("bench", "channel", "--buffer-size", "1000", "--seconds", "0.1")
    assert r.returncode == 2, r.stderr
    assert "1000" in r.stderr and "Traceback" not in r.stderr


def test_bench_channel_json_end_to_end(tmp_path):
    out = tmp_path / "channel.json"
    r = _run_cli("bench", "channel", "--transport", "shm", "--buffer-size", "16K", "--credits", "4",
                 "--seconds", "0.3", "--json", str(out))
    assert r.returncode == 0, r.stderr
    res = json.loads(out.read_text())
    for key in ("throughput_gbps", "baseline_gbps", "ratio", "p50_us", "p99_us",
                "transport", "buffer_size", "credits", "seconds"):
        assert key in res, key
    assert (res["transport"], res["buffer_size"], res["credits"], res["seconds"]) == ("shm", 16384, 4, 0.3)
    assert r.stdout.count("\n") == 1 and r.stdout.startswith("channel shm 16384 B x 4 credits")


def test_doctor_json_is_valid():
    r = _run_cli("doctor", "--json")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["transports"]["shm"]["available"] is True


def test_importing_configures_no_logging():
    code = ("import logging, slash.cli, slash.cli.doctor, slash.bench.channel; "
            "print(len(logging.getLogger().handlers), logging.getLogger().level)")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, cwd="/")
    assert r.stdout.split() == ["0", "30"]  # no handlers, root level still WARNING


@pytest.mark.parametrize("given,kept", [(None, "1"), ("4", "4")])
def test_the_command_runs_numpy_with_one_blas_thread_unless_the_user_chose(given, kept):
    env = {k: v for k, v in os.environ.items() if k != "OPENBLAS_NUM_THREADS"}
    if given is not None:
        env["OPENBLAS_NUM_THREADS"] = given
    code = ("import os, sys; from slash.cli import main; main(['--version']); "
            "import numpy; print(os.environ['OPENBLAS_NUM_THREADS'])")
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip().splitlines()[-1] == kept
