#!/usr/bin/env bash
# Installs what Slash needs on a fresh Debian machine, then builds and installs
# the package. Sourced by run.sh and test.sh; safe to run again (each step is
# skipped when already done). Set SLASH_SKIP_INSTALL=1 to skip everything.
set -euo pipefail

SLASH_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PYTHON="${PYTHON:-python3}"

log() { printf '\033[1m[slash]\033[0m %s\n' "$*" >&2; }

need_apt() {
    local missing=()
    for p in "$@"; do
        dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p")
    done
    if ((${#missing[@]})); then
        log "apt-get install ${missing[*]}"
        local sudo=""
        [ "$(id -u)" = 0 ] || sudo="sudo"
        $sudo apt-get update -qq
        DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${missing[@]}" >/dev/null
    fi
}

install_system() {
    # compiler, libfabric (the ofi transport), iproute2 (namespace tests), a JRE (Spark)
    need_apt build-essential libfabric-dev libfabric-bin iproute2 openjdk-17-jre-headless
}

install_python() {
    local extras="$1"
    log "pip install build tools and $extras dependencies"
    "$PYTHON" -m pip install -q --disable-pip-version-check \
        "setuptools>=61" wheel "Cython>=3.0" "cmake>=3.16" numpy "pyarrow>=12" $extras
}

build_package() {
    log "building and installing slash (C core + bindings)"
    (cd "$SLASH_ROOT" && "$PYTHON" -m pip install -q --disable-pip-version-check \
        --no-build-isolation --no-deps --force-reinstall .)
}

slash_install() {
    local extras="${1:-}"
    if [ "${SLASH_SKIP_INSTALL:-0}" = 1 ]; then
        return
    fi
    install_system
    install_python "$extras"
    build_package
}
