#!/usr/bin/env bash
# rxe-bench.sh - the ofi:verbs channel beside perftest (ib_write_bw,
# ib_write_lat) on the soft-RoCE device of the guest (scripts/rxe-guest.sh),
# as ratios labelled "software CPU, soft-RoCE": bench/rxe_perftest.py run in
# the guest, its JSON kept in bench/results/rxe_perftest.json with this
# checkout's commit and the host's load before and after.
#
# Usage: scripts/rxe-bench.sh [bench/rxe_perftest.py options, e.g. --rounds 3]
# Exit status: bench/rxe_perftest.py's, or rxe-guest.sh's (124 timed out,
# 125 the guest failed, 126 this machine cannot run the guest).
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=bench/results/rxe_perftest.json

if ! command -v ib_write_bw >/dev/null 2>&1; then
    sudo=""
    [ "$(id -u)" = 0 ] || sudo="sudo -n"
    echo "rxe-bench.sh: apt-get install perftest" >&2
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends perftest >/dev/null ||
        { echo "rxe-bench.sh: cannot install perftest (ib_write_bw, ib_write_lat)" >&2; exit 126; }
fi

load_before=$(cut -d' ' -f1-3 /proc/loadavg)
scripts/rxe-guest.sh --timeout "${SLASH_BENCH_TIMEOUT:-1200}" -- \
    python3 bench/rxe_perftest.py --out "$OUT.part" "$@"
rc=$?
load_after=$(cut -d' ' -f1-3 /proc/loadavg)
[ $rc -eq 0 ] || { rm -f "$OUT.part"; exit $rc; }
python3 - "$OUT.part" "$OUT" "$(git rev-parse --short HEAD)" "$load_before" "$load_after" <<'PY'
import json, sys
part, out, commit, before, after = sys.argv[1:]
with open(part) as f:
    doc = json.load(f)
doc.update(commit=commit, host_load_before=before, host_load_after=after)
with open(out, "w") as f:
    json.dump(doc, f, indent=1)
    f.write("\n")
PY
rm -f "$OUT.part"
echo "rxe-bench.sh: $OUT (host load $load_before before, $load_after after)" >&2
