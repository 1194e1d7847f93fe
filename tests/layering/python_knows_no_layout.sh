#!/usr/bin/env bash
# The Python layer (python/libshard) reaches the checkpoint core only through its
# extension, libshard._ck, and knows nothing of the layout on disk: only the core
# does (docs/FORMAT.md, "Directory layout"), so that a change of layout is a change
# of the core alone.
#   - no module names a file or directory of the layout: the pending directory, a
#     manifest, the catalog, a lock, heartbeat or socket file of the root, a data file;
#   - no module reaches around the extension: no ctypes or cffi, no locks of its own
#     (fcntl), no LMDB;
#   - the extension (_ck/*.c) includes only public headers: the core's (ck/*.h) and
#     the export library's (export/*.h).
# Prints each offence as FILE:LINE and exits 1 if there is any.
set -euo pipefail
cd "${1:-$(dirname "$0")/../..}/python"

bad=0
check() {   # check REGEX WHY FILES...: no line of FILES matches REGEX
    local re=$1 why=$2 hits
    shift 2
    hits=$(grep -HnE -- "$re" "$@" || true)
    if [ -n "$hits" ]; then
        while IFS= read -r h; do echo "${h%%:*}:$(cut -d: -f2 <<<"$h"): $why"; done <<<"$hits"
        bad=1
    fi
}
py=$(find libshard -name '*.py' | sort)
[ -n "$py" ] || { echo "python layering: no Python modules under python/libshard"; exit 1; }
# shellcheck disable=SC2086
{
check '(^|[^A-Za-z0-9_])\.pending\b' "names the pending directory (the core's layout)" $py
check 'manifest\.mdb|catalog\.mdb' "names a manifest or catalog file (the core's layout)" $py
# In a string: a lock attribute (self.lock) is no file name.
check "[\"'][^\"']*(\\.lock\\b|\\.ckptd\\.|\\.beat\\b)" \
    "names a lock, heartbeat or daemon file (the core's layout)" $py
check 'rank-%|rank-\{|\.dat\b' "names a data file (the core's layout)" $py
check '^\s*(import|from)\s+(ctypes|cffi|fcntl|lmdb)\b|\bflock\b|\bCDLL\b' \
    "reaches around libshard._ck (ctypes, cffi, locks or LMDB of its own)" $py
}
hits=$(grep -HnE '^#include "' libshard/_ck/*.c libshard/_ck/*.h | grep -vE '#include "((ck|export)/[a-z_]+\.h|ckpy\.h)"' || true)
if [ -n "$hits" ]; then
    while IFS= read -r h; do echo "${h%%:#*}: the extension includes a private header"; done <<<"$hits"
    bad=1
fi
[ "$bad" -eq 0 ] || { echo "python layering: the Python layer knows the core's layout"; exit 1; }
echo "python layering: python/ reaches the core only through libshard._ck"
