#!/usr/bin/env bash
# usage.sh TOOL CASE: a usage error of ckpt-synth, ckpt-inspect or ckpt-verify (TOOL is
# synth, inspect or verify) exits 2 with a message naming what is wrong, and --help
# exits 0 printing the usage on stdout. None of them touches an existing root.
#   no_args, unknown_option, nonexistent_root, nonexistent_name, help (every tool)
#   bad_mesh_0x4, bad_mesh_2x, bad_placements, bad_size (synth)
#   bad_threads (verify)
. "$(dirname "$0")/lib.sh"
tool=${1:-} sub=${2:-}
TEST_NAME="$TEST_NAME $tool $sub"
case $tool in
synth) exe=$CKPT_SYNTH ;;
inspect) exe=$CKPT_INSPECT ;;
verify) exe=$CKPT_VERIFY ;;
*) fail "usage: usage.sh synth|inspect|verify CASE" ;;
esac

make_ckpt "$WORK/root" c
guard "$WORK/root"
synth_ok=(--mesh 2x4 --tensors 1 --bytes 1MiB)

case $tool/$sub in
*/no_args)
    expect_exit 2 "$exe"
    expect_msg "missing ROOT|[Uu]sage" "the missing ROOT"
    ;;
*/unknown_option)
    expect_exit 2 "$exe" --bogus "$WORK/root"
    expect_msg "--bogus" "the option --bogus"
    ;;
synth/nonexistent_root)
    # ckpt-synth makes a new root, as a first save would, but not its missing parents.
    expect_exit 2 "$exe" "$WORK/nope/deeper" --name x "${synth_ok[@]}"
    expect_msg "$(re "$WORK/nope/deeper")" "the root $WORK/nope/deeper"
    [ ! -e "$WORK/nope" ] || fail "ckpt-synth created the missing parent $WORK/nope"
    ;;
*/nonexistent_root)
    expect_exit 2 "$exe" "$WORK/nope"
    expect_msg "$(re "$WORK/nope")" "the root $WORK/nope"
    expect_exit 2 "$exe" "$WORK/nope" c
    expect_msg "$(re "$WORK/nope")" "the root $WORK/nope"
    [ ! -e "$WORK/nope" ] || fail "the tool created the nonexistent root $WORK/nope"
    ;;
inspect/nonexistent_name | verify/nonexistent_name)
    expect_exit 2 "$exe" "$WORK/root" nope
    expect_msg "nope" "the name nope"
    ;;
*/help)
    expect_exit 0 "$exe" --help
    grep -q "^usage: ckpt-$tool" "$OUT_STDOUT" || fail "--help printed no 'usage: ckpt-$tool' on stdout"
    ;;
synth/bad_mesh_0x4)
    expect_exit 2 "$exe" "$WORK/root" --name x --mesh 0x4 --tensors 1 --bytes 1MiB
    expect_msg "0x4" "the mesh 0x4"
    ;;
synth/bad_mesh_2x)
    expect_exit 2 "$exe" "$WORK/root" --name x --mesh 2x --tensors 1 --bytes 1MiB
    expect_msg "\"2x\"|'2x'|2x([^0-9]|$)" "the mesh 2x"
    ;;
synth/bad_placements)
    expect_exit 2 "$exe" "$WORK/root" --name x "${synth_ok[@]}" --placements 'S(5)'
    expect_msg "S\(5\)" "the placement S(5)"
    ;;
synth/bad_size)
    expect_exit 2 "$exe" "$WORK/root" --name x --mesh 2x4 --tensors 1 --bytes 12XB
    expect_msg "12XB" "the size 12XB"
    ;;
verify/bad_threads)
    expect_exit 2 "$exe" "$WORK/root" c --threads many
    expect_msg "many" "the value 'many'"
    ;;
*)
    fail "no case $sub for $tool" ;;
esac
[ ! -e "$WORK/root/x" ] || fail "a failed ckpt-synth left $WORK/root/x"
finish
