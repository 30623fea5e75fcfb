#!/usr/bin/env bash
# Stops the cluster start-cluster.sh started (by its recorded process ids).
set -euo pipefail
exec python3 "$(dirname "$0")/cluster.py" stop "$@"
