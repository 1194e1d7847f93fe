#!/usr/bin/env bash
# ckpt-inspect ROOT --local DIR... shows each checkpoint's copies across the tiers and
# whether it is complete across them; ckpt-verify checks any tier; both refuse, by
# name, links and FIFOs planted among a local tier's roots, and never follow them.
#   - step-12 (4 data files) is only in local tiers: n0 and n1 hold their own parts and
#     each other's replicas, n2 its own; rank-00003.dat has no copy: INCOMPLETE, named;
#   - n2 fetches n3's part (.fetched/1): complete across the tiers (text and --json);
#   - step-8 is complete in the durable root;
#   - ckpt-verify of a replica root, of a fetched root, of one partial copy, of the
#     durable root: each ok, the partial copies said to be partial;
#   - a link in .replicas to a root outside, a FIFO in .fetched: both tools exit 1
#     naming each, and the checkpoint outside is never listed; .replicas itself a link:
#     refused, named.
. "$(dirname "$0")/replica_lib.sh"
SHARED=$WORK/durable
TRUTH=$WORK/truth
synth "$TRUTH" step-12 --mesh 4 --placements 'S(0)' --step 12 --seed 12
synth "$SHARED" step-8 --mesh 4 --placements 'S(0)' --step 8 --seed 8
synth "$WORK/outside" step-1 --mesh 4 --placements 'S(0)' --step 1

copy() {
    mkdir -p "$1"
    run "$COPY_PARTIAL" "$TRUTH" step-12 "$1" "$2" "$3"
    expect 0 "$2's part of step-12 in $1"
}
copy "$WORK/n0.local" n0 rank-00000.dat
copy "$WORK/n1.local" n1 rank-00001.dat
copy "$WORK/n1.local/.replicas/n0" n0 rank-00000.dat
copy "$WORK/n0.local/.replicas/n1" n1 rank-00001.dat
copy "$WORK/n2.local" n2 rank-00002.dat
L=(--local "$WORK/n0.local" --local "$WORK/n1.local" --local "$WORK/n2.local")

run "$CKPT_INSPECT" "$SHARED" "${L[@]}"
expect 0 "ckpt-inspect across the tiers"
said "^step-12 \(step 12, committed .*\): INCOMPLETE: 3 of 4 data files have a copy; none holds rank-00003.dat$" \
    "the file no copy holds"
said "^  local    $WORK/n0.local: own copy of ckptd n0: 1 of 4 data files \(rank-00000.dat\)$" "n0's own part"
said "^  replica  $WORK/n1.local/.replicas/n0: copy of ckptd n0: 1 of 4 data files \(rank-00000.dat\)$" \
    "n0's part kept by n1"
said "^step-8 \(step 8, .*\): complete across the tiers: 4 of 4 data files have a copy$" "step-8"
said "^  durable  $SHARED: complete \(4 data files\)$" "the durable copy"

copy "$WORK/n2.local/.fetched/1" n3 rank-00003.dat
run "$CKPT_INSPECT" "$SHARED" "${L[@]}" step-12
expect 0 "ckpt-inspect of step-12"
said "^step-12 .*: complete across the tiers: 4 of 4 data files have a copy$" "complete now"
said "^  fetched  $WORK/n2.local/.fetched/1: copy of ckptd n3: 1 of 4" "the fetched copy"
! grep -q "^step-8" "$OUT" || fail "NAME shows only that checkpoint"
run "$CKPT_INSPECT" "$SHARED" "${L[@]}" step-12 --json
expect 0 "ckpt-inspect --json"
python3 -c '
import json, sys
j = json.load(open(sys.argv[1]))
c = j["checkpoints"][0]
assert c["name"] == "step-12" and c["complete"] and c["missing"] == [], c
tiers = sorted(x["tier"] for x in c["copies"])
assert tiers == ["fetched", "local", "local", "local", "replica", "replica"], tiers
' "$OUT" || fail "the JSON view"

for t in "$WORK/n1.local/.replicas/n0" "$WORK/n2.local/.fetched/1" "$SHARED"; do
    run "$CKPT_VERIFY" "$t" --deep
    expect 0 "ckpt-verify --deep $t"
done
run "$CKPT_VERIFY" "$WORK/n1.local/.replicas/n0" step-12 --deep
expect 0 "ckpt-verify of one replica"
said "^step-12: ok: a partial copy from ckptd n0: 1 of 4 data files \(rank-00000.dat\);" "said partial"

ln -s "$WORK/outside" "$WORK/n0.local/.replicas/evil"
mkdir -p "$WORK/n0.local/.fetched"
mkfifo "$WORK/n0.local/.fetched/7"
run "$CKPT_VERIFY" "$WORK/n0.local"
expect 1 "ckpt-verify of a local tier with planted entries"
said "^$WORK/n0.local/.replicas/evil: a symbolic link, where only a root ckptd made belongs: refused" "the link"
said "^$WORK/n0.local/.fetched/7: a FIFO, where only a root ckptd made belongs: refused" "the FIFO"
! grep -q "step-1:" "$OUT" || fail "ckpt-verify followed the link"
run "$CKPT_INSPECT" "$SHARED" --local "$WORK/n0.local"
expect 1 "ckpt-inspect of a local tier with planted entries"
said "$WORK/n0.local/.replicas/evil: a symbolic link" "the link, by ckpt-inspect"
said "$WORK/n0.local/.fetched/7: a FIFO" "the FIFO, by ckpt-inspect"
! grep -q "^step-1 " "$OUT" || fail "ckpt-inspect followed the link"
[ -p "$WORK/n0.local/.fetched/7" ] && [ -L "$WORK/n0.local/.replicas/evil" ] ||
    fail "a planted entry was touched"

mkdir -p "$WORK/n3.local"
ln -s "$WORK/outside" "$WORK/n3.local/.replicas"
run "$CKPT_VERIFY" "$WORK/n3.local"
expect 2 "ckpt-verify of a local tier whose .replicas is a link"
said "$WORK/n3.local/.replicas" "the link named"
! grep -q "step-1:" "$OUT" || fail "ckpt-verify followed .replicas"
echo "PASS [$TEST_NAME]"
