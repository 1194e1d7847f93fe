#!/usr/bin/env bash
# One node's ckptd dies under a training job on two real hosts (network namespaces,
# tests/launch/netns_lib.sh): the job ends with the same error on every rank, not a
# hang, and the next run saves once that daemon is back.
# shard-train, 2 hosts x 2 ranks, one ckptd per host on one root (ids node0, node1),
# saves every 2 steps, stopping at the first failed one (--max-failed-saves 1); SIGKILL
# to host B's ckptd once step-00000002 is committed.
#  - every rank prints "checkpoint step-N failed: ..." with one and the same reason,
#    and both nodes' shardrun fail (the verdict is rank 0's, shared with every rank:
#    rank 0 stopping alone left the others in the next step's collectives);
#  - step-00000002 deep-verifies, and nothing but committed checkpoints, the catalog,
#    the daemons' files and .pending debris is in the root;
#  - with host B's ckptd started again, the run resumed on both hosts commits its
#    next save.
#   netns_daemon_dies.sh SHARDRUN SHARD_TRAIN CKPT_VERIFY CKPTD
set -uo pipefail
shardrun=$1 train=$2 verify=$3 ckptd=$4
here=$(cd "$(dirname "$0")" && pwd)
source "$here/../../tests/launch/netns_lib.sh"
data=/usr/share/common-licenses/GPL-3
[ -r "$data" ] || { echo "skip: no corpus at $data (Debian's base-files)"; exit 77; }
export NETNS_TIMEOUT=240 OPENBLAS_NUM_THREADS=1
netns_start daemon
mkdir -p "$work/ck"
daemon_args=(--part-timeout 20 --dead-after 3)
netns_ckptd 0 "$ckptd" "$work/ck" "$work" "${daemon_args[@]}"
netns_ckptd 1 "$ckptd" "$work/ck" "$work" "${daemon_args[@]}"
export CKPTD_SOCKET="$work/ckptd-%n.sock"
# --max-failed-saves 1: the run stops at its first failed save (by default it goes on).
model=(--data "$data" --layers 1 --dim 32 --heads 2 --seq 32 --batch 8 --mesh 2x2
       --ckpt-root "$work/ck" --ckpt-every 2 --max-failed-saves 1)

netns_launch "$shardrun" 29461 2 "$work/run.log" "$train" "${model[@]}" --steps 1000000
for _ in $(seq 1200); do [ -d "$work/ck/step-00000002" ] && break; sleep 0.1; done
[ -d "$work/ck/step-00000002" ] || { echo "FAILED: no step 2"; cat "$work"/run.log.*; exit 1; }
daemon_b=
for p in $(netns_alive "$B"); do [ "$(cat "/proc/$p/comm" 2>/dev/null)" = ckptd ] && daemon_b=$p; done
[ -n "$daemon_b" ] || { echo "FAILED: no ckptd on $B"; exit 1; }
kill -9 "$daemon_b"
netns_wait
rc=$?
[ "$rc" -ne 0 ] && [ "$rc" -ne 124 ] && [ "$NETNS_RC1" -eq "$rc" ] ||
    { echo "FAILED: the nodes' shardrun exited $rc and $NETNS_RC1 (124: hung until the test's bound)"
      cat "$work"/run.log.*; exit 1; }
said=$(sed -n 's/^shard-train: rank [0-3]: \(checkpoint step-[0-9]* failed: .*\)/\1/p' "$work/run.log.0" | sort | uniq -c)
[ "$(echo "$said" | wc -l)" -eq 1 ] && [ "$(echo "$said" | awk '{ print $1 }')" -eq 4 ] ||
    { echo "FAILED: the 4 ranks did not all say the one reason:"; echo "$said"; cat "$work"/run.log.*; exit 1; }
"$verify" --deep "$work/ck" step-00000002 >"$work/verify.log" 2>&1 ||
    { echo "FAILED: step-00000002 does not verify"; cat "$work/verify.log"; exit 1; }
for d in "$work"/ck/* "$work"/ck/.[!.]*; do
    name=$(basename "$d")
    case $name in
    catalog.mdb|catalog.mdb-lock|.pending|.ckptd.*) ;;
    step-*) "$verify" --deep "$work/ck" "$name" >/dev/null ||
                { echo "FAILED: $name is visible but does not verify"; exit 1; } ;;
    *) echo "FAILED: unexpected $name in the root"; ls -la "$work/ck"; exit 1 ;;
    esac
done
wait "${NETNS_DAEMONS[1]}" 2>/dev/null
netns_ckptd 1 "$ckptd" "$work/ck" "$work" "${daemon_args[@]}"
last=$(find "$work/ck" -mindepth 1 -maxdepth 1 -name 'step-*' | sort | tail -1)
last=$((10#${last##*step-}))
netns_launch "$shardrun" 29462 2 "$work/resumed.log" "$train" "${model[@]}" --resume \
    --steps "$((last + 2))"
netns_wait || { echo "FAILED: the run resumed with host B's ckptd back"; cat "$work"/resumed.log.*; exit 1; }
next=$(printf 'step-%08d' "$((last + 2))")
grep -q "saved $next" "$work/resumed.log.0" && "$verify" --deep "$work/ck" "$next" >/dev/null ||
    { echo "FAILED: $next was not committed after host B's ckptd came back"; cat "$work"/resumed.log.*; exit 1; }
echo "ok: host B's ckptd killed mid-run: all 4 ranks stopped with the one reason," \
     "the root holds only committed checkpoints that verify; with it back, $next committed"
echo "$said" | sed 's/^ *4 /every rank: /'
