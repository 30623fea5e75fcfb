#!/usr/bin/env bash
# Starts a Spark standalone cluster on 127.0.0.1 from the pip-installed pyspark
# (Master + WORKERS workers of CORES cores) and prints its master URL.
# Stop it with spark_integration/stop-cluster.sh.
set -euo pipefail
exec python3 "$(dirname "$0")/cluster.py" start --workers "${WORKERS:-2}" --cores "${CORES:-1}" "$@"
