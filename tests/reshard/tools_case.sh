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
    expect 2 'dtype i32: an export converts its float tensors' "$CKPT_CONSOLIDATE" "$root" src -o "$root/x" --dtype i32
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
boxes_verify_against_reshard_consolidate)
    # Box lists (format 1.1) through every tool: a random tiling per tensor, written
    # directly and by 4 ranks through the client; both verify deep and compare equal
    # to each other and to the placed src of the same seed; reshards by reference and
    # by copy are equal too; consolidation works, and refuses a dtype safetensors lacks.
    "$CKPT_SYNTH" "$root" --name bx --mesh 4 --tensors 3 --bytes 24MiB --seed 5 --boxes \
        >/dev/null || fail "ckpt-synth --boxes"
    "$CKPT_SYNTH" "$root" --name bxw --mesh 4 --tensors 3 --bytes 24MiB --seed 5 --boxes \
        --world 4 >/dev/null || fail "ckpt-synth --boxes --world 4"
    expect 0 'ok: 3 tensors' "$CKPT_VERIFY" "$root" bx --deep
    expect 0 'ok: 3 tensors' "$CKPT_VERIFY" "$root" bxw --deep
    expect 0 'equal: 3 tensors' "$CKPT_VERIFY" "$root" bx --against bxw
    expect 0 'equal: 3 tensors' "$CKPT_VERIFY" "$root" bx --against src
    expect 0 'boxes' "$BUILD_DIR/tools/ckpt-inspect" "$root" bx
    expect 0 '"layout": "boxes"' "$BUILD_DIR/tools/ckpt-inspect" "$root" bx --json
    expect 0 'boxes \(each written by the rank at COORD\) of t1' \
        "$BUILD_DIR/tools/ckpt-inspect" "$root" bx --tensor t1
    expect 0 '[1-9][0-9]* tensors? by reference' "$CKPT_RESHARD" "$root" bx --to-mesh 1 \
        --placements R --name one
    expect 0 'committed' "$CKPT_RESHARD" "$root" bx --to-mesh 3 --placements 'S(1)' --name c3
    for n in one c3; do
        expect 0 'ok' "$CKPT_VERIFY" "$root" $n --deep
        expect 0 'equal: 3 tensors' "$CKPT_VERIFY" "$root" $n --against bx
    done
    expect 0 'wrote 3 tensors' "$CKPT_CONSOLIDATE" "$root" bx -o "$root/st"
    "$CKPT_CONSOLIDATE" "$root" src -o "$root/st-src" >/dev/null || fail "consolidate src"
    cmp -s "$root/st/model.safetensors" "$root/st-src/model.safetensors" ||
        fail "the box list and the placed save consolidate to different bytes"
    # 1.1 dtypes: c128 (16-byte elements) round-trips; consolidation refuses it by name.
    "$CKPT_SYNTH" "$root" --name cx --mesh 4 --tensors 2 --bytes 1MiB --seed 5 --boxes \
        --dtype c128 --uneven >/dev/null || fail "ckpt-synth --dtype c128"
    expect 0 'ok' "$CKPT_VERIFY" "$root" cx --deep
    "$CKPT_RESHARD" "$root" cx --to-mesh 3 --name cx3 >/dev/null || fail "reshard c128"
    expect 0 'equal: 2 tensors' "$CKPT_VERIFY" "$root" cx3 --against cx
    expect 2 'tensor t0: dtype c128 has no safetensors name' \
        "$CKPT_CONSOLIDATE" "$root" cx -o "$root/cx-st"
    expect 2 'placements' "$CKPT_SYNTH" "$root" --name no --mesh 4 --tensors 1 --bytes 1M \
        --boxes --placements 'S(0)'
    ;;
consolidate_interrupted_removes_its_temporary_files)
    # SIGINT (Ctrl-C) and SIGTERM once the output's temporary file exists: the tool
    # removes it, writes no file under its final name, and dies of the signal. Job
    # control on: without it a script's background job ignores SIGINT (and the tool
    # keeps a signal ignored from the start ignored).
    "$CKPT_SYNTH" "$root" --name big --mesh 2 --tensors 2 --bytes 512MiB --no-hash >/dev/null ||
        fail "ckpt-synth big"
    set -m
    for sig in INT TERM; do
        out=$root/out-$sig
        "$CKPT_CONSOLIDATE" "$root" big -o "$out" 2>"$root/err-$sig" &
        pid=$!
        for _ in $(seq 1000); do
            [ -e "$out/.model.safetensors.tmp" ] && break
            sleep 0.01
        done
        [ -e "$out/.model.safetensors.tmp" ] || fail "no temporary file appeared in $out"
        kill -$sig $pid
        wait $pid
        rc=$?
        left=$(ls -A "$out")
        [ -z "$left" ] || fail "SIG$sig left $left in $out"
        want=$((128 + $(kill -l $sig)))
        [ "$rc" = "$want" ] || fail "SIG$sig: exit status $rc, wanted $want: $(cat "$root/err-$sig")"
        grep -q "interrupted by SIG$sig" "$root/err-$sig" ||
            fail "SIG$sig: no message saying so: $(cat "$root/err-$sig")"
    done
    ;;
progress_lines_when_asked)
    # --progress prints progress lines into a log (stderr no terminal), ending at 100%;
    # without it, a log gets none.
    for t in synth consolidate reshard verify; do
        case $t in
        synth) cmd=("$CKPT_SYNTH" "$root" --name p --mesh 2 --tensors 2 --bytes 8MiB) ;;
        consolidate) cmd=("$CKPT_CONSOLIDATE" "$root" src -o "$root/st") ;;
        reshard) cmd=("$CKPT_RESHARD" "$root" src --to-mesh 3 --copy) ;;
        verify) cmd=("$CKPT_VERIFY" "$root" src --deep) ;;
        esac
        "${cmd[@]}" --progress >/dev/null 2>"$root/log" || fail "$t --progress failed"
        grep -Eq "^ckpt-$t: [a-z]+: .*\(100%\)" "$root/log" ||
            fail "$t --progress: no progress line ending at 100%: $(cat "$root/log")"
        [ "$(tr -cd '\r' <"$root/log" | wc -c)" = 0 ] || fail "$t --progress: a log got \\r redraws"
        rm -rf "$root/p" "$root/st" "$root/src-3"
        "${cmd[@]}" >/dev/null 2>"$root/log" || fail "$t failed"
        ! grep -q "%)" "$root/log" || fail "$t without --progress: progress in a log: $(cat "$root/log")"
        rm -rf "$root/p" "$root/st" "$root/src-3"
    done
    ;;
*) fail "unknown case $case_" ;;
esac
exit 0
