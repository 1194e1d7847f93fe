#!/usr/bin/env bash
# Retention per tier (ckptd --keep-local K, --keep-durable M; decision 0182):
#   - n0 (--keep-local 2 --keep-durable 1) holds its own parts and n1's replicas of
#     step-4..16 and a fetched copy of step-4: at start it keeps the copies of the 2
#     newest checkpoints (step-12, step-16) in every root of its local tier, removes
#     the others, and drops the fetched root it emptied;
#   - in the durable root it keeps the newest step-<N> (step-8) and removes the older
#     ones, and never touches what no run of its made (best-model, ft-3);
#   - a link planted in .replicas, leading to a root outside, is never followed: the
#     checkpoint there stays;
#   - a save committed through n0 (step-20, into its local tier) runs a pass: the local
#     tier keeps step-16 and step-20; drained to the durable root, step-20 is kept
#     there by the pass after the drain's commit, and step-8 goes;
#   - n1 without --keep-local removes only a fetched copy older than the newest
#     durable checkpoint (step-4), keeping the newer one (step-12) and its own copies;
#   - --keep-local without a local tier, or a count that is no number, is refused.
. "$(dirname "$0")/replica_lib.sh"
SHARED=$WORK/durable
TRUTH=$WORK/truth

for s in 4 8 12 16; do
    synth "$TRUTH" "step-$s" --mesh 2 --placements 'S(0)' --step "$s" --seed "$s"
done
for s in 2 4 8; do
    synth "$SHARED" "step-$s" --mesh 2 --placements 'S(0)' --step "$s" --seed "$s"
done
synth "$SHARED" best-model --mesh 2 --placements 'S(0)' --step 1
synth "$SHARED" ft-3 --mesh 2 --placements 'S(0)' --step 3
synth "$WORK/outside" step-1 --mesh 2 --placements 'S(0)' --step 1

# copy ROOT NAME SOURCE FILE: a partial copy of TRUTH's NAME in ROOT.
copy() {
    mkdir -p "$1"
    run "$COPY_PARTIAL" "$TRUTH" "$2" "$1" "$3" "$4"
    expect 0 "$3's part of $2 in $1"
}
for s in 4 8 12 16; do
    copy "$WORK/n0.local" "step-$s" n0 rank-00000.dat
    copy "$WORK/n0.local/.replicas/n1" "step-$s" n1 rank-00001.dat
    copy "$WORK/n1.local" "step-$s" n1 rank-00001.dat
done
copy "$WORK/n0.local/.fetched/1" step-4 n1 rank-00001.dat
copy "$WORK/n1.local/.fetched/1" step-4 n0 rank-00000.dat
copy "$WORK/n1.local/.fetched/2" step-12 n0 rank-00000.dat
ln -s "$WORK/outside" "$WORK/n0.local/.replicas/evil"

# passes ID N: waits until daemon ID's log says N retention passes are done.
passes() {
    for _ in $(seq 200); do
        [ "$(grep -c 'retention: pass done' "$WORK/$1.log")" -ge "$2" ] && return 0
        sleep 0.05
    done
    logged "$1" "retention: pass done" "retention pass $2 of ckptd $1"
    fail "ckptd $1 did only $(grep -c 'retention: pass done' "$WORK/$1.log") retention passes"
}
# only DIR NAMES...: the checkpoints in DIR are exactly NAMES.
only() {
    local dir=$1 got
    shift
    got=$(cd "$dir" && ls -d step-* best-model ft-3 2>/dev/null | sort | tr '\n' ' ')
    [ "$got" = "$* " ] || fail "$dir holds '$got', expected '$* '"
}

run "$CKPTD" --root "$SHARED" --keep-local 2 --foreground
expect 2 "--keep-local without --local-root"
said "--keep-local keeps a local tier's copies: it needs --local-root" "why"
run "$CKPTD" --root "$SHARED" --keep-durable -1 --foreground
expect 2 "--keep-durable -1"
said "--keep-durable -1: not a number" "why"
daemon n0 --keep-local 2 --keep-durable 1
daemon n1
passes n0 1
passes n1 1
only "$WORK/n0.local" step-12 step-16
only "$WORK/n0.local/.replicas/n1" step-12 step-16
[ ! -e "$WORK/n0.local/.fetched/1" ] || fail "the emptied fetched root stays: $(ls -A "$WORK/n0.local/.fetched/1")"
logged n0 "retention: removed step-4 \(step 4\) from $WORK/n0.local: the local tier keeps the 2 newest" \
    "the removal, named with its reason"
only "$SHARED" best-model ft-3 step-8
only "$WORK/outside" step-1
[ -L "$WORK/n0.local/.replicas/evil" ] || fail "the planted link was touched"
only "$WORK/n1.local" step-12 step-16 step-4 step-8
[ ! -e "$WORK/n1.local/.fetched/1" ] || fail "n1 kept a fetched copy older than the durable tier"
only "$WORK/n1.local/.fetched/2" step-12
logged n1 "retention: removed step-4 \(step 4\) from $WORK/n1.local/.fetched/1: a fetched copy older" \
    "the superseded fetched copy"

run "$CKPT_SYNTH" "$SHARED" --name step-20 --mesh 2 --placements 'S(0)' --tensors 3 \
    --bytes 4MiB --step 20 --world 2 --daemon "$WORK/n0.sock"
expect 0 "step-20 saved through n0"
passes n0 2
only "$WORK/n0.local" step-16 step-20
only "$SHARED" best-model ft-3 step-8
# A save through a daemon with a local tier commits there; the drain takes it to the
# durable root, and the pass after the drain's commit keeps it and removes step-8.
run "$CKPTCTL" drain --socket "$WORK/n0.sock" step-20
expect 0 "ckptctl drain step-20"
# The drain and the pass after its commit run in the background: the removal's log
# line (written once step-8 is gone) is awaited, 10 s at most, not a count of passes
# (the pass a save asks for may come before or after the drain's).
for _ in $(seq 200); do
    grep -q "retention: removed step-8 (step 8) from $SHARED:" "$WORK/n0.log" && break
    sleep 0.05
done
only "$SHARED" best-model ft-3 step-20
logged n0 "retention: removed step-8 \(step 8\) from $SHARED: the durable tier keeps the 1 newest" \
    "the durable removal after the drain's commit"
run "$CKPT_VERIFY" "$SHARED"
expect 0 "what the durable tier keeps verifies"
stop n0
stop n1
echo "PASS [$TEST_NAME]"
