#!/usr/bin/env bash
# rxe-two-hosts.sh - a group of executors split across two hosts over a
# real RDMA device: two soft-RoCE guests (scripts/rxe-guest.sh) on one
# virtual network (QEMU socket networking: guest 0 listens, guest 1
# connects; eth0 10.0.2.15 and 10.0.2.16, each with its own rxe0).
#
# No launcher of the project places a rank on another host, so each guest
# starts its own rank (tests/two_hosts_executor.py), as a Spark task does;
# the ranks find each other through a directory of the checkout both guests
# share (each writes its listener's address there and reads the other's).
#
# Two checks, on one pair of guests (a guest's Python start costs about a
# minute of its software CPU: one start per guest serves both):
#   answer      rank 0 in guest 0 and rank 1 in guest 1 each push their
#               share of a seeded input over ofi:verbs; the windows both
#               wrote must be DuckDB's answer over the whole input.
#   lost-host   then the same two processes form a new group and push an
#               endless paced input; once both joined, guest 1 is killed (its
#               QEMU); rank 0 must report the group failed naming rank 1,
#               after the kill and within the peer timeout
#               (SLASH_TWO_HOSTS_PEER_TIMEOUT s, default 30, and 15 s of slack).
# "answer" or "lost-host" alone runs that check on a pair of its own.
#
# Usage: scripts/rxe-two-hosts.sh [answer|lost-host|all]    (default all: both)
# Exit status: 0 passed, or not runnable here (then it says why, in a line
# starting "two-host suite NOT RUN:"; SLASH_REQUIRE_VERBS=1 makes that a
# failure, 3); 1 a check failed; 124/125 as rxe-guest.sh (a guest timed out
# after SLASH_TWO_HOSTS_TIMEOUT s, default 900 / a guest failed).
# The guests' CPUs are emulated (~5-20x slower): this proves function only.
set -uo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
WHAT=${1:-all}
PY=${PYTHON:-python3}
# --verbose: a guest's log keeps its kernel's messages, shown when it fails
GUEST=(scripts/rxe-guest.sh --cpus 1 --mem 3072 --timeout "${SLASH_TWO_HOSTS_TIMEOUT:-900}" --verbose)
# GroupConfig.timeout of the ranks: a lost host is reported within it
PEER_TIMEOUT=${SLASH_TWO_HOSTS_PEER_TIMEOUT:-30}
log() { echo "rxe-two-hosts.sh: $*" >&2; }

if ! why=$(scripts/rxe-guest.sh --check 2>&1); then
    echo "two-host suite NOT RUN: ${why#rxe-guest.sh: }" >&2
    [ "${SLASH_REQUIRE_VERBS:-0}" = 1 ] && exit 3
    exit 0
fi
scripts/rxe-guest.sh --prepare >/dev/null || exit $?

free_port() { "$PY" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }

# starts guest $1 running rank $1 of 2 in mode $3 over rendezvous dir $2, netdev $4;
# its output goes to $2/guest.$1.log; sets STARTED to the rxe-guest.sh pid
start_guest() {
    "${GUEST[@]}" --index "$1" --net "$4" --cwd "$ROOT/tests" -- \
        python3 two_hosts_executor.py "$1" 2 "$2" ofi:verbs "$3" "$PEER_TIMEOUT" \
        >"$2/guest.$1.log" 2>&1 &
    STARTED=$!
}

# both guests on one network: 0 listens on a TCP port of this host, 1 connects to it
start_pair() { # $1 dir, $2 mode; sets P0 P1
    local port
    port=$(free_port)
    start_guest 0 "$1" "$2" "socket,listen=127.0.0.1:$port"
    P0=$STARTED
    local i=0
    until "$PY" -c "import socket,sys; socket.create_connection(('127.0.0.1', $port), 1).close()" 2>/dev/null; do
        i=$((i + 1)); [ $i -lt 100 ] || { log "guest 0's network did not listen"; return 125; }
        sleep 0.2
    done
    start_guest 1 "$1" "$2" "socket,connect=127.0.0.1:$port"
    P1=$STARTED
}

# waits for both guests; once one has failed, the other (waiting for its
# peer) is stopped at once; sets RC0 and RC1
wait_pair() {
    RC0=""; RC1=""
    while [ -z "$RC0" ] || [ -z "$RC1" ]; do
        if [ -z "$RC0" ] && ! kill -0 "$P0" 2>/dev/null; then wait "$P0"; RC0=$?; fi
        if [ -z "$RC1" ] && ! kill -0 "$P1" 2>/dev/null; then wait "$P1"; RC1=$?; fi
        if [ "${RC0:-0}" != 0 ] && [ -z "$RC1" ]; then kill -TERM "$P1"; wait "$P1"; RC1=$?; fi
        if [ "${RC1:-0}" != 0 ] && [ -z "$RC0" ]; then kill -TERM "$P0"; wait "$P0"; RC0=$?; fi
        sleep 0.5
    done
}

show_logs() { for f in "$1"/guest.*.log; do echo "--- $f"; tail -n 30 "$f"; done >&2; }

# after wait_pair: 0 when both guests exited 0; else shows the logs and returns
# a guest's 124/125 (rxe-guest.sh: timed out / failed) or 1
pair_status() { # $1 dir, $2 what
    [ "$RC0" = 0 ] && [ "$RC1" = 0 ] && return 0
    log "$2: guest 0 exit $RC0, guest 1 exit $RC1"
    show_logs "$1"
    [ "$RC0" -ge 124 ] && return "$RC0"
    [ "$RC1" -ge 124 ] && return "$RC1"
    return 1
}

