#!/usr/bin/env bash
# Checks the ways Slash installs, as a new user would, on a fresh clone of the
# committed tree with a given Python (default: Debian's own /usr/bin/python3,
# which refuses a system-wide pip, PEP 668):
#   1. scripts/install.sh makes and uses a virtual environment;
#   2. `python -m build` makes an sdist and builds the wheel from it (in an
#      isolated environment, as pip builds an sdist);
#   3. that wheel installs into a fresh virtual environment and passes a smoke
#      test (a two-executor query checked against a count made in Python, and
#      the `slash` command). Installing the sdist with pip would compile the
#      same sources the same way a third time.
# 1 and 2 run side by side, each on a clone of its own: a build's time is
# mostly the compile of the one Cython module, on one core.
# Usage: scripts/check-install.sh [PYTHON]
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PY="${1:-/usr/bin/python3}"
log() { printf '\033[1m[check-install]\033[0m %s\n' "$*" >&2; }
[ -x "$PY" ] || { log "no $PY here: nothing to check"; exit 0; }
tmp="$(mktemp -d)"
trap 'kill ${build_pid:-} 2>/dev/null || true; rm -rf "$tmp"' EXIT
git clone -q "$ROOT" "$tmp/src"

cat > "$tmp/smoke.py" <<'PY'
import pyarrow as pa
from slash.query import Query
from slash.runner import run

if __name__ == "__main__":  # executors are spawned processes: they import this file
    t = pa.table({"t": [1, 2, 15_000, None], "k": [7, None, 7, 7]})
    out = run(Query(time="t", window="tumbling:10s", key="k"), t, executors=2)
    got = sorted(zip(out["window_start"].to_pylist(), out["k"].to_pylist(),
                     out["count"].to_pylist()), key=repr)
    want = sorted([(0, 7, 1), (0, None, 1), (10_000, 7, 1)], key=repr)
    assert got == want, (got, want)
    print("smoke test passed:", got)
PY

smoke() {  # $1: a venv's python
    (cd "$tmp" && "$1" smoke.py)
    "$(dirname "$1")/slash" --version
}

log "python -m build: the sdist, and the wheel built from it (in the background)"
git clone -q "$ROOT" "$tmp/src-build"
( "$PY" -m venv "$tmp/venv-build" &&
  "$tmp/venv-build/bin/pip" install -q --disable-pip-version-check build &&
  cd "$tmp/src-build" && "$tmp/venv-build/bin/python" -m build -q --outdir "$tmp/dist" ) \
    >"$tmp/build.log" 2>&1 &
build_pid=$!

log "install.sh with $PY ($("$PY" --version)) on a fresh clone"
(cd "$tmp/src" && env -u VIRTUAL_ENV -u CONDA_PREFIX PYTHON="$PY" SLASH_VENV="$tmp/venv-install" \
    bash -c 'source scripts/install.sh && slash_install ""')
smoke "$tmp/venv-install/bin/python3"

wait "$build_pid" || { cat "$tmp/build.log" >&2; log "python -m build failed"; exit 1; }
ls "$tmp/dist" >&2
ls "$tmp"/dist/*.tar.gz >/dev/null
log "pip install the wheel into a fresh virtual environment"
"$PY" -m venv "$tmp/venv-whl"
"$tmp/venv-whl/bin/pip" install -q --disable-pip-version-check "$tmp"/dist/*.whl
smoke "$tmp/venv-whl/bin/python3"
log "all install paths work with $PY"
