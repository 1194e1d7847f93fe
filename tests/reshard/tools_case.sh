#!/bin/bash
# tools_case.sh CASE - the ckpt-reshard / ckpt-consolidate / ckpt-verify --against
# command lines. Needs CKPT_SYNTH, CKPT_RESHARD, CKPT_CONSOLIDATE, CKPT_VERIFY.
set -u
case_=$1
root=$(mktemp -d "${TMPDIR:-/var/tmp}/ck-tools-XXXXXX")
trap 'rm -rf "$root"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
# expect CODE PATTERN CMD... : runs CMD, checks its exit code and that its output
# (stdout and stderr) matches PATTERN.
expect() {
    local code=$1 pat=$2; shift 2
    out=$("$@" 2>&1); rc=$?
    [ "$rc" = "$code" ] || fail "$* exited $rc, wanted $code: $out"
    echo "$out" | grep -Eq -- "$pat" || fail "$* said '$out', wanted /$pat/"
}
"$CKPT_SYNTH" "$root" --name src --mesh 2x4 --tensors 3 --bytes 24MiB --seed 5 >/dev/null ||
    fail "ckpt-synth"
case $case_ in
bad_targets)
    expect 2 'size 0' "$CKPT_RESHARD" "$root" src --to-mesh 0x4
    expect 2 'expected sizes' "$CKPT_RESHARD" "$root" src --to-mesh 2x
    expect 2 'S\(2\).*2 dims' "$CKPT_RESHARD" "$root" src --to-mesh 4 --placements 'S(2)'
    expect 2 'more than' "$CKPT_RESHARD" "$root" src --to-mesh 100000000000
    expect 2 'placement' "$CKPT_RESHARD" "$root" src --to-mesh 2x2 --placements 'S(0)'
    expect 2 'to-mesh is required' "$CKPT_RESHARD" "$root" src
    expect 2 'no checkpoint named' "$CKPT_RESHARD" "$root" nosuch --to-mesh 2
    "$CKPT_RESHARD" "$root" src --to-mesh 2 >/dev/null || fail "a good reshard failed"
    expect 2 'already exists' "$CKPT_RESHARD" "$root" src --to-mesh 2
    [ -z "$(ls -A "$root/.pending" 2>/dev/null)" ] || fail "a refused reshard left .pending debris"
    expect 0 'usage' "$CKPT_RESHARD" --help
    expect 0 'usage' "$CKPT_CONSOLIDATE" --help
    expect 2 'needs ROOT' "$CKPT_CONSOLIDATE" "$root" src
    expect 2 'dtype' "$CKPT_CONSOLIDATE" "$root" src -o "$root/x" --dtype f16
    ;;
reshard_default_name_json)
    expect 0 '"name": "src-8"' "$CKPT_RESHARD" "$root" src --to-mesh 8 --json
    expect 0 '"files_written": [1-9]' "$CKPT_RESHARD" "$root" src --to-mesh 3 --placements 'S(1)' --json
    expect 0 'ok' "$CKPT_VERIFY" "$root" src-3 --deep
    mkdir "$root/other"
    expect 0 'committed' "$CKPT_RESHARD" "$root" src --to-mesh 2 --out "$root/other" --name two
    expect 0 'equal' "$CKPT_VERIFY" "$root" src --against "$root/other/two"
    ;;
against_equal_across_meshes)
    "$CKPT_RESHARD" "$root" src --to-mesh 3 --copy --name c3 >/dev/null || fail reshard
    "$CKPT_RESHARD" "$root" src --to-mesh 2x2 --placements 'S(1),S(0)' --name c22 >/dev/null ||
        fail reshard
    expect 0 'equal: 3 tensors' "$CKPT_VERIFY" "$root" src --against c3
    expect 0 'equal' "$CKPT_VERIFY" "$root" c3 --against "$root/c22" --mem-limit 1M
    expect 0 '"equal": true' "$CKPT_VERIFY" "$root" src --against c22 --json
    ;;
against_flipped_byte_names_element)
    # Copy to one rank: rank-00000.dat holds t0 first, at offset 0, row-major; flip
    # the byte at 4100 = element 1025 of t0, [1, 1] with its 1024 columns.
    "$CKPT_RESHARD" "$root" src --to-mesh 1 --copy --name one >/dev/null || fail reshard
    f=$root/one/rank-00000.dat
    b=$(dd if="$f" bs=1 skip=4100 count=1 2>/dev/null | od -An -tu1 | tr -d ' ')
    printf "$(printf '\\%03o' $(( (b + 1) % 256 )))" |
        dd of="$f" bs=1 seek=4100 count=1 conv=notrunc 2>/dev/null
    expect 1 'tensor t0: first difference at element 1025 \[1, 1\]' \
        "$CKPT_VERIFY" "$root" src --against one
    expect 1 'DIFFER: 1 of 3' "$CKPT_VERIFY" "$root" src --against one
    expect 1 '"equal": false' "$CKPT_VERIFY" "$root" src --against one --json
    ;;
against_other_seed_differs)
    "$CKPT_SYNTH" "$root" --name seed6 --mesh 4 --tensors 3 --bytes 24MiB --seed 6 >/dev/null
    expect 1 'tensor t2: first difference at element 0' "$CKPT_VERIFY" "$root" src --against seed6
    "$CKPT_SYNTH" "$root" --name fewer --mesh 4 --tensors 2 --bytes 16MiB --seed 5 >/dev/null
    expect 1 'only in src' "$CKPT_VERIFY" "$root" src --against fewer
    expect 2 'needs ROOT and NAME' "$CKPT_VERIFY" "$root" --against fewer
    ;;
*) fail "unknown case $case_" ;;
esac
exit 0
