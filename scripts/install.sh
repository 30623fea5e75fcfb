#!/usr/bin/env bash
# Installs what Slash needs on a fresh Debian machine, then builds and installs
# the package. Sourced by run.sh and test.sh; safe to run again (each step is
# skipped when already done). Set SLASH_SKIP_INSTALL=1 to skip everything.
#
# Python packages go into a virtual environment, since Debian's own python3
# refuses a system-wide pip (PEP 668): an active one ($VIRTUAL_ENV or a conda
# environment) is used as it is; otherwise .venv/ in the checkout, made on the
# first run and reused after (with --system-site-packages, so what the base
# interpreter already has is not downloaded again). Its bin/ goes first on
# PATH, so python3, slash and Spark's Python workers are the venv's.
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
    # compiler, Python headers and venv, libfabric (the ofi transport), librdkafka (the core's Kafka
    # reader), iproute2 (namespace tests), a JRE (Spark)
    need_apt build-essential python3-dev python3-venv libfabric-dev libfabric-bin librdkafka-dev iproute2 openjdk-17-jre-headless
}

use_venv() {
    if [ -n "${VIRTUAL_ENV:-}" ] || [ -n "${CONDA_PREFIX:-}" ]; then
        log "using the active Python environment ${VIRTUAL_ENV:-$CONDA_PREFIX}"
        return
    fi
    local venv="${SLASH_VENV:-$SLASH_ROOT/.venv}"
    if [ ! -x "$venv/bin/python3" ]; then
        log "creating a virtual environment in $venv"
        if ! "$PYTHON" -m venv --system-site-packages "$venv" 2>/dev/null; then
            rm -rf "$venv"
            need_apt python3-venv
            "$PYTHON" -m venv --system-site-packages "$venv"
        fi
    fi
    export VIRTUAL_ENV="$venv"
    export PATH="$venv/bin:$PATH"
    PYTHON="$venv/bin/python3"
}

install_python() {
    local extras="$1"
    log "pip install build tools and $extras dependencies"
    "$PYTHON" -m pip install -q --disable-pip-version-check \
        "setuptools>=61" wheel "Cython>=3.0" "cmake>=3.16" numpy "pyarrow>=12" $extras
}

install_kafka_broker() {
    # the Kafka tests' broker (slash.bench._kafka_broker, after build_package): Maven
    # resolves the Apache Kafka jars once into a cache; the JRE is install_system's
    [ "${SLASH_SKIP_INSTALL:-0}" = 1 ] && return
    command -v mvn >/dev/null 2>&1 || need_apt maven
    log "Kafka broker jars in $(cd / && "$PYTHON" -m slash.bench._kafka_broker)"
}

