#!/usr/bin/env bash
# scripts/fuzz.sh [SECONDS] - builds the libFuzzer targets (tests/fuzz/) with
# clang into build/fuzz and runs each for SECONDS (default 20) over its seed
# corpus tests/fuzz/corpus/<target>/ (new inputs go to build/fuzz/corpus_<target>/,
# the committed seeds are never changed). Installs clang with apt-get when it is
# missing (root, Debian). Prints executions and time per target; exits non-zero
# when a target crashes (the input is saved as build/fuzz/crash-<target>-*).
#
# SLASH_FUZZ_JOBS (default: the number of cores) targets run at once.
#
# SLASH_FUZZ_SEED (default 1) fixes libFuzzer's random seed, so a run is the
# same sequence of inputs every time and a slower machine only runs a prefix
# of what a faster one ran: ./test.sh stays reproducible. SLASH_FUZZ_SEED=0
# lets libFuzzer pick a fresh seed (exploration: run that for longer by hand,
# and commit every crash it finds under tests/fuzz/regressions/<target>/).
set -euo pipefail
SECONDS_PER_TARGET="${1:-20}"
SEED="${SLASH_FUZZ_SEED:-1}"
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
BUILD="$ROOT/build/fuzz"
TARGETS=(fuzz_merge_delta fuzz_sync_msg fuzz_ckpt_read fuzz_pq_decode)

if ! command -v clang >/dev/null 2>&1; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "fuzz.sh: installing clang with apt-get"
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq clang >/dev/null
  else
    echo "fuzz.sh: clang is not installed (and cannot be installed: not root on Debian)" >&2
    exit 2
  fi
fi

CC=clang cmake -S "$ROOT" -B "$BUILD" -DSLASH_FUZZ=ON -DSLASH_WITH_OFI=OFF \
  -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build "$BUILD" -j2 --target "${TARGETS[@]}" >/dev/null

# one target per core at a time: each is a single process, so each still runs
# SECONDS on a core of its own, and the stage takes SECONDS x targets / cores
JOBS="${SLASH_FUZZ_JOBS:-$(nproc)}"

run_target() {  # $1: target; writes its line (ok or CRASH) to $BUILD/$1.result
  local t="$1" work="$BUILD/corpus_$1" log="$BUILD/$1.log" start end result execs
  mkdir -p "$work"
  start=$(date +%s)
  if (cd "$BUILD" && ASAN_OPTIONS=allocator_may_return_null=1 "./$t" -max_total_time="$SECONDS_PER_TARGET" -seed="$SEED" -print_final_stats=1 \
        -artifact_prefix="$BUILD/crash-$t-" "$work" "$ROOT/tests/fuzz/corpus/$t") >"$log" 2>&1; then
    result=ok
  else
    result=CRASH
  fi
  end=$(date +%s)
  execs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" | grep -o '[0-9]*$' || echo "?")
  echo "$t: $result, $execs executions in $((end - start)) s" > "$BUILD/$t.result"
}

status=0
for t in "${TARGETS[@]}"; do
  while [ "$(jobs -rp | wc -l)" -ge "$JOBS" ]; do wait -n || true; done
  rm -f "$BUILD/$t.result"
  run_target "$t" &
done
wait
for t in "${TARGETS[@]}"; do
  cat "$BUILD/$t.result" 2>/dev/null || echo "$t: did not finish"
  if ! grep -qs ': ok,' "$BUILD/$t.result"; then
    status=1
    { grep -E 'ERROR|SUMMARY|runtime error|Test unit written' "$BUILD/$t.log" || true; } | head -20 >&2
  fi
done
exit $status
