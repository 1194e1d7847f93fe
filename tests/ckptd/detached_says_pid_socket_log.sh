#!/usr/bin/env bash
# A ckptd that detaches (the default) says where it is before its starter's command
# returns: its pid (that of the live daemon, the one its lock names), its socket and
# its log, default or --log.
#   detached_says_pid_socket_log.sh CKPTD
set -uo pipefail
ckptd=$1
root=$(mktemp -d "${TMPDIR:-/var/tmp}/ck-detached-says.XXXXXX")
pids=()
cleanup() { for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null; done; rm -rf "$root"; }
trap cleanup EXIT
fail() { echo "FAILED: $*"; exit 1; }
mkdir "$root/a" "$root/b"
for run in a b; do
    args=(--root "$root/$run")
    log=$root/$run/.ckptd.log
    if [ $run = b ]; then log=$root/b.log; args+=(--log "$log"); fi
    out=$("$ckptd" "${args[@]}") || fail "ckptd did not start: $out"
    pid=$(sed -n 's/^ckptd: detached: pid \([0-9]*\), .*/\1/p' <<<"$out")
    [ -n "$pid" ] || fail "no pid in what ckptd said: '$out'"
    pids+=("$pid")
    grep -qF "socket $root/$run/.ckptd.sock, log $log" <<<"$out" ||
        fail "ckptd said '$out', wanted its socket $root/$run/.ckptd.sock and log $log"
    kill -0 "$pid" 2>/dev/null || fail "pid $pid is not alive"
    [ -S "$root/$run/.ckptd.sock" ] || fail "no socket at $root/$run/.ckptd.sock"
    # The lock names the daemon's own pid once it noted it (soon after detaching).
    for _ in $(seq 100); do
        grep -q "^pid $pid on " "$root/$run"/.ckptd.*.lock 2>/dev/null && break
        sleep 0.1
    done
    grep -q "^pid $pid on " "$root/$run"/.ckptd.*.lock || fail "the lock names another pid"
    kill -TERM "$pid"
    for _ in $(seq 300); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -0 "$pid" 2>/dev/null && fail "ckptd $pid still runs 30 s after SIGTERM"
    grep -q "ckptd: exit 0" "$log" || fail "$log does not hold the daemon's log"
    echo "$run: $out"
done
echo "ok: a detached ckptd says its pid, socket and log"