install_pyflink() {
    # PyFlink (apache-flink from PyPI) for the Flink benchmarks (slash bench
    # flink), in a venv of its own, never the project's: it pins its own numpy,
    # pyarrow and pandas. Then the jars PyFlink lacks (the Parquet format,
    # scripts/pyflink/pom.xml), resolved with Maven into its pyflink/lib. Made
    # once, reused after; prints the venv's python. Not part of slash_install
    # (a JVM runtime of some 400 MB).
    #   SLASH_PYFLINK_VENV  the venv (default ~/.cache/slash/pyflink-venv)
    local version=1.20.3  # wheels for CPython 3.8-3.11; runs on JDK 11 and 17
    local venv="${SLASH_PYFLINK_VENV:-${XDG_CACHE_HOME:-$HOME/.cache}/slash/pyflink-venv}"
    local pom="$SLASH_ROOT/scripts/pyflink/pom.xml"
    local stamp="$venv/.slash-pyflink-$version"
    local jars_stamp="$venv/.slash-jars-$(sha256sum "$pom" | cut -c1-16)"
    if [ ! -e "$stamp" ]; then
        command -v java >/dev/null 2>&1 || need_apt openjdk-17-jre-headless
        log "creating the PyFlink venv $venv (apache-flink==$version, once; a few minutes)"
        rm -rf "$venv"
        "${PYFLINK_PYTHON:-python3}" -m venv "$venv"
        "$venv/bin/python" -m pip install -q --disable-pip-version-check "apache-flink==$version" >&2
        touch "$stamp"
    fi
    if [ ! -e "$jars_stamp" ]; then
        command -v mvn >/dev/null 2>&1 || need_apt maven
        local lib
        lib="$("$venv/bin/python" -c 'import os, pyflink; print(os.path.join(os.path.dirname(pyflink.__file__), "lib"))')"
        log "resolving the Parquet format's jars into $lib (Maven, once)"
        rm -rf "$venv/jars.tmp"
        mvn -q -B -f "$pom" dependency:copy-dependencies -DincludeScope=runtime \
            -DoutputDirectory="$venv/jars.tmp" >&2
        rm -f "$venv"/.slash-jars-*
        [ -f "$venv/jars.list" ] && (cd "$lib" && xargs -r rm -f < "$venv/jars.list")
        (cd "$venv/jars.tmp" && ls) > "$venv/jars.list"
        mv "$venv"/jars.tmp/*.jar "$lib"/
        rm -rf "$venv/jars.tmp"
        touch "$jars_stamp"
    fi
    echo "$venv/bin/python"
}

build_jar() {
    # slash-spark.jar (spark_integration/, for slash.spark.jvm_export), compiled by Maven against
    # the jars of the venv's pyspark and put into the package (python/slash/jars/) for
    # build_package to ship; without pyspark there is nothing to compile against
    local -a props
    mapfile -t props < <("$PYTHON" "$SLASH_ROOT/spark_integration/pyspark_jars.py" || true)
    if ((${#props[@]} == 0)); then
        log "no pyspark: slash-spark.jar not built"
        return 0
    fi
    local jar="$SLASH_ROOT/python/slash/jars/slash-spark.jar" stamp
    stamp="$( (cd "$SLASH_ROOT/spark_integration" && cat pom.xml $(find src -type f | sort) &&
              printf '%s\n' "${props[@]}") | sha256sum | cut -c1-16)"
    [ -f "$jar" ] && [ "$(cat "$jar.stamp" 2>/dev/null)" = "$stamp" ] && return
    command -v mvn >/dev/null 2>&1 || need_apt maven
    command -v javac >/dev/null 2>&1 || need_apt openjdk-17-jdk-headless
    log "building slash-spark.jar with Maven"
    mvn -q -B -f "$SLASH_ROOT/spark_integration/pom.xml" package "${props[@]}" >&2
    mkdir -p "$(dirname "$jar")"
    cp "$SLASH_ROOT/spark_integration/target/slash-spark.jar" "$jar"
    echo "$stamp" > "$jar.stamp"
}

install_pyverbs() {
    # rdma-core's Python bindings (slash doctor reads RDMA devices, ports and
    # GIDs through them; tests/test_pyverbs_reference.py), from Debian's
    # python3-pyverbs: the PyPI sdist builds a whole rdma-core of its own.
    # Debian installs them for /usr/bin/python3; a venv of another interpreter
    # of the same ABI (e.g. pyenv's 3.11) gets a link to the one package.
    need_apt python3-pyverbs
    local deb=/usr/lib/python3/dist-packages/pyverbs
    "$PYTHON" -c "import pyverbs" 2>/dev/null && return
    [ -d "$deb" ] || return 0
    local soabi site
    soabi=$("$PYTHON" -c "import sysconfig; print(sysconfig.get_config_var('SOABI'))")
    if ! ls "$deb"/*."$soabi".so >/dev/null 2>&1; then
        log "python3-pyverbs is built for another Python than $PYTHON ($soabi): slash doctor reads sysfs"
        return 0
    fi
    site=$("$PYTHON" -c "import sysconfig; print(sysconfig.get_paths()['purelib'])")
    ln -sfn "$deb" "$site/pyverbs"
}

build_package() {
    log "building and installing slash (C core + bindings)"
    (cd "$SLASH_ROOT" && "$PYTHON" -m pip install -q --disable-pip-version-check \
        --no-build-isolation --no-deps --force-reinstall .)
}

slash_install() {
    local extras="${1:-}"
    if [ "${SLASH_SKIP_INSTALL:-0}" = 1 ]; then
        [ -x "$SLASH_ROOT/.venv/bin/python3" ] && [ -z "${VIRTUAL_ENV:-}" ] && \
            export VIRTUAL_ENV="$SLASH_ROOT/.venv" PATH="$SLASH_ROOT/.venv/bin:$PATH"
        return
    fi
    install_system
    use_venv
    install_python "$extras"
    install_pyverbs
    build_jar
    build_package
}
