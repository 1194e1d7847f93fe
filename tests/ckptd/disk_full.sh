#!/usr/bin/env bash
# Disk full for real: a small ext4 image on a loop device, filled by saves through
# ckptd and embedded. Each save that does not fit fails with ENOSPC naming the file,
# every earlier checkpoint still deep-verifies, the pending directory is cleaned, and
# once space is freed the same daemon serves a save again. Skips (77) with the reason
# where a loop device cannot be mounted (not root, no loop support, no mkfs.ext4).
#   disk_full.sh CKPTD CKPT_SYNTH CKPT_VERIFY
set -uo pipefail
ckptd=$1 synth=$2 verify=$3
skip() { echo "skip: $*"; exit 77; }
[ "$(id -u)" -eq 0 ] || skip "mounting a loop device needs root"
command -v mkfs.ext4 >/dev/null || skip "no mkfs.ext4 (e2fsprogs)"
base=${TMPDIR:-/var/tmp}
img=$(mktemp "$base/diskfull.XXXXXX.img")
mnt=$(mktemp -d "$base/diskfull.XXXXXX")
daemon=
cleanup() {
    [ -z "$daemon" ] || { kill -9 "$daemon" 2>/dev/null; wait "$daemon" 2>/dev/null; }
    if mountpoint -q "$mnt"; then umount "$mnt" 2>/dev/null || umount -l "$mnt"; fi
    rmdir "$mnt" 2>/dev/null
    rm -f "$img"
}
trap cleanup EXIT
truncate -s 64M "$img"
mkfs.ext4 -q -F "$img" >/dev/null 2>&1 || skip "mkfs.ext4 failed on $img"
out=$(mount -o loop "$img" "$mnt" 2>&1) || skip "cannot mount a loop device here: $out"

fail=0
check() {   # check COMMAND MESSAGE [SAVE]: on failure the message, and SAVE's output
    if ! eval "$1"; then
        echo "FAILED: $2"
        [ -z "${3:-}" ] || cat "$base/diskfull.$3.out"
        fail=1
    fi
}
root=$mnt/ck
mkdir "$root"
# Ballast, freed at the end to make room.
dd if=/dev/zero of="$mnt/ballast" bs=1M count=24 status=none
synth() {   # synth NAME BYTES [--daemon SOCK]: 2 ranks, world 2, seed 7; its output in $mnt.../NAME.out
    "$synth" "$root" --name "$1" --mesh 2 --tensors 2 --bytes "$2" --seed 7 --world 2 \
        --hash-threads 2 "${@:3}" >"$base/diskfull.$1.out" 2>&1
}
pending_empty() { [ -z "$(ls -A "$root/.pending" 2>/dev/null)" ]; }
enospc_named() {   # the output names ENOSPC and a file of the save
    grep -q "No space left on device" "$base/diskfull.$1.out" &&
        grep -qE "(rank-[0-9]+\.dat|manifest\.mdb)" "$base/diskfull.$1.out"
}

# Embedded.
check "synth e1 8MiB" "embedded: a save that fits failed" e1
synth e2 64MiB; rc=$?
check "[ $rc -ne 0 ]" "embedded: a save larger than the disk succeeded"
check "enospc_named e2" "embedded: no ENOSPC naming the file" e2
check "pending_empty" "embedded: the failed save left debris in $root/.pending"
check "[ ! -e '$root/e2' ]" "embedded: the failed save is visible"

# Through ckptd.
"$ckptd" --root "$root" --foreground --log "$base/diskfull.ckptd.log" --staging 256MiB &
daemon=$!
for _ in $(seq 200); do [ -S "$root/.ckptd.sock" ] && break; sleep 0.05; done
sock=$root/.ckptd.sock
check "synth d1 8MiB --daemon $sock" "ckptd: a save that fits failed" d1
synth d2 64MiB --daemon "$sock"; rc=$?
check "[ $rc -ne 0 ]" "ckptd: a save larger than the disk succeeded"
check "enospc_named d2" "ckptd: no ENOSPC naming the file" d2
check "pending_empty" "ckptd: the failed save left debris in $root/.pending"
check "[ ! -e '$root/d2' ]" "ckptd: the failed save is visible"
for n in e1 d1; do
    check "'$verify' --deep '$root' $n >/dev/null" "$n does not verify after the disk filled"
done

# Space freed: the same daemon serves again.
rm -f "$mnt/ballast"
check "synth d3 16MiB --daemon $sock" "ckptd: no save after space was freed" d3
check "'$verify' --deep '$root' d3 >/dev/null" "d3 does not verify"
kill -TERM "$daemon"; wait "$daemon"; rc=$?; daemon=
check "[ $rc -eq 0 ]" "ckptd exited $rc on SIGTERM"
grep -h -m1 "No space" "$base"/diskfull.e2.out
grep -h -m1 "No space" "$base"/diskfull.d2.out
rm -f "$base"/diskfull.*.out
[ $fail -eq 0 ] && echo "ok: disk full on a real ext4 image: ENOSPC named the file, earlier checkpoints intact, .pending clean, ckptd served again once space was freed"
[ $fail -eq 0 ] && rm -f "$base/diskfull.ckptd.log"
exit $fail
