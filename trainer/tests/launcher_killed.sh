#!/usr/bin/env bash
# Ranks die with their launcher. shardrun (mpirun underneath) runs under setsid, and
# its process group gets SIGKILL (the ranks are in process groups of their own, as
# OpenMPI makes them); within 10 s no rank may live. Twice:
#  1. 4 ranks of a program that is not an MPI program (sleep): nothing in it notices
#     that mpirun is gone, so only the kernel's parent-death signal ends it;
#  2. 4 ranks of shard-train saving every 2 steps, killed once a checkpoint is
#     committed: no checkpoint may appear afterwards, and the root holds only
#     committed checkpoints that deep-verify, the catalog, and .pending debris.
#   launcher_killed.sh SHARDRUN SHARD_TRAIN CKPT_VERIFY
set -euo pipefail
. "$(dirname "$0")/root_lib.sh"
shardrun=$1 train=$2 verify=$3
data=/usr/share/common-licenses/GPL-3
[ -r "$data" ] || { echo "skip: no corpus at $data (Debian's base-files)"; exit 77; }
command -v setsid >/dev/null || { echo "skip: no setsid (util-linux)"; exit 77; }
work=$(mktemp -d "${TMPDIR:-/var/tmp}/launcher-killed.XXXXXX")
launcher= ranks=
cleanup() {
    [ -z "$launcher" ] || kill -9 -- "-$launcher" 2>/dev/null || true
    for p in $ranks; do kill -9 "$p" 2>/dev/null || true; done
    rm -rf "$work"
}
trap cleanup EXIT
export OPENBLAS_NUM_THREADS=1

# kill_launcher: SIGKILL to the launcher's group; fails unless its ranks end in 10 s.
kill_launcher() {
    ranks=$(pgrep -P "$launcher" | tr '\n' ' ')
    [ "$(echo $ranks | wc -w)" -eq 4 ] || { echo "FAILED: expected 4 ranks under mpirun, found: $ranks"; exit 1; }
    kill -9 -- "-$launcher"
    wait "$launcher" 2>/dev/null || true
    launcher=
    local alive=
    for _ in $(seq 100); do
        alive=
        for p in $ranks; do kill -0 "$p" 2>/dev/null && alive="$alive $p"; done
        [ -z "$alive" ] && return 0
        sleep 0.1
    done
    echo "FAILED: ranks$alive ($1) outlived their launcher by 10 s"
    exit 1
}

setsid "$shardrun" --nproc-per-node 4 sleep 600 >"$work/sleep.log" 2>&1 &
launcher=$!
for _ in $(seq 100); do [ "$(pgrep -P "$launcher" | wc -l)" -eq 4 ] && break; sleep 0.1; done
kill_launcher "sleep"

setsid "$shardrun" --nproc-per-node 4 "$train" --data "$data" --layers 1 --dim 16 \
    --heads 2 --seq 16 --batch 4 --mesh 2x2 --steps 1000000 --ckpt-root "$work/ck" \
    --ckpt-every 2 --keep-last 3 >"$work/run.log" 2>&1 &
launcher=$!
committed() { find "$work/ck" -mindepth 1 -maxdepth 1 -name 'step-*' 2>/dev/null | sort; }
for _ in $(seq 1200); do [ -n "$(committed)" ] && break; sleep 0.1; done
[ -n "$(committed)" ] || { echo "FAILED: no checkpoint within 120 s"; cat "$work/run.log"; exit 1; }
kill_launcher "shard-train"
before=$(committed)
sleep 2
[ "$(committed)" = "$before" ] || { echo "FAILED: checkpoints appeared after the ranks died"; exit 1; }
n=$(check_root "$work/ck" "$verify") || { echo "$n"; exit 1; }
echo "ok: 4 ranks of sleep and 4 of shard-train ended with their SIGKILLed launcher; the root holds $n committed checkpoint(s) that verify, and debris"
