#!/usr/bin/env bash
# Resolves the Apache Kafka broker's jars (tests/kafka/pom.xml) from Maven
# Central into a cache directory, once: prints that directory. The Kafka tests
# (tests/kafka_broker.py) start a single-node KRaft broker from it.
#   SLASH_KAFKA_JARS  the directory (default ~/.cache/slash/kafka-<version>)
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
pom="$root/tests/kafka/pom.xml"
version="$(sed -n 's:.*<kafka.version>\(.*\)</kafka.version>.*:\1:p' "$pom")"
dir="${SLASH_KAFKA_JARS:-${XDG_CACHE_HOME:-$HOME/.cache}/slash/kafka-$version}"
stamp="$dir/.resolved-$(sha256sum "$pom" | cut -c1-16)"
if [ ! -e "$stamp" ]; then
    rm -rf "$dir.tmp"
    mvn -q -B -f "$pom" dependency:copy-dependencies -DincludeScope=runtime \
        -DoutputDirectory="$dir.tmp" >&2
    rm -rf "$dir"
    mv "$dir.tmp" "$dir"
    touch "$dir/$(basename "$stamp")"
fi
echo "$dir"