# waits until the files $2 (names in dir $1) all exist while both guests run:
# 1 when a guest stopped first or after $3 s
await_files() { # $1 dir, $2 "name ...", $3 seconds
    local f t_end=$(($(date +%s) + $3))
    while :; do
        for f in $2; do [ -f "$1/$f" ] || break; done
        [ -f "$1/$f" ] && return 0  # (the loop ran through: $f is the last, there)
        if [ "$(date +%s)" -ge $t_end ] || ! kill -0 "$P0" 2>/dev/null || ! kill -0 "$P1" 2>/dev/null; then
            return 1
        fi
        sleep 0.2
    done
}

# the windows both ranks wrote to $1 against DuckDB's over the whole input
check_answer() {
    (cd tests && "$PY" - "$1" <<'EOF'
import sys
import duckdb
import pyarrow as pa
import pyarrow.parquet as pq
from two_hosts_executor import table

d = sys.argv[1]
got = pa.concat_tables([pq.read_table(f"{d}/result.{r}.parquet") for r in range(2)])
t = table()
want = duckdb.sql("SELECT time // 2000 * 2000, key, count(*), sum(x) FROM t GROUP BY ALL "
                  "ORDER BY ALL").fetchall()
have = sorted(zip(got["window_start"].to_pylist(), got["key"].to_pylist(),
                  got["count"].to_pylist(), got["sum_x"].to_pylist()))
print(f"two hosts over ofi:verbs: {len(have)} windows x keys, DuckDB {len(want)}:",
      "same" if have == [tuple(w) for w in want] else "DIFFERENT")
sys.exit(0 if have == [tuple(w) for w in want] else 1)
EOF
    )
}

stop_pair() { kill -TERM "$P0" "$P1" 2>/dev/null; wait_pair; }

# once both ranks joined the group in $2 (dir $1 or a directory in it), guest 1
# is killed; rank 0 must report the loss naming rank 1: after the kill (no
# report before it) and within the peer timeout (and 15 s of slack: the host
# sees the report's file appear; the software CPU is slow)
kill_and_check_report() { # $1 dir, $2 the group's dir
    local t_kill t_err msg
    if ! await_files "$2" "joined.0 joined.1" "${SLASH_TWO_HOSTS_TIMEOUT:-900}"; then
        log "lost-host: the group did not form"
        stop_pair; show_logs "$1"; return 1
    fi
    sleep 5  # a few epochs over verbs
    if [ -f "$2/error.0" ] || [ -f "$2/error.1" ]; then
        log "lost-host: a failure was reported before any host was killed: $(cat "$2"/error.*)"
        stop_pair; show_logs "$1"; return 1
    fi
    kill -TERM "$P1"  # rxe-guest.sh kills its QEMU: the host is gone, no FIN, no close
    t_kill=$(date +%s)
    wait "$P1" 2>/dev/null
    until [ -f "$2/error.0" ] || [ $(($(date +%s) - t_kill)) -gt $((PEER_TIMEOUT + 60)) ]; do
        sleep 0.2
    done
    t_err=$(date +%s)
    msg=$(cat "$2/error.0" 2>/dev/null)
    kill -TERM "$P0" 2>/dev/null; wait "$P0" 2>/dev/null
    log "lost-host: rank 0 reported $((t_err - t_kill)) s after the kill (peer timeout $PEER_TIMEOUT s): ${msg:-nothing}"
    if [ -z "$msg" ] || [ $((t_err - t_kill)) -gt $((PEER_TIMEOUT + 15)) ]; then
        show_logs "$1"; return 1
    fi
    case "$msg" in
        *"rank 1"*) return 0 ;;
        *) log "lost-host: the report does not name rank 1"; show_logs "$1"; return 1 ;;
    esac
}

new_dir() { mkdir -p "$ROOT/build" && mktemp -d "$ROOT/build/two-hosts.XXXXXX"; }

run_answer() {
    local d rc
    d=$(new_dir) || return 1
    start_pair "$d" answer || return $?
    wait_pair
    pair_status "$d" answer || return $?
    check_answer "$d"; rc=$?
    [ $rc -eq 0 ] && rm -rf "$d" || show_logs "$d"
    return $rc
}

run_lost_host() {
    local d rc
    d=$(new_dir) || return 1
    start_pair "$d" until-lost || return $?
    kill_and_check_report "$d" "$d"; rc=$?
    [ $rc -eq 0 ] && rm -rf "$d"
    return $rc
}

# both checks on one pair of guests: the answer's group in $d, then the lost
# host's in $d/lost, formed by the same two processes
run_both() {
    local d rc
    d=$(new_dir) || return 1
    start_pair "$d" answer,until-lost || return $?
    if ! await_files "$d" "result.0.parquet result.1.parquet" "${SLASH_TWO_HOSTS_TIMEOUT:-900}"; then
        log "answer: the ranks wrote no result"
        stop_pair; pair_status "$d" answer || return $?
        show_logs "$d"; return 1
    fi
    if ! check_answer "$d"; then
        stop_pair; show_logs "$d"; return 1
    fi
    kill_and_check_report "$d" "$d/lost"; rc=$?
    [ $rc -eq 0 ] && rm -rf "$d"
    return $rc
}

rc=0
case "$WHAT" in
    answer) run_answer; rc=$? ;;
    lost-host) run_lost_host; rc=$? ;;
    all) run_both; rc=$? ;;
    *) log "usage: $0 [answer|lost-host|all]"; exit 2 ;;
esac
log "$WHAT: exit $rc"
exit $rc
