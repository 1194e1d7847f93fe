#!/usr/bin/env bash
# listing.sh removed_by_hand|planted_keys
# What ckpt-inspect ROOT lists comes from the catalog (derived state); it never shows
# what is not a checkpoint on disk (issue 28, defects 9 and 10).
#   removed_by_hand  step-15 removed with rm -rf: ckpt-inspect ROOT and --json no longer
#                    list it as a checkpoint; they mark it "not on disk" and exit 0,
#                    and --rebuild-catalog drops it
#   planted_keys     catalog keys "../../etc/passwd" and one holding a newline (its
#                    second line forged to look like a checkpoint): never printed,
#                    counted ("2 catalog entries with invalid names skipped"), not in
#                    --json (counted there too), exit 1; --rebuild-catalog drops them
. "$(dirname "$0")/lib.sh"
sub=${1:-}
TEST_NAME="$TEST_NAME $sub"
command -v python3 >/dev/null || skip "no python3 to read the JSON"

for n in step-10 step-15 step-20; do
    make_ckpt "$WORK/root" $n --mesh 2 --tensors 1 --bytes 64KiB
done
guard "$WORK/root/step-10"
guard "$WORK/root/step-20"
# checkpoints JSON: the names listed as checkpoints, one a line.
checkpoints() {
    python3 -c 'import json, sys; print("\n".join(c["name"] for c in json.load(open(sys.argv[1]))["checkpoints"]))' "$OUT_STDOUT"
}
json_field() {
    python3 -c 'import json, sys; print(json.dumps(json.load(open(sys.argv[1]))[sys.argv[2]]))' "$OUT_STDOUT" "$1"
}

case $sub in
removed_by_hand)
    rm -rf "$WORK/root/step-15"
    expect_exit 0 "$CKPT_INSPECT" "$WORK/root"
    expect_msg "^step-10 " "step-10"
    expect_msg "^step-20 " "step-20"
    expect_no_msg "^step-15 +[0-9]" "step-15 as a checkpoint"
    expect_msg "^step-15 +\(in the catalog, but not on disk" "step-15 as not on disk"
    expect_exit 0 "$CKPT_INSPECT" "$WORK/root" --json
    [ "$(checkpoints)" = "$(printf 'step-10\nstep-20')" ] || fail "--json lists $(checkpoints | tr '\n' ' ')"
    [ "$(json_field not_on_disk)" = '["step-15"]' ] || fail "--json's not_on_disk is $(json_field not_on_disk)"
    expect_exit 2 "$CKPT_INSPECT" "$WORK/root" step-15
    expect_msg "no checkpoint named 'step-15'" "step-15 as missing"
    expect_exit 0 "$CKPT_INSPECT" "$WORK/root" --rebuild-catalog
    expect_msg "1 removed" "the stale entry removed"
    expect_exit 0 "$CKPT_INSPECT" "$WORK/root"
    expect_no_msg "step-15" "step-15 after the rebuild"
    ;;
planted_keys)
    [ -x "${MF_CORRUPT:-}" ] || skip "\$MF_CORRUPT is not set"
    mf_corrupt "$WORK/root/catalog.mdb" catalog-key "../../etc/passwd"
    mf_corrupt "$WORK/root/catalog.mdb" catalog-key $'evil\nforged-1      99  2026-01-01T00:00:00Z  1.00 GiB  2  1'
    expect_exit 1 "$CKPT_INSPECT" "$WORK/root"
    expect_msg "^step-10 " "step-10"
    expect_no_msg "passwd" "the planted key ../../etc/passwd"
    expect_no_msg "evil|forged" "the planted key with a newline"
    expect_msg "^2 catalog entries with invalid names skipped" "the count of skipped keys"
    expect_exit 1 "$CKPT_INSPECT" "$WORK/root" --json
    [ "$(checkpoints)" = "$(printf 'step-10\nstep-15\nstep-20')" ] || fail "--json lists $(checkpoints | tr '\n' ' ')"
    [ "$(json_field skipped_catalog_names)" = 2 ] || fail "--json counts $(json_field skipped_catalog_names) skipped keys"
    expect_no_msg "passwd|evil|forged" "a planted key in --json"
    expect_exit 0 "$CKPT_INSPECT" "$WORK/root" --rebuild-catalog
    expect_msg "2 removed" "the planted keys removed"
    expect_exit 0 "$CKPT_INSPECT" "$WORK/root"
    expect_no_msg "skipped" "skipped keys after the rebuild"
    ;;
*)
    fail "usage: listing.sh removed_by_hand|planted_keys" ;;
esac
finish
