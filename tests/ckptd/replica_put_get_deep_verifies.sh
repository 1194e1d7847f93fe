#!/usr/bin/env bash
# Two ckptds on loopback, each with a local tier and a peer service (issue 31):
#   - A holds its part of checkpoint c1 (ranks 0 and 2: a partial copy) and c2 whole;
#     INVENTORY of A lists both, whose and which files;
#   - PUT c1 and c2 to B: B keeps them as replicas of A (LOCAL/.replicas/A), which
#     deep-verify (c1 said to be a partial copy of 2 of 4 files); B's INVENTORY lists
#     them as replicas of A;
#   - GET them back from B into other local roots: the fetched copies deep-verify, and
#     c2, complete, loads element for element as the original (ckpt-verify --against);
#     a GET of one file makes a copy of that file alone;
#   - a GET of what B does not hold, or into a root that holds the name, is refused,
#     naming it, and nothing is written;
#   - at SIGTERM each daemon removes its address file ROOT/.ckptd.ID.peer.
. "$(dirname "$0")/replica_lib.sh"

synth "$WORK/src" c1
mkdir -p "$WORK/A.local"
run "$COPY_PARTIAL" "$WORK/src" c1 "$WORK/A.local" A rank-00000.dat rank-00002.dat
expect 0 "making A's part of c1"
synth "$WORK/A.local" c2 --step 7
daemon A
daemon B

run "$CKPTCTL" peer inventory --to A --root "$WORK/A.durable"
expect 0 "INVENTORY of A"
said "^2 copies" "A holds two copies"
said "^c1 +step 0 +own copy of ckptd A +partial: 2 of 4 data files: rank-00000.dat rank-00002.dat" \
    "A's part of c1"
said "^c2 +step 7 +own copy of ckptd A +complete \(4 data files\)" "A's whole c2"

for c in c1 c2; do
    run "$CKPTCTL" peer put --to B --root "$WORK/B.durable" --id A --from "$WORK/A.local" "$c"
    expect 0 "PUT of $c to B"
    said "$c: committed as a replica at peer" "the PUT's answer"
    logged B "replica $c of ckptd A committed" "the PUT of $c"
done
run "$CKPT_VERIFY" "$WORK/B.local/.replicas/A" c1 --deep
expect 0 "B's replica of c1"
said "c1: ok: a partial copy from ckptd A: 2 of 4 data files \(rank-00000.dat rank-00002.dat\)" \
    "the replica of A's part"
run "$CKPT_VERIFY" "$WORK/B.local/.replicas/A" c2 --deep
expect 0 "B's replica of c2"
run "$CKPT_INSPECT" "$WORK/B.local/.replicas/A" c1
expect 0 "ckpt-inspect of a replica"
said "^copy +a partial copy from ckptd A: 2 of 4 data files" "ckpt-inspect on a partial copy"
run "$CKPTCTL" peer inventory --to B --root "$WORK/B.durable"
expect 0 "INVENTORY of B"
said "^c1 .*replica +of ckptd A +partial: 2 of 4 data files: rank-00000.dat rank-00002.dat" \
    "B's replica of c1"
said "^c2 .*replica +of ckptd A +complete" "B's replica of c2"

mkdir -p "$WORK/C.local" "$WORK/D.local"
for c in c1 c2; do
    run "$CKPTCTL" peer get --to B --root "$WORK/B.durable" --into "$WORK/C.local" "$c" --all
    expect 0 "GET of $c from B"
    run "$CKPT_VERIFY" "$WORK/C.local" "$c" --deep
    expect 0 "the fetched $c"
done
said "c2: ok: 3 tensors" "the fetched c2 is complete"
run "$CKPT_VERIFY" "$WORK/C.local" c2 --against "$WORK/A.local/c2"
expect 0 "the fetched c2 loads as A's"
said "equal: 3 tensors" "the comparison"
run "$CKPTCTL" peer get --to B --root "$WORK/B.durable" --into "$WORK/D.local" c1 rank-00002.dat
expect 0 "GET of one file"
run "$CKPT_VERIFY" "$WORK/D.local" c1 --deep
expect 0 "the copy of one file"
said "a partial copy from ckptd A: 1 of 4 data files \(rank-00002.dat\)" "what it holds"

mkdir -p "$WORK/E.local"
run "$CKPTCTL" peer get --to B --root "$WORK/B.durable" --into "$WORK/E.local" c1 rank-00001.dat
expect 1 "GET of a file B does not hold"
said "no copy of c1 here holds rank-00001.dat" "the refusal"
run "$CKPTCTL" peer get --to B --root "$WORK/B.durable" --into "$WORK/C.local" c2 --all
expect 1 "GET into a root that holds the name"
said "C.local/c2 exists already" "the refusal"
[ -z "$(ls -A "$WORK/E.local")" ] || fail "a refused GET left $(ls -A "$WORK/E.local")"

stop A
stop B
for id in A B; do
    [ ! -e "$WORK/$id.durable/.ckptd.$id.peer" ] || fail "ckptd $id left its address file"
done
echo "PASS [$TEST_NAME]"
