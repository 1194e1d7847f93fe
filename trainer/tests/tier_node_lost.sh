#!/usr/bin/env bash
# A node lost under a tiered save (issue 31): four ckptd on loopback (n0..n3), each with
# a local tier, one durable root, --replicas 2 (cliques {n0, n1}, {n2, n3}); shard-train
# on a 2x2 mesh, rank r saving through node nr's daemon (a wrapper picks CKPTD_SOCKET by
# rank, as each node's ranks find their node's daemon), every 2 steps at commit level
# replicated, every 4th replicated save drained to the durable root (--drain-every 4:
# step 8), killed (SIGKILL) after step 10. Then node n1 is lost: its daemon killed, its
# local tier deleted, and a replacement n1 starts on an empty disk. The run resumes
# through the daemons from step 10, the newest checkpoint (newer than the newest
# durable one, step 8; nothing of step 10 is in the durable root), rank 1's part
# fetched from n0's replica, and steps 11-14 have exactly the losses of an
# uninterrupted run.
# MODE hosts does it all on four real hosts (network namespaces joined by a bridge,
# tests/launch/netns_lib.sh; skipped, 77, without the privilege): node ni's daemon on
# host i, its peer service on that host's address, and every run started by
# rendezvous, one rank per host, saving through its own host's daemon; n0 then serves
# n1's part to host 1's address.
# MODE clique (on loopback) loses both nodes of the clique {n0, n1} instead (daemons
# killed, local tiers deleted, replacements empty): rank 0's and rank 1's parts of step
# 10 have no copy left, so the run falls back to step 8, the newest durable checkpoint,
# naming step 10's files that were lost, and steps 9-14 have exactly the losses
# of an uninterrupted run.
#   tier_node_lost.sh SHARDRUN SHARD_TRAIN CKPTD [loopback|hosts|clique]
set -euo pipefail
shardrun=$1 train=$2 ckptd=$3 mode=${4:-loopback}
here=$(cd "$(dirname "$0")" && pwd)
data=/usr/share/common-licenses/GPL-3
[ -r "$data" ] || { echo "skip: no corpus at $data (Debian's base-files)"; exit 77; }
work=$(mktemp -d "${TMPDIR:-/var/tmp}/tier-node-lost.XXXXXX")
declare -A pid
# Each daemon gets SIGTERM, and 30 s to exit before SIGKILL: a test that failed ends
# with what it said, not at meson's timeout behind a daemon that does not stop.
cleanup() {
    local p
    for p in "${pid[@]}"; do kill "$p" 2>/dev/null || true; done
    for p in "${pid[@]}"; do
        for _ in $(seq 300); do kill -0 "$p" 2>/dev/null || break; sleep 0.1; done
        kill -9 "$p" 2>/dev/null || true
        wait "$p" 2>/dev/null || true
    done
    rm -rf "$work"
}
trap cleanup EXIT
export OPENBLAS_NUM_THREADS=1 UCX_TLS=tcp
listen=(127.0.0.1 127.0.0.1 127.0.0.1 127.0.0.1)
case $mode in
loopback|clique) ;;
hosts)
    . "$here/../../tests/launch/netns_lib.sh"
    export NETNS_TIMEOUT=120
    NETNS_N=4
    netns_setup "$work"
    # The daemons first, by SIGTERM as on loopback (each exits 0: set -e holds in the
    # trap), then whatever is left on the hosts, and the hosts.
    trap 'cleanup; netns_cleanup' EXIT
    listen=("${NETNS_ADDRS[@]}")
    port=29470 ;;
