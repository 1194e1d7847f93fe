#!/usr/bin/env bash
# peer-get - what the sender's reads give a GET (decision 0202): one ckptd on loopback
# (A) serves a checkpoint of SIZE from its local tier, on the file system of TMPDIR
# (the disk); ckptctl peer get fetches it whole, every block checked, into a copy on
# INTO (a tmpfs unless set: the receiver's writes out of the way, so what is left is
# the sender's reads, the link and the receiver's SHA-256). Each GET runs after the
# page cache was dropped (root; else the figures say "cache not dropped"), RUNS times.
# Beside them, in the same run:
#   read QD1    the checkpoint's data files read with O_DIRECT, 1 MiB at a time (dd),
#               one after the other: the sender's reads before decision 0202
#   read QD4    the same bytes as four dd at once, each a quarter of every file: what
#               a disk gives to four reads in flight (the sender's readers now)
#   SHA-256     one core hashing 1 MiB blocks (openssl speed): the receiver's floor
#               here, with one checker on two cores
#   [INTO=DIR] bench/peer-get.sh [BUILDDIR] [SIZE] [RUNS]
set -uo pipefail
b=$(realpath "${1:-build}")
size=${2:-1GiB}
runs=${3:-3}
work=$(mktemp -d "${TMPDIR:-/var/tmp}/peer-get.XXXXXX")
into=$(mktemp -d "${INTO:-/dev/shm}/peer-get-into.XXXXXX")
pid=
cleanup() {
    [ -n "$pid" ] && kill "$pid" 2>/dev/null && wait "$pid" 2>/dev/null
    rm -rf "$work" "$into"
}
trap cleanup EXIT
export CKPTD_PEER_KEY=$work/peer.key
mkdir -p "$work/A.local" "$work/A.durable"
"$b/tools/ckpt-synth" "$work/A.local" --name c1 --mesh 4 --tensors 8 --bytes "$size" \
    > /dev/null || { echo "peer-get: ckpt-synth failed" >&2; exit 1; }
"$b/ckptd/ckptd" --root "$work/A.durable" --id A --local-root "$work/A.local" \
    --peer-listen 127.0.0.1:0 --foreground --log "$work/A.log" --staging 64MiB &
pid=$!
for _ in $(seq 200); do [ -s "$work/A.durable/.ckptd.A.peer" ] && break; sleep 0.05; done
[ -s "$work/A.durable/.ckptd.A.peer" ] || { cat "$work/A.log" >&2; exit 1; }

drop() {
    sync
    if echo 3 > /proc/sys/vm/drop_caches 2>/dev/null; then cached=""; else
        cached=" (cache not dropped: not root)"; fi
}
secs() { local t0=$1 t1; t1=$(date +%s.%N); echo "$t1 - $t0" | bc -l; }
files=("$work"/A.local/c1/*.dat)
bytes=$(cat "${files[@]}" | wc -c)
gbs() { printf '%.2f' "$(echo "$bytes / $1 / 1000000000" | bc -l)"; }

echo "peer-get: a GET of $size ($bytes bytes of data) from ckptd A on loopback," \
     "from $(df --output=source "$work" | tail -1) into $(df --output=fstype "$into" | tail -1)"
for r in $(seq "$runs"); do
    rm -rf "${into:?}/c1"
    drop
    t0=$(date +%s.%N)
    "$b/ckptd/ckptctl" peer get --to A --root "$work/A.durable" --into "$into" c1 --all \
        > "$work/get.out" 2>&1 || { cat "$work/get.out" >&2; exit 1; }
    t=$(secs "$t0")
    printf 'GET, run %d            %6.3f s  %s GB/s%s\n' "$r" "$t" "$(gbs "$t")" "$cached"

    drop
    t0=$(date +%s.%N)
    for f in "${files[@]}"; do dd if="$f" of=/dev/null bs=1M iflag=direct status=none; done
    t=$(secs "$t0")
    printf '  read QD1             %6.3f s  %s GB/s%s\n' "$t" "$(gbs "$t")" "$cached"

    drop
    t0=$(date +%s.%N)
    readers=()
    for q in 0 1 2 3; do
        for f in "${files[@]}"; do
            n=$(( $(stat -c %s "$f") / 1048576 )) k=$(( (n + 3) / 4 ))
            dd if="$f" of=/dev/null bs=1M iflag=direct skip=$((q * k)) count=$k status=none
        done &
        readers+=($!)
    done
    wait "${readers[@]}"
    t=$(secs "$t0")
    printf '  read QD4             %6.3f s  %s GB/s%s\n' "$t" "$(gbs "$t")" "$cached"
done
k=$(openssl speed -seconds 1 -bytes 1048576 sha256 2>/dev/null | awk '/^sha256/ { sub("k", "", $2); print $2 }')
printf 'SHA-256, one core               %.2f GB/s (openssl speed, 1 MiB blocks)\n' \
    "$(echo "$k / 1000000" | bc -l)"
grep -o "GET of c1: sent [0-9]* bytes (window [0-9]* MiB)" "$work/A.log" | tail -1
