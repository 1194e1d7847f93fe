#!/usr/bin/env bash
# A peer transfer reads the copy it sends with O_DIRECT (docs/decisions/
# 0186-peer-transfer-pipeline.md): a copy is written with O_DIRECT, so its bytes are not
# in the page cache, and a buffered read would fill the cache (CPU time the node's
# saves and other transfers need) with bytes nobody reads again. So after a PUT and a
# GET, the sender's data files are still out of the page cache: ckptctl's source copy
# for the PUT, the daemon's replica for the GET. And what arrived is what was sent.
. "$(dirname "$0")/replica_lib.sh"
command -v fincore >/dev/null || skip "no fincore (util-linux) to see the page cache"
dd if=/dev/zero of="$WORK/probe" bs=4096 count=1 oflag=direct status=none 2>/dev/null ||
    skip "$WORK's file system refuses O_DIRECT: copies are read through the cache there"

synth "$WORK/src" c1
# resident FILE...: bytes of the files in the page cache, in all.
resident() { fincore --bytes --raw --noheadings -o RES "$@" | awk '{ n += $1 } END { print n + 0 }'; }
uncache() { local f; for f in "$@"; do dd if="$f" iflag=nocache count=0 status=none; done; }
uncache "$WORK"/src/c1/rank-*.dat
[ "$(resident "$WORK"/src/c1/rank-*.dat)" = 0 ] ||
    skip "the page cache keeps $WORK's files after they are dropped"
daemon B

run "$CKPTCTL" peer put --to B --root "$WORK/B.durable" --id A --from "$WORK/src" c1
expect 0 "PUT of c1"
got=$(resident "$WORK"/src/c1/rank-*.dat)
[ "$got" = 0 ] || fail "the PUT's sender read its copy through the page cache ($got bytes of it cached)"

uncache "$WORK"/B.local/.replicas/A/c1/rank-*.dat
mkdir -p "$WORK/C.local"
run "$CKPTCTL" peer get --to B --root "$WORK/B.durable" --into "$WORK/C.local" c1 --all
expect 0 "GET of c1 from B's replica"
got=$(resident "$WORK"/B.local/.replicas/A/c1/rank-*.dat)
[ "$got" = 0 ] || fail "B served the GET through the page cache ($got bytes of its replica cached)"
for f in "$WORK"/src/c1/rank-*.dat; do
    cmp "$f" "$WORK/C.local/c1/$(basename "$f")" || fail "$(basename "$f") fetched is not what was saved"
done
run "$CKPT_VERIFY" "$WORK/C.local" c1 --deep
expect 0 "the fetched copy verifies"
stop B
echo "PASS [$TEST_NAME]"
