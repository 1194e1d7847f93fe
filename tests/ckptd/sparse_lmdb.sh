#!/usr/bin/env bash
# sparse_lmdb.sh manifest_tail|manifest_claims|manifest_holes|catalog_tail|catalog_claims
# An LMDB file (a manifest, the catalog) made sparse costs memory by what it holds,
# never by its size (issue 28, defect 3: on main a manifest with a sparse 2 GiB tail
# took 2.1 GB in every tool, and at 1 TiB ckptd's start was OOM-killed). Every command
# runs under maxrss with a cap of 256 MiB (it is killed there, exit 125).
#   manifest_tail    step-2's manifest extended to 1 TiB (truncate: a hole): ckpt-
#                    inspect ROOT still lists both; ckpt-inspect ROOT step-2, ckpt-verify
#                    ROOT step-2, ckpt-verify ROOT and --rebuild-catalog exit 1 naming the
#                    manifest and both sizes; ckptd starts (recovery skips it, naming it)
#   manifest_claims  its newest meta page says it uses 1 TiB, and the file is 1 TiB:
#                    refused as more than a manifest may use, the same everywhere
#   manifest_holes   its meta page says it uses 3 GiB and the file is 3 GiB, all but the
#                    real pages a hole: it opens and deep-verifies, and costs what it holds
#   catalog_tail     catalog.mdb extended to 1 TiB: ckpt-inspect ROOT exits 1 naming it and
#                    both sizes; ckptd starts, keeps it aside as catalog.mdb.bad-* and
#                    rebuilds the catalog, which then lists both checkpoints
#   catalog_claims   catalog.mdb's meta page says it uses 1 TiB: the same
. "$(dirname "$0")/../ckpt/bad/lib.sh"
for v in CKPTD MF_CORRUPT MAXRSS; do
    [ -x "${!v:-}" ] || skip "\$$v is not set (run through meson test)"
done
sub=${1:-}
TEST_NAME="$TEST_NAME $sub"
CAP=256
R=$WORK/root

make_ckpt "$R" step-1 --mesh 2 --tensors 2 --bytes 256KiB
make_ckpt "$R" step-2 --mesh 2 --tensors 2 --bytes 256KiB
guard "$R/step-1"
big=$((1 << 40))
# sparse FILE BYTES: FILE made BYTES long by a hole at its end; skips where the file
# system cannot hold such a file.
sparse() {
    truncate -s "$2" "$1" 2>/dev/null || skip "$(dirname "$1") cannot hold a sparse file of $2 bytes"
    [ "$(stat -c %s "$1")" = "$2" ] || skip "truncate -s $2 made $(stat -c %s "$1") bytes"
    [ "$(stat -c %b "$1")" -lt 65536 ] || fail "$1 is not sparse ($(stat -c %b "$1") blocks)"
}
# capped EXIT CMD...: expect_exit under maxrss, which must have measured.
capped() {
    local want=$1
    shift
    expect_exit "$want" "$MAXRSS" "$CAP" "$@"
    expect_msg "^maxrss: [0-9]+ KiB \(cap" "the peak resident memory"
}
# ckptd_starts: ckptd's start (recovery) under the cap; its log in $log.
ckptd_starts() {
    log=$WORK/ckptd.log
    : >"$log"
    echo "\$ maxrss $CAP ckptd --root \$WORK/root --foreground"
    "$MAXRSS" "$CAP" "$CKPTD" --root "$R" --socket "$WORK/d.sock" --foreground --log "$log" \
        --staging 16MiB 2>"$WORK/maxrss.err" &
    local d=$! listened=no
    for _ in $(seq 600); do
        [ -S "$WORK/d.sock" ] && listened=yes && break
        kill -0 $d 2>/dev/null || break
        sleep 0.05
    done
    [ $listened = yes ] && kill -TERM $d
    wait $d
    local rc=$?
    sed 's/^/  | /' "$log" "$WORK/maxrss.err"
    [ $rc -ne 125 ] || fail "ckptd went over $CAP MiB at its start"
    [ $listened = yes ] || fail "ckptd did not start (exit $rc)"
    [ $rc -eq 0 ] || fail "ckptd exited $rc on SIGTERM"
    grep -q "^maxrss: [0-9]* KiB (cap" "$WORK/maxrss.err" || fail "no peak measured for ckptd"
}
m=$R/step-2/manifest.mdb
mre=$(re "$m")
case $sub in
manifest_tail|manifest_claims)
    used=$(stat -c %s "$m")
    if [ "$sub" = manifest_claims ]; then
        mf_corrupt "$m" meta-last-pg $((big / 4096 - 1))
        why="$mre: its LMDB meta page says it uses $big bytes, more than a manifest may"
    else
        why="$mre: $big bytes, but its LMDB meta page says it uses $used: a file grown far beyond"
    fi
    sparse "$m" $big
    capped 0 "$CKPT_INSPECT" "$R"
    expect_msg "^step-1 " "step-1"
    expect_msg "^step-2 " "step-2, still listed"
    capped 1 "$CKPT_INSPECT" "$R" step-2
    expect_msg "$why" "the manifest and its sizes"
    capped 1 "$CKPT_VERIFY" "$R" step-2
    expect_msg "$why" "the manifest and its sizes"
    capped 1 "$CKPT_VERIFY" "$R"
    expect_msg "^step-1: ok" "step-1 as ok"
    expect_msg "$why" "the manifest and its sizes"
    capped 1 "$CKPT_INSPECT" "$R" --rebuild-catalog
    expect_msg "skipping unreadable checkpoint: $why" "the manifest and its sizes"
    ckptd_starts
    grep -q "skipping unreadable checkpoint: $why" "$log" || fail "ckptd's log does not name the manifest"
    ;;
manifest_holes)
    mf_corrupt "$m" meta-last-pg $(((3 << 30) / 4096 - 1))
    sparse "$m" $((3 << 30))
    capped 0 "$CKPT_INSPECT" "$R" step-2
    capped 0 "$CKPT_VERIFY" "$R" step-2 --deep
    ckptd_starts
    ;;
catalog_tail|catalog_claims)
    c=$R/catalog.mdb
    if [ "$sub" = catalog_claims ]; then
        mf_corrupt "$c" meta-last-pg $((big / 4096 - 1))
        why="$(re "$c"): its LMDB meta page says it uses $big bytes, more than a catalog may"
    else
        why="$(re "$c"): $big bytes, but its LMDB meta page says it uses $(stat -c %s "$c"): a file grown far beyond"
    fi
    sparse "$c" $big
    capped 1 "$CKPT_INSPECT" "$R"
    expect_msg "$why" "the catalog and its sizes"
    capped 0 "$CKPT_INSPECT" "$R" step-1
    ckptd_starts
    grep -q "catalog is unreadable ($why.*kept aside as $(re "$R")/catalog.mdb.bad-" "$log" ||
        fail "ckptd's log does not say the catalog was kept aside"
    kept=$(ls "$R"/catalog.mdb.bad-*)
    [ "$(stat -c %s "$kept")" = $big ] || fail "the old catalog was not kept aside as it was"
    capped 0 "$CKPT_INSPECT" "$R"
    expect_msg "^step-1 " "step-1, from the rebuilt catalog"
    expect_msg "^step-2 " "step-2, from the rebuilt catalog"
    ;;
*)
    fail "usage: sparse_lmdb.sh manifest_tail|manifest_claims|manifest_holes|catalog_tail|catalog_claims" ;;
esac
finish
