#!/usr/bin/env bash
# A PUT may begin every data file at once (peer protocol 9; docs/PROTOCOL.md, "A
# transfer"): a node of more ranks than 32, written at once. The service hands a
# file's first piece on while fewer than 32 files are in part (the descriptors a copy
# holds open) and holds the others' back until a file ends; what it holds is bounded
# (64 DATA). So a PUT of 40 files, each begun before any ends, commits a replica equal
# to its source, which verifies; one of 100 files, which would make the service hold
# 68 first pieces, is refused naming the bound, and leaves nothing.
. "$(dirname "$0")/replica_lib.sh"

daemon B
mkdir -p "$WORK/src"
# 40 and 100 ranks of one node, each its own data file of 40-100 KiB.
for n in wide:40 wider:100; do
    run "$CKPT_SYNTH" "$WORK/src" --name "${n%:*}" --mesh "${n#*:}" --tensors 2 --bytes 4MiB \
        --block-size 64KiB
    expect 0 "ckpt-synth ${n%:*}"
done
[ "$(ls "$WORK/src/wide" | grep -c '\.dat$')" -eq 40 ] || fail "the copy of 40 ranks has not 40 data files"

run "$PEER_TOOL" put-spread "$(addr B)" "$WORK/src" wide
expect 0 "a PUT that begins 40 files at once"
said "^ok committed wide: 40 data files begun at once" "the commit of the PUT"
rep=$WORK/B.local/.replicas/peer-tool/wide
for f in "$WORK/src/wide"/*.dat; do
    cmp -s "$f" "$rep/$(basename "$f")" || fail "replica file $(basename "$f") differs from its source"
done
run "$CKPT_VERIFY" "$WORK/B.local/.replicas/peer-tool" wide --deep
expect 0 "the replica of the PUT begun in 40 files"
# Every file's first piece came before any file was whole: the service went from a
# file not yet whole to another at least once per file.
sw=$(sed -n 's/.*replica wide of ckptd peer-tool committed .*interleaved, \([0-9]*\) time.*/\1/p' "$WORK/B.log")
[ "${sw:-0}" -ge 39 ] || fail "the service did not take the files begun at once (switches: ${sw:-none})"

run "$PEER_TOOL" put-spread "$(addr B)" "$WORK/src" wider
expect 1 "a PUT that would make the service hold 68 first pieces"
said "refused: .*more than 64 DATA held, none of them next in its file" "the refusal"
logged B "more than 64 DATA held" "the refusal in the log"
[ ! -e "$WORK/B.local/.replicas/peer-tool/wider" ] || fail "the refused PUT left a replica"
no_pending "$WORK/B.local/.replicas/peer-tool"

run "$CKPTCTL" peer inventory --to B --root "$WORK/B.durable"
expect 0 "the daemon lives after both"
said "^1 cop" "only the PUT begun in 40 files committed"
stop B
echo "PASS [$TEST_NAME]"
