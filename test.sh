#!/usr/bin/env bash
# Installs everything, builds, and runs the whole suite:
#   1. the C core's tests (ctest), warnings as errors;
#   2. the same C tests under AddressSanitizer + UndefinedBehaviorSanitizer;
#   3. pytest over the installed package.
# Extra arguments go to pytest (e.g. ./test.sh -k channel).
set -euo pipefail
cd "$(dirname "$0")"
source scripts/install.sh
slash_install "pytest hypothesis duckdb scipy pyspark pandas matplotlib rich"

JOBS=$(nproc)

log "C tests"
cmake -S . -B build/release -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build build/release -j"$JOBS" >/dev/null
ctest --test-dir build/release --output-on-failure

log "C tests under AddressSanitizer/UndefinedBehaviorSanitizer"
cmake -S . -B build/asan -DCMAKE_BUILD_TYPE=Debug -DSLASH_SANITIZE=ON >/dev/null
cmake --build build/asan -j"$JOBS" >/dev/null
SLASH_TEST_BUFFERS=100000 SLASH_TEST_SCALE=small \
ASAN_OPTIONS="${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1}" \
UBSAN_OPTIONS="${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}" \
    ctest --test-dir build/asan --output-on-failure

log "pytest"
# run from tests/ so `import slash` is the installed package, not the source tree
python3 -m pytest -q -p no:cacheprovider tests "$@"
