#!/usr/bin/env bash
# Installs everything, builds, and runs the whole suite:
#   1. the C core's tests (ctest), warnings as errors;
#   2. the same C tests under AddressSanitizer + UndefinedBehaviorSanitizer;
#   3. the libFuzzer targets for a bounded time (scripts/fuzz.sh; clang is
#      installed if missing; SLASH_FUZZ_SECONDS per target, default 20);
#   4. the install paths with Debian's own python3 on a fresh clone
#      (scripts/check-install.sh: install.sh's virtual environment, sdist, wheel);
#   5. pytest over the installed package, on every core (pytest-xdist), then
#      the tests marked quiet (they need the cores to themselves) alone;
#   6. the executor, channel, join and move tests once more against an ASan/UBSan
#      build of the extension (scripts/asan-pytest.sh, libasan preloaded).
#   7. the ofi:verbs transport and channel suites over soft-RoCE in a QEMU guest
#      (scripts/verbs-tests.sh; at most SLASH_VERBS_TIMEOUT s, default 1500; where
#      QEMU cannot be installed it prints "verbs suites NOT RUN:" and why), and
#      beside it a group split across two such guests on one virtual network, over
#      ofi:verbs (scripts/rxe-two-hosts.sh: DuckDB's answer, and a killed host named).
# Extra arguments go to pytest (e.g. ./test.sh -k channel).
set -euo pipefail
cd "$(dirname "$0")"
source scripts/install.sh
# each stage's log line carries the run's elapsed time and the previous stage's; a table at the end
# with each stage's share of the machine's CPU time busy (what running stages side by side could gain)
T0=$SECONDS T_STAGE=$SECONDS STAGE="" TABLE=""
mmss() { printf '%d:%02d' $(($1 / 60)) $(($1 % 60)); }
cpu_ticks() {  # "busy total" jiffies of all CPUs since boot (busy: all but idle and iowait)
    awk '/^cpu /{t=0; for (i=2;i<=NF;i++) t+=$i; print t-$5-$6, t}' /proc/stat 2>/dev/null || echo "0 0"
}
read -r B0 C0 <<<"$(cpu_ticks)"; B_STAGE=$B0 C_STAGE=$C0
busy() {  # CPU busy % between "busy total" $1 $2 and now
    local b c; read -r b c <<<"$(cpu_ticks)"
    [ "$c" -gt "$2" ] && echo "$(( 100 * (b - $1) / (c - $2) )) %" || echo "? %"
}
stage() {  # $1: the next stage's short name (the table's), $2: what it does
    local t=$((SECONDS - T_STAGE))
    [ -z "$STAGE" ] || TABLE+=$(printf '\n  %8s  %5s  %s' "$(mmss $t)" "$(busy $B_STAGE $C_STAGE)" "$STAGE")
    log "[$(mmss $((SECONDS - T0))) elapsed${STAGE:+; $STAGE took $(mmss $t)}] ${2:-$1}"
    STAGE=$1 T_STAGE=$SECONDS
    read -r B_STAGE C_STAGE <<<"$(cpu_ticks)"
    [ "$1" != end ] || TABLE+=$(printf '\n  %8s  %5s  %s' "$(mmss $((SECONDS - T0)))" "$(busy $B0 $C0)" "whole run")
}
trap 'stage end; log "stage times (m:s, CPU busy):$TABLE"' EXIT
stage install "installing what the suite needs, building the package"
slash_install "pytest pytest-timeout pytest-xdist hypothesis duckdb scipy pyspark pandas matplotlib rich prometheus_client confluent-kafka sphinx"
# Maven and the Apache Kafka jars for the Kafka tests' real broker (tests/test_kafka.py)
install_kafka_broker
# a real Prometheus server and a headless browser for the live-metrics tests (tests/test_metrics_live.py)
# (and clang for scripts/fuzz.sh, here before the guest's apt-get below starts)
[ "${SLASH_SKIP_INSTALL:-0}" = 1 ] || need_apt prometheus chromium clang
# the soft-RoCE guest's preparation (apt-get of QEMU, the kernel's download, the initramfs) is mostly
# waiting: it runs beside the C stages, and the verbs stage waits for it
[ "$#" != 0 ] || { mkdir -p build; scripts/rxe-guest.sh --prepare >build/rxe-prepare.log 2>&1 & }

