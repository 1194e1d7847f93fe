#!/usr/bin/env bash
# A rank that loses a peer ends instead of waiting for it. 4 ranks of shard-train
# (2x2, a save every 2 steps); once a checkpoint is committed, rank 1 gets SIGKILL.
# mpirun runs with --enable-recovery (as the MCA variable), so it does not tear the
# job down itself, as srun without --kill-on-bad-exit would not: only the ranks' own
# watchdog can end it. Within 10 s every rank must have ended, none with status 0,
# a survivor must have named rank 1 as dead, no checkpoint may appear afterwards,
# and the root holds only committed checkpoints that deep-verify, and debris.
#   peer_killed.sh embedded|daemon SHARDRUN SHARD_TRAIN CKPT_VERIFY CKPTD
set -euo pipefail
. "$(dirname "$0")/root_lib.sh"
mode=$1 shardrun=$2 train=$3 verify=$4 ckptd=$5
data=/usr/share/common-licenses/GPL-3
[ -r "$data" ] || { echo "skip: no corpus at $data (Debian's base-files)"; exit 77; }
command -v setsid >/dev/null || { echo "skip: no setsid (util-linux)"; exit 77; }
work=$(mktemp -d "${TMPDIR:-/var/tmp}/peer-killed.XXXXXX")
launcher= daemon_pid= trainers=
cleanup() {
    [ -z "$launcher" ] || kill -9 -- "-$launcher" 2>/dev/null || true
    for p in $trainers; do kill -9 "$p" 2>/dev/null || true; done
    [ -z "$daemon_pid" ] || { kill "$daemon_pid" 2>/dev/null; wait "$daemon_pid" 2>/dev/null; } || true
    rm -rf "$work"
}
trap cleanup EXIT
export OPENBLAS_NUM_THREADS=1 OMPI_MCA_orte_enable_recovery=1
mkdir -p "$work/ck"
save=()
if [ "$mode" = daemon ]; then
    "$ckptd" --root "$work/ck" --foreground --log "$work/ckptd.log" &
    daemon_pid=$!
    for _ in $(seq 100); do [ -S "$work/ck/.ckptd.sock" ] && break; sleep 0.05; done
    save=(--daemon "$work/ck/.ckptd.sock")
fi

# Each rank's exit status lands in status.RANK (a rank the job's abort killed has none).
setsid "$shardrun" --nproc-per-node 4 bash -c '"$@"; echo $? >"'"$work"'/status.$RANK"' rank \
    "$train" --data "$data" --layers 1 --dim 16 --heads 2 --seq 16 --batch 4 --mesh 2x2 \
    --steps 1000000 --ckpt-root "$work/ck" --ckpt-every 2 --keep-last 3 "${save[@]}" \
    >"$work/run.log" 2>&1 &
launcher=$!
committed() { find "$work/ck" -mindepth 1 -maxdepth 1 -name 'step-*' 2>/dev/null | sort; }
for _ in $(seq 1200); do [ -n "$(committed)" ] && break; sleep 0.1; done
[ -n "$(committed)" ] || { echo "FAILED: no checkpoint within 120 s"; cat "$work/run.log"; exit 1; }

# The trainers are the children of the 4 bash wrappers; rank 1's is the victim.
for _ in $(seq 100); do
    trainers= victim=
    for w in $(pgrep -P "$launcher"); do
        t=$(pgrep -P "$w") || continue
        trainers="$trainers $t"
        [ "$(tr '\0' '\n' <"/proc/$t/environ" | grep -x 'RANK=1')" ] && victim=$t
    done
    [ "$(echo $trainers | wc -w)" -eq 4 ] && [ -n "$victim" ] && break
    sleep 0.1
done
[ -n "$victim" ] || { echo "FAILED: cannot find rank 1's shard-train among: $trainers"; exit 1; }
kill -9 "$victim"
alive=
for _ in $(seq 100); do
    alive=
    for p in $trainers; do kill -0 "$p" 2>/dev/null && alive="$alive $p"; done
    [ -z "$alive" ] && break
    sleep 0.1
done
[ -z "$alive" ] || { echo "FAILED: ranks$alive still run 10 s after rank 1 (pid $victim) died"
                     cat "$work/run.log"; exit 1; }
wait "$launcher" 2>/dev/null || true
launcher=
grep -q "rank 1 (pid $victim, on this host) has died" "$work/run.log" ||
    { echo "FAILED: no rank said that rank 1 died"; cat "$work/run.log"; exit 1; }
for f in "$work"/status.*; do
    [ -e "$f" ] || continue
    [ "$(cat "$f")" != 0 ] || { echo "FAILED: $(basename "$f") is 0: a rank went on as if nothing happened"; exit 1; }
done
before=$(committed)
sleep 2
[ "$(committed)" = "$before" ] || { echo "FAILED: checkpoints appeared after the ranks died"; exit 1; }
if [ -n "$daemon_pid" ]; then
    kill "$daemon_pid"
    wait "$daemon_pid" || { echo "FAILED: ckptd did not stop cleanly"; cat "$work/ckptd.log"; exit 1; }
    daemon_pid=
fi
n=$(check_root "$work/ck" "$verify") || { echo "$n"; exit 1; }
echo "ok ($mode): rank 1 killed; the other ranks ended (statuses: $(cat "$work"/status.* | tr '\n' ' ')); the root holds $n committed checkpoint(s) that verify, and debris"
