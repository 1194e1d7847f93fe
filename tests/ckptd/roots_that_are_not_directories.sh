#!/usr/bin/env bash
# roots_that_are_not_directories.sh file|fifo|dangling|link_to_file
# A checkpoint root that is a regular file, a FIFO, a link to nothing or a link to a
# file is refused by every entry point as "not a directory", naming the path and what
# it is (issue 28, defect 10; on main a save said "File exists" and a link to nothing
# "No such file or directory"): ckpt-inspect ROOT, ckpt-inspect ROOT NAME, ckpt-verify
# ROOT, --rebuild-catalog, a save (ckpt-synth, whole and through embedded clients) and
# ckptd's start. Nothing is made in its place, and nothing hangs on the FIFO.
TOOL_TIMEOUT=${TOOL_TIMEOUT:-20}
. "$(dirname "$0")/../ckpt/bad/lib.sh"
[ -x "${CKPTD:-}" ] || skip "\$CKPTD is not set (run through meson test)"
kind=${1:-}
TEST_NAME="$TEST_NAME $kind"

mkdir "$WORK/r"
R=$WORK/r/root
case $kind in
file) echo "not a root" >"$R"; what="a regular file" ;;
fifo) mkfifo "$R"; what="a FIFO" ;;
dangling) ln -s "$WORK/r/nowhere" "$R"; what="a symbolic link to nothing" ;;
link_to_file) echo "not a root" >"$WORK/r/f"; ln -s "$WORK/r/f" "$R"; what="a symbolic link to a regular file" ;;
*) fail "usage: roots_that_are_not_directories.sh file|fifo|dangling|link_to_file" ;;
esac
before=$(ls -lA --time-style=full-iso "$WORK/r" | sed 1d)
msg="$(re "$R"): the checkpoint root is not a directory \(it is $what\)"

expect_exit 2 "$CKPT_INSPECT" "$R"
expect_msg "$msg" "the root as not a directory"
expect_exit 2 "$CKPT_INSPECT" "$R" --json
expect_msg "$msg" "the root as not a directory"
expect_exit 2 "$CKPT_INSPECT" "$R" c
expect_msg "$msg" "the root as not a directory"
expect_exit 2 "$CKPT_VERIFY" "$R"
expect_msg "$msg" "the root as not a directory"
expect_exit 2 "$CKPT_INSPECT" "$R" --rebuild-catalog
expect_msg "$msg" "the root as not a directory"
expect_exit 2 "$CKPT_SYNTH" "$R" --name c --mesh 2 --tensors 1 --bytes 8KiB
expect_msg "$msg" "the root as not a directory, at a save"
expect_no_msg "File exists" "'File exists'"
expect_exit 2 "$CKPT_SYNTH" "$R" --name c --mesh 2 --world 2 --tensors 1 --bytes 8KiB
# Both ranks fail at the root; which one is reported first is a race, so any rank
# may be named, but one must be.
expect_msg "rank [0-9]+: $msg" "the root as not a directory, at an embedded client's save"
expect_exit 1 "$CKPTD" --root "$R" --socket "$WORK/d.sock" --foreground --staging 16MiB
expect_msg "cannot start: $msg" "the root as not a directory, at ckptd's start"
[ "$before" = "$(ls -lA --time-style=full-iso "$WORK/r" | sed 1d)" ] || fail "something was made or changed beside the root"
finish
