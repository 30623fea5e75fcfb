#!/usr/bin/env bash
# Installs Slash with PySpark and runs the main job: a YSB-shaped Parquet
# dataset (RECORDS events, 100 campaigns), the 10 s tumbling count of views
# per campaign computed by slash.spark (one barrier stage of Slash executors,
# no shuffle) and by Spark's own groupBy(window(...), key), both handed the
# same DataFrame (spark.read.parquet of the files: a scan, which Slash's
# executors read themselves) in local[2]; checks the answers are equal and
# prints both throughputs and their ratio. Arguments go to `slash bench
# spark` (e.g. --keys 10000000).
set -euo pipefail
cd "$(dirname "$0")"
source scripts/install.sh
slash_install "pyspark pandas rich prometheus_client"
RECORDS="${RECORDS:-20000000}"
DATA="${SLASH_DATA_DIR:-${TMPDIR:-/tmp}/slash-ysb}"
mkdir -p bench/results "$DATA"
slash doctor
log "slash.spark against Spark's groupBy(window) on $RECORDS YSB records (data kept in $DATA)"
slash bench spark --records "$RECORDS" --keys 100 --data-dir "$DATA" --input dataframe \
    --json bench/results/spark.json "$@"
python3 - <<'EOF'
import json
res = json.load(open("bench/results/spark.json"))
for r in res["runs"]:
    print(f"slash.spark on a DataFrame ({'fast' if r['fast_path'] else 'general'} path) {r['slash_records_per_s'] / 1e6:.1f} M records/s, Spark {r['spark_records_per_s'] / 1e6:.1f} "
          f"M records/s: {r['ratio']:.2f}x, medians {r['median_ratio']:.2f}x ({r['keys']:,} keys, {r['dist']}); answers "
          f"{'equal' if r['verified'] else 'DIFFER'}")
raise SystemExit(0 if res["all_verified"] else 1)
EOF
