#!/usr/bin/env bash
# Ranks die with their launcher, across two real hosts (network namespaces,
# netns_lib.sh). 2 nodes x 2 ranks of sleep (not an MPI program: only the kernel's
# parent-death signal and shardrun can end it), started by rendezvous:
#   1. SIGKILL to node 0's shardrun (the process alone): within 10 s no rank lives on
#      either host, and node 1's shardrun ends, saying the master went away;
#   2. SIGKILL to node 1's shardrun: node 0 stops the job, naming node 1, and exits 1;
#      within 10 s no rank lives on either host.
#   netns_launcher_killed.sh SHARDRUN
set -uo pipefail
shardrun=$1
here=$(cd "$(dirname "$0")" && pwd)
source "$here/netns_lib.sh"
export NETNS_TIMEOUT=120
netns_start killed

on_hosts() {   # on_hosts COMM HOST...: the pids of the processes named COMM there
    local comm=$1 h p
    shift
    for h in "$@"; do
        for p in $(netns_alive "$h"); do
            [ "$(cat "/proc/$p/comm" 2>/dev/null)" = "$comm" ] && echo "$p"
        done
    done
}
sleepers() { on_hosts sleep "$A" "$B"; }   # the ranks

# start PORT: node 0 on A and node 1 on B; sets n0 and n1 (their shells).
start() {
    local j=(--nproc-per-node 2 --nnodes 2 --master-addr "${NETNS_ADDRS[0]}"
             --master-port "$1" --join-timeout 60)
    netns_on "$A" "$shardrun" "${j[@]}" --node-rank 0 sleep 600 >"$work/n0.log" 2>&1 &
    n0=$!
    netns_on "$B" "$shardrun" "${j[@]}" --node-rank 1 sleep 600 >"$work/n1.log" 2>&1 &
    n1=$!
    for _ in $(seq 300); do [ "$(sleepers | wc -l)" -eq 4 ] && return 0; sleep 0.1; done
    echo "FAILED: 4 ranks did not start"; cat "$work"/n?.log; exit 1
}

# all_gone WHAT: fails unless every rank ends within 10 s.
all_gone() {
    local alive
    for _ in $(seq 100); do
        alive=$(sleepers | tr '\n' ' ')
        [ -z "$alive" ] && return 0
        sleep 0.1
    done
    echo "FAILED: ranks $alive outlived $1 by 10 s"; cat "$work"/n?.log; exit 1
}

start 29421
kill -9 $(on_hosts shardrun "$A")
all_gone "node 0's shardrun"
wait "$n1"
rc1=$?
[ "$rc1" -ne 0 ] && grep -q "node 1: the master at .* went away" "$work/n1.log" ||
    { echo "FAILED: node 1's shardrun exited $rc1 after node 0's died"; cat "$work/n1.log"; exit 1; }

start 29422
kill -9 $(on_hosts shardrun "$B")
all_gone "node 1's shardrun"
wait "$n0"
rc0=$?
[ "$rc0" -eq 1 ] && grep -q "node 1 ($B) went away: stopping the job" "$work/n0.log" ||
    { echo "FAILED: node 0's shardrun exited $rc0 after node 1's died"; cat "$work/n0.log"; exit 1; }
echo "ok: 2 x 2 ranks on two hosts ended within 10 s of a SIGKILL to node 0's shardrun and" \
     "to node 1's; the other node's shardrun said why and failed"
