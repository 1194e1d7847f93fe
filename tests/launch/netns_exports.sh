#!/usr/bin/env bash
# shardrun across two real hosts (network namespaces, netns_lib.sh): each of the 2 x 2
# ranks sees torchrun's variables for its place (RANK, WORLD_SIZE, LOCAL_RANK,
# LOCAL_WORLD_SIZE, NODE_RANK), runs on the host of its node, and gets its node's
# CKPTD_SOCKET. Both launch shapes:
#   rendezvous  shardrun on each host, --nnodes 2 --node-rank I --master-addr; node 0's
#               CKPTD_SOCKET has %n (expanded per node), node 1's is its own literal
#               path; a rank's failure ends both nodes' shardrun with the same status
#   hostfile    one shardrun --hostfile on host A starts both hosts, node ranks in the
#               file's order (B first), its CKPTD_SOCKET %h expanded on each host
# With CKPTD_SOCKET, each rank gets CKPTD_NODES: the node count (one ckptd per node),
# or the launcher's own value (here 1: as if one daemon served both).
#   netns_exports.sh SHARDRUN
set -uo pipefail
shardrun=$1
export NETNS_TIMEOUT=120
here=$(cd "$(dirname "$0")" && pwd)
source "$here/netns_lib.sh"
netns_start exports
port=29411
# Each rank prints one line of what it sees; the rank named by FAIL_RANK exits 3.
cat >"$work/show" <<'EOF'
#!/bin/sh
echo "rank=$RANK world=$WORLD_SIZE local=$LOCAL_RANK local_world=$LOCAL_WORLD_SIZE node=$NODE_RANK host=$(hostname) socket=${CKPTD_SOCKET-unset} daemons=${CKPTD_NODES-unset}"
[ "$RANK" != "${FAIL_RANK:-}" ] || exit 3
EOF
chmod +x "$work/show"

# check LOG EXPECTED...: LOG holds exactly the EXPECTED lines, in any order.
check() {
    local log=$1
    shift
    printf '%s\n' "$@" | sort >"$work/want"
    grep '^rank=' "$log" | sort >"$work/got"
    diff -u "$work/want" "$work/got" >"$work/diff" && return 0
    echo "FAILED: the ranks' variables ($log):"; cat "$work/diff"; cat "$log"; exit 1
}

# rendezvous LOG0 LOG1 [ENV...]: node 0 on A, node 1 on B; sets rc0, rc1.
rendezvous() {
    local log0=$1 log1=$2
    shift 2
    local j=(--nproc-per-node 2 --nnodes 2 --master-addr "${NETNS_ADDRS[0]}"
             --master-port "$port" --join-timeout 60)
    netns_on "$A" env "$@" CKPTD_SOCKET="$work/ckptd-%n.sock" "$shardrun" "${j[@]}" \
        --node-rank 0 "$work/show" >"$log0" 2>&1 &
    local m=$!
    netns_on "$B" env "$@" CKPTD_SOCKET=/run/node-b/ckptd.sock "$shardrun" "${j[@]}" \
        --node-rank 1 "$work/show" >"$log1" 2>&1
    rc1=$?
    wait "$m"
    rc0=$?
}

rendezvous "$work/r0.log" "$work/r1.log"
[ "$rc0" -eq 0 ] && [ "$rc1" -eq 0 ] ||
    { echo "FAILED: rendezvous exits $rc0 (node 0), $rc1 (node 1)"; cat "$work"/r?.log; exit 1; }
check "$work/r0.log" \
    "rank=0 world=4 local=0 local_world=2 node=0 host=$A socket=$work/ckptd-0.sock daemons=2" \
    "rank=1 world=4 local=1 local_world=2 node=0 host=$A socket=$work/ckptd-0.sock daemons=2" \
    "rank=2 world=4 local=0 local_world=2 node=1 host=$B socket=/run/node-b/ckptd.sock daemons=2" \
    "rank=3 world=4 local=1 local_world=2 node=1 host=$B socket=/run/node-b/ckptd.sock daemons=2"
grep -q "node 1 ($B) joined" "$work/r1.log" ||
    { echo "FAILED: node 1 did not say it joined"; cat "$work/r1.log"; exit 1; }

port=$((port + 1))
rendezvous "$work/f0.log" "$work/f1.log" FAIL_RANK=3
[ "$rc0" -ne 0 ] && [ "$rc0" -eq "$rc1" ] ||
    { echo "FAILED: rank 3 exited 3, but the nodes' shardrun exit $rc0 and $rc1"
      cat "$work"/f?.log; exit 1; }

printf '%s slots=2\n%s\n' "$B" "$A" >"$work/hosts"
CKPTD_SOCKET="$work/%h.sock" CKPTD_NODES=1 netns_on "$A" "$shardrun" --nproc-per-node 2 \
    --hostfile "$work/hosts" "$work/show" >"$work/h.log" 2>&1 ||
    { echo "FAILED: --hostfile run"; cat "$work/h.log"; exit 1; }
check "$work/h.log" \
    "rank=0 world=4 local=0 local_world=2 node=0 host=$B socket=$work/$B.sock daemons=1" \
    "rank=1 world=4 local=1 local_world=2 node=0 host=$B socket=$work/$B.sock daemons=1" \
    "rank=2 world=4 local=0 local_world=2 node=1 host=$A socket=$work/$A.sock daemons=1" \
    "rank=3 world=4 local=1 local_world=2 node=1 host=$A socket=$work/$A.sock daemons=1"
echo "ok: 2 hosts x 2 ranks, by rendezvous and by host file: every rank's RANK, WORLD_SIZE," \
     "LOCAL_RANK, LOCAL_WORLD_SIZE, NODE_RANK, host and CKPTD_SOCKET as expected; a failed" \
     "rank ends both nodes' shardrun with exit $rc0"
