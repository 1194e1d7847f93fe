#!/usr/bin/env bash
# One byte flipped inside tensor t1's bytes: the structure is fine (verify exits 0), and
# verify --deep exits 1 naming the file and t1 - the one tensor whose extent covers
# that byte. 4 KiB hash blocks and 4 KiB-aligned extents put only t1 in the block, so
# the other tensors must not be blamed.
. "$(dirname "$0")/lib.sh"
command -v jq >/dev/null || skip "jq is missing"

make_ckpt "$WORK/src" c --uneven --block-size 4KiB
run "$CKPT_INSPECT" "$WORK/src" c --json --tensor t1
[ "$RC" -eq 0 ] || fail "ckpt-inspect --json --tensor t1 of the good checkpoint exited $RC"
# The first non-empty extent of t1: its file, offset and length.
read -r shard file off len < <(jq -r '.tensors[] | select(.name == "t1") | .shards[]
    | select((.extents | length) > 0) | [.index, .extents[0].file, .extents[0].offset,
      .extents[0].bytes] | @tsv' "$OUT" | head -n 1)
[ -n "${len:-}" ] || fail "t1 has no extent in ckpt-inspect --json output"
pos=$((off + len / 2))
echo "flipping byte $pos of $file (t1 shard $shard: $file @ $off + $len)"

corrupt_copy "$WORK/src/c" "$WORK/root/c"
flip "$WORK/root/c/$file" "$pos" 0xff
cmp -s "$WORK/src/c/$file" "$WORK/root/c/$file" && fail "the byte was not flipped"
guard "$WORK/root/c"

expect_exit 0 "$CKPT_VERIFY" "$WORK/root" c

expect_exit 1 "$CKPT_VERIFY" "$WORK/root" c --deep
expect_msg "$(re "$file")" "the data file $file"
expect_msg "t1 \(shard $shard\)" "tensor t1 shard $shard, whose extent covers byte $pos"
expect_no_msg "(^|[^A-Za-z0-9_.-])t[02]([^A-Za-z0-9_.-]|$)" "t0 or t2, which do not hold byte $pos"
finish
