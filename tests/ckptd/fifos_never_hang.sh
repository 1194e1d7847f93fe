#!/usr/bin/env bash
# FIFOs planted in a root hang nothing (issue 21, defect 6; docs/FORMAT.md, "Links and
# special files"). On the build this test was written against each of these hung:
#   - a data file replaced by a FIFO: ckpt-verify NAME --deep, ckpt-consolidate and a
#     copying ckpt-reshard (they read it); now each exits 1 naming the file, and
#     ckpt-verify without --deep says what it is;
#   - catalog.mdb a FIFO: ckpt-inspect ROOT exits 2 naming it and saying how to
#     rebuild; ckptd starts (its socket answers), keeps the FIFO aside as
#     catalog.mdb.bad-*, rebuilds the catalog from the directories and says so in its
#     log; ckpt-inspect then lists the checkpoint.
# The checkpoints read are never written (lib.sh's guards), and each command runs
# under a timeout that counts as a hang.
TOOL_TIMEOUT=${TOOL_TIMEOUT:-20}     # a hang is what some of these cases were
. "$(dirname "$0")/../ckpt/bad/lib.sh"
for v in CKPTD CKPT_CONSOLIDATE CKPT_RESHARD; do
    [ -x "${!v:-}" ] || skip "\$$v is not set (run through meson test)"
done

make_ckpt "$WORK/root" c
rm "$WORK/root/c/rank-00001.dat"
mkfifo "$WORK/root/c/rank-00001.dat"
guard "$WORK/root/c"
f=$(re "$WORK/root/c/rank-00001.dat")

expect_exit 1 "$CKPT_VERIFY" "$WORK/root" c --deep
expect_msg "$f: not a regular file \(a FIFO\)" "the FIFO data file"
expect_exit 1 "$CKPT_VERIFY" "$WORK/root" c
expect_msg "$f: not a regular file \(a FIFO\)" "the FIFO data file"
expect_exit 1 "$CKPT_CONSOLIDATE" "$WORK/root" c -o "$WORK/out"
expect_msg "$f: not a regular file" "the FIFO data file"
expect_exit 1 "$CKPT_RESHARD" "$WORK/root" c --to-mesh 3 --copy --name r2
expect_msg "$f: not a regular file" "the FIFO data file"

make_ckpt "$WORK/root2" d
rm "$WORK/root2/catalog.mdb"
mkfifo "$WORK/root2/catalog.mdb"
guard "$WORK/root2/d"
expect_exit 2 "$CKPT_INSPECT" "$WORK/root2"
expect_msg "$(re "$WORK/root2/catalog.mdb"): not a regular file" "the FIFO catalog"

log=$WORK/ckptd.log
echo "\$ ckptd --root \$WORK/root2 --foreground"
"$CKPTD" --root "$WORK/root2" --foreground --log "$log" --staging 64MiB &
daemon=$!
trap 'kill -9 $daemon 2>/dev/null; rm -rf "$WORK"' EXIT
for _ in $(seq 400); do
    [ -S "$WORK/root2/.ckptd.sock" ] && break
    kill -0 $daemon 2>/dev/null || break
    sleep 0.05
done
sed 's/^/  | /' "$log"
[ -S "$WORK/root2/.ckptd.sock" ] || fail "ckptd never listened with a FIFO as its catalog"
grep -q "kept aside as $(re "$WORK/root2")/catalog.mdb.bad-" "$log" ||
    fail "ckptd's log does not say where the FIFO went"
kill -TERM $daemon
wait $daemon || fail "ckptd exited $? on SIGTERM"
kept=$(ls -d "$WORK/root2"/catalog.mdb.bad-* 2>/dev/null)
[ -p "$kept" ] || fail "the FIFO was not kept aside as catalog.mdb.bad-* (got '$kept')"
expect_exit 0 "$CKPT_INSPECT" "$WORK/root2"
expect_msg "^d " "the checkpoint d, from the rebuilt catalog"
finish