JOBS=$(nproc)

stage ctest "C tests"
cmake -S . -B build/release -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build build/release -j"$JOBS" >/dev/null
ctest --test-dir build/release --output-on-failure -j"$JOBS"

stage ctest-asan "C tests under AddressSanitizer/UndefinedBehaviorSanitizer"
cmake -S . -B build/asan -DCMAKE_BUILD_TYPE=Debug -DSLASH_SANITIZE=ON >/dev/null
cmake --build build/asan -j"$JOBS" >/dev/null
SLASH_TEST_BUFFERS=100000 SLASH_TEST_SCALE=small \
ASAN_OPTIONS="${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1}" \
UBSAN_OPTIONS="${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}" \
    ctest --test-dir build/asan --output-on-failure -j"$JOBS"

stage fuzz "fuzzing: each target for ${SLASH_FUZZ_SECONDS:-20} s"
scripts/fuzz.sh "${SLASH_FUZZ_SECONDS:-20}"

stage check-install "install paths with Debian's python3 on a fresh clone"
scripts/check-install.sh /usr/bin/python3

pytest_stage() {  # none of "$@"'s tests in a stage (pytest's exit 5) is no failure
    python3 -m pytest -q -p no:cacheprovider "$@" || [ $? = 5 ]
}
stage pytest "pytest on every core (pytest-xdist, each module whole on one worker)"
# `import slash` is the installed package: python/ is not on the path
# (the slowest 30 listed at the end: where the stage's minutes go, in every CI log)
pytest_stage -n "$JOBS" --dist loadfile --no-loadscope-reorder -m "not quiet" --durations=30 tests "$@"
stage pytest-quiet "pytest: the tests marked quiet, one at a time"
pytest_stage -m quiet $(grep -l "mark.quiet" tests/test_*.py) "$@"  # (only their files collected)

if [ "$#" = 0 ]; then
    stage asan-pytest "executor, channel, join, partition-move (aggregate and join), int64-extremes and executors-on-threads and Parquet-reader tests against an ASan/UBSan build of the extension"
    # (the channel's many-laps run with 20 000 buffers: the bindings' buffer paths, each size many
    # times over; its million over shm is the plain stage's, and was 45 % of this stage's test time)
    SLASH_TEST_BUFFERS=20000 scripts/asan-pytest.sh test_executor.py test_channel.py test_join.py test_executor_join.py \
        test_leader_moves.py test_partial_pause.py test_join_moves.py test_time_extremes.py \
        test_in_process.py test_pq_read.py -m "not slow" -n "$JOBS" --dist loadfile
fi

if [ "$#" = 0 ]; then
    stage guests "soft-RoCE guests (software CPU): the ofi:verbs suites (scripts/verbs-tests.sh) beside a group split across two guests (scripts/rxe-two-hosts.sh)"
    wait; cat build/rxe-prepare.log >&2  # (a failure: verbs-tests.sh says why)
    # beside each other: each keeps about one core busy (one pytest process at a time in
    # the 2-CPU guest; two 1-CPU guests whose ranks wait on each other and on a peer timeout)
    scripts/rxe-two-hosts.sh all >build/rxe-two-hosts.log 2>&1 &
    two_hosts=$!
    verbs_rc=0; scripts/verbs-tests.sh build/release || verbs_rc=$?
    two_hosts_rc=0; wait $two_hosts || two_hosts_rc=$?
    cat build/rxe-two-hosts.log >&2
    [ $verbs_rc = 0 ] && [ $two_hosts_rc = 0 ]
fi