*) echo "usage: tier_node_lost.sh SHARDRUN SHARD_TRAIN CKPTD [loopback|hosts|clique]"; exit 2 ;;
esac
model=(--data "$data" --layers 2 --dim 32 --heads 2 --seq 32 --batch 12 --lr 3e-3 --warmup 4)
losses() { awk '$1 == "step" && $3 == "loss" { print $2, $4 }' "$@"; }
# The reason is said again after the logs: a harness that keeps only the tail keeps it.
fail() {
    echo "FAILED: $*"
    for f in "$work"/*.log; do echo "== $f"; tail -20 "$f"; done
    echo "FAILED: $*"
    exit 1
}

daemon() {   # daemon I: ckptd nI, its local tier, its peer service (on host I)
    local at=()
    [ "$mode" != hosts ] || at=("$work/on-${NETNS_HOSTS[$1]}")
    rm -f "$work/ck/.ckptd.n$1.peer"
    mkdir -p "$work/n$1.local"
    "${at[@]}" "$ckptd" --root "$work/ck" --id "n$1" --local-root "$work/n$1.local" \
        --peer-listen "${listen[$1]}:0" --socket "$work/n$1.sock" --replicas 2 --peer-timeout 10 \
        --drain-every 4 --part-timeout 60 --foreground --log "$work/ckptd-n$1.log" &
    pid[n$1]=$!
    for _ in $(seq 200); do [ -s "$work/ck/.ckptd.n$1.peer" ] && return 0; sleep 0.05; done
    fail "ckptd n$1 did not start"
}
mkdir -p "$work/ck"
for i in 0 1 2 3; do daemon "$i"; done
printf '%s\n' '#!/bin/sh' \
    "CKPTD_NODES=4 CKPTD_SOCKET=$work/n\${OMPI_COMM_WORLD_RANK:-0}.sock exec \"\$@\"" \
    >"$work/node-socket"
chmod +x "$work/node-socket"

# job LOG DAEMONS [shard-train options...]: the 2x2 run of 14 steps, its output in LOG;
# with DAEMONS = yes, rank r saves through node nr's daemon (on host r: shardrun
# expands %n to the node's rank).
job() {
    local log=$1 d=$2 st=0 wrap=()
    shift 2
    if [ "$mode" = hosts ]; then
        port=$((port + 1))
        [ "$d" = no ] || export CKPTD_SOCKET="$work/n%n.sock"
        netns_launch "$shardrun" "$port" 1 "$log" "$train" "${model[@]}" --mesh 2x2 --steps 14 "$@"
        netns_wait || st=$?
        unset CKPTD_SOCKET
        cat "$log".* >"$log"
        return "$st"
    fi
    [ "$d" = no ] || wrap=("$work/node-socket")
    "$shardrun" --nproc-per-node 4 "${wrap[@]}" "$train" "${model[@]}" --mesh 2x2 --steps 14 \
        "$@" >"$log" 2>&1
}
job "$work/straight.log" no || fail "the straight run"
job "$work/killed.log" yes --ckpt-root "$work/ck" --ckpt-every 2 --commit-level replicated \
    --kill-at-step 10 && fail "the run was not killed"
grep -q "kill-at-step 10: saved step-00000010" "$work/killed.log" || fail "no step 10 before the kill"
# The drain runs in the background, on the save's first node (rank 0's). The daemon says
# so just after the rename that makes step 8 visible: wait for its word, not the directory.
said8() { grep -q "drain of step-00000008: committed in the durable root" "$work"/ckptd-n*.log; }
for _ in $(seq 300); do said8 && break; sleep 0.1; done
said8 || fail "no daemon says it drained step 8, the 4th replicated save"
[ -e "$work/ck/step-00000008" ] || fail "a daemon says step 8 was drained; the durable root lacks it"
for s in 00000002 00000004 00000006 00000010; do
    [ ! -e "$work/ck/step-$s" ] || fail "step-$s reached the durable root"
done
[ -d "$work/n0.local/.replicas/n1/step-00000010" ] || fail "n1's part of step 10 is not on n0"

lose() {     # lose I: node nI lost with its disk, an empty replacement started
    kill -9 "${pid[n$1]}"
    wait "${pid[n$1]}" 2>/dev/null || true
    unset "pid[n$1]"
    rm -rf "$work/n$1.local"
    daemon "$1"
}
# compare FROM: the resumed run's losses after step FROM are the straight run's.
compare() {
    losses "$work/straight.log" | awk -v s="$1" '$1 > s' >"$work/want"
    losses "$work/resumed.log" >"$work/got"
    [ "$(wc -l <"$work/want")" -eq $((14 - $1)) ] || fail "the straight run's log"
    diff -u "$work/want" "$work/got" || fail "steps $(($1 + 1))-14 after the loss differ from the straight run"
}
resume() {
    job "$work/resumed.log" yes --ckpt-root "$work/ck" --ckpt-every 2 --commit-level replicated \
        --resume || fail "the resume after $1"
}

if [ "$mode" = clique ]; then
    lose 0
    lose 1
    resume "n0 and n1 were lost"
    grep -q "resumed from step-00000008" "$work/resumed.log" || fail "did not fall back to step 8"
    # The replacements hold no copy of step 10: the names come from a live peer's copy.
    grep -qE "restore: step-00000010 \(step 10\): rank-00000\.dat, rank-00001\.dat have no live copy; restoring step-00000008 \(step 8\) from .*the durable tier" \
        "$work/resumed.log" || fail "the fallback does not say what was lost"
    for d in "$work"/n0.local/.fetched/* "$work"/n1.local/.fetched/*; do
        [ ! -e "$d/step-00000010" ] || fail "the manifest fetched to name the lost files is left in $d"
    done
    compare 8
    echo "ok: the clique {n0, n1} lost with its disks after step 10; fell back to the" \
         "durable step 8, saying why; steps 9-14 identical"
    exit 0
fi
lose 1
resume "n1 was lost"
grep -q "resumed from step-00000010" "$work/resumed.log" || fail "did not resume from step 10"
grep -q "FETCH of step-00000010: .*from the copy of ckptd n1 at ckptd n0" "$work/ckptd-n1.log" ||
    fail "the replacement n1 did not fetch its part from n0's replica"
[ "$mode" != hosts ] ||
    grep -qE "peer ${listen[1]//./\\.}:[0-9]+ \(ckptd n1\): GET of step-00000010: (sent|hung up with all)" \
        "$work/ckptd-n0.log" || fail "n0 on host 0 did not serve step 10 to host 1's address"
compare 10
echo "ok ($mode): step 8 drained; n1 lost with its disk after step 10; resumed from the replicas," \
     "steps 11-14 identical"
