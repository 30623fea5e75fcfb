#!/usr/bin/env bash
# Runs pytest files against an AddressSanitizer/UndefinedBehaviorSanitizer
# build of the extension: the C core and bindings compiled with
# -fsanitize=address,undefined into build/asan-ext/, the package's Python
# files beside it, libasan preloaded into the (uninstrumented) interpreter and
# every executor process it spawns. Leak checking is off (CPython keeps its
# allocations to the end); any heap error or undefined behaviour aborts.
# Usage: scripts/asan-pytest.sh TEST_FILE... [pytest args]
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
OUT="$ROOT/build/asan-ext"
PY="${PYTHON:-python3}"
log() { printf '\033[1m[asan-pytest]\033[0m %s\n' "$*" >&2; }
SAN="-fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined"
mkdir -p "$OUT"
log "building the extension with ASan/UBSan into $OUT"
# -O1, as the sanitizers' docs advise: the build takes less than half the time of -O3's
(cd "$ROOT" && SLASH_OPT=-O1 CFLAGS="$SAN" LDFLAGS="$SAN" "$PY" setup.py -q build_ext \
    --build-lib "$OUT/lib" --build-temp "$OUT/tmp" >/dev/null 2>&1) || {
    (cd "$ROOT" && SLASH_OPT=-O1 CFLAGS="$SAN" LDFLAGS="$SAN" "$PY" setup.py -q build_ext \
        --build-lib "$OUT/lib" --build-temp "$OUT/tmp"); exit 1; }
rm -rf "$OUT/pkg" && mkdir -p "$OUT/pkg"
cp -r "$ROOT/python/slash" "$OUT/pkg/"
cp "$OUT"/lib/slash/_core*.so "$OUT/pkg/slash/"
LIBASAN="$(${CC:-gcc} -print-file-name=libasan.so)"
log "pytest $* against it (LD_PRELOAD=$LIBASAN)"
cd "$ROOT/tests"
PYTHONPATH="$OUT/pkg" LD_PRELOAD="$LIBASAN" \
ASAN_OPTIONS="detect_leaks=0:abort_on_error=1:allocator_may_return_null=1" \
UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1" \
    "$PY" -m pytest -q -p no:cacheprovider "$@"
