#!/bin/bash
# Peak RSS of ckpt-consolidate on a 256 MiB tensor with --mem-limit 16M stays within
# a bound proportional to the limit (3x it plus 40 MiB of program), far below the
# tensor. Measured with /usr/bin/time -v (skips without it).
set -u
[ -x /usr/bin/time ] || { echo "no /usr/bin/time: skip"; exit 77; }
root=$(mktemp -d "${TMPDIR:-/var/tmp}/ck-rss-XXXXXX")
trap 'rm -rf "$root"' EXIT
"$CKPT_SYNTH" "$root" --name big --mesh 4 --tensors 1 --bytes 256MiB >/dev/null || exit 1
limit_mib=16
# Under AddressSanitizer freed memory waits in a quarantine (256 MiB by default)
# before reuse, which would measure ASan, not the program: no quarantine here.
export ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}quarantine_size_mb=0:thread_local_quarantine_size_kb=0"
for dtype in keep bf16; do
    log=$(/usr/bin/time -v "$CKPT_CONSOLIDATE" "$root" big -o "$root/out-$dtype" \
          --mem-limit ${limit_mib}M --dtype $dtype 2>&1) || { echo "$log"; exit 1; }
    kb=$(echo "$log" | awk -F: '/Maximum resident set size/ { gsub(/ /, "", $2); print $2 }')
    bound=$(( (3 * limit_mib + 40) * 1024 ))
    echo "dtype $dtype: peak RSS $((kb / 1024)) MiB (bound $((bound / 1024)) MiB, tensor 256 MiB)"
    [ "$kb" -le "$bound" ] || { echo "FAIL: peak RSS $kb KiB > $bound KiB"; exit 1; }
done
exit 0
