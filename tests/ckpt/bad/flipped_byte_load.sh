#!/usr/bin/env bash
# One bit flipped inside tensor t1's bytes: ckpt-consolidate and a copying
# ckpt-reshard read that block, find that its SHA-256 is not the manifest's, and exit 1
# naming the checkpoint, the data file, tensor t1 and the block, leaving no export and
# no new checkpoint behind (a copy would otherwise hash the bad bytes afresh). With
# --no-verify both take the bytes as they are.
. "$(dirname "$0")/lib.sh"
command -v jq >/dev/null || skip "jq is missing"
for v in CKPT_CONSOLIDATE CKPT_RESHARD; do
    [ -x "${!v:-}" ] || skip "\$$v is not set (run through meson test)"
done

make_ckpt "$WORK/src" c --uneven --block-size 4KiB
run "$CKPT_INSPECT" "$WORK/src" c --json --tensor t1
[ "$RC" -eq 0 ] || fail "ckpt-inspect --json --tensor t1 of the good checkpoint exited $RC"
read -r file off len < <(jq -r '.tensors[] | select(.name == "t1") | .shards[]
    | select((.extents | length) > 0) | [.extents[0].file, .extents[0].offset,
      .extents[0].bytes] | @tsv' "$OUT" | head -n 1)
[ -n "${len:-}" ] || fail "t1 has no extent in ckpt-inspect --json output"
pos=$((off + len / 2))
block=$((pos / 4096))
echo "flipping a bit of byte $pos of $file (block $block, t1 @ $off + $len)"

corrupt_copy "$WORK/src/c" "$WORK/root/c"
flip "$WORK/root/c/$file" "$pos" 1
cmp -s "$WORK/src/c/$file" "$WORK/root/c/$file" && fail "the bit was not flipped"
guard "$WORK/root/c"

named() {
    expect_msg "$(re "$WORK/root/c")" "the checkpoint $WORK/root/c"
    expect_msg "$(re "$file")" "the data file $file"
    expect_msg "tensor t1" "tensor t1"
    expect_msg "block $block \(bytes $((block * 4096))-$(((block + 1) * 4096))\)" "block $block"
}

expect_exit 1 "$CKPT_CONSOLIDATE" "$WORK/root" c -o "$WORK/out"
named
[ -z "$(ls -A "$WORK/out" 2>/dev/null)" ] || fail "the failed export left files: $(ls -A "$WORK/out")"

expect_exit 1 "$CKPT_RESHARD" "$WORK/root" c --to-mesh 3 --copy --name c3
named
[ ! -e "$WORK/root/c3" ] || fail "the failed reshard committed c3"

expect_exit 0 "$CKPT_CONSOLIDATE" "$WORK/root" c -o "$WORK/raw" --no-verify
[ -s "$WORK/raw/model.safetensors" ] || fail "--no-verify wrote no model.safetensors"
expect_exit 0 "$CKPT_RESHARD" "$WORK/root" c --to-mesh 3 --copy --name raw3 --no-verify
finish
