#!/usr/bin/env bash
# Installs Slash and runs the main job on the embedded default (shared-memory
# transport on this machine): the channel benchmark, side by side with a plain
# shared-memory copy between two processes. Arguments go to `slash bench channel`.
set -euo pipefail
cd "$(dirname "$0")"
source scripts/install.sh
slash_install "matplotlib rich duckdb"
mkdir -p bench/results
slash doctor
slash bench channel --transport shm --buffer-size 65536 --credits 8 --seconds 3 \
    --json bench/results/channel-shm.json "$@"
