#!/usr/bin/env bash
# includes_point_down.sh finds what its newer rules are there for. In a copy of the
# tree, which passes as it is, each of these planted on its own fails the check, named
# by file:
#   - a core file calling a function of a box above it (model/ calling save/);
#   - tools/, trainer/ or the export library including a private header of the core;
#   - the export library or a tool declaring a private (ck__) prototype of its own.
#   layering_finds_planted_violations.sh [SOURCE_ROOT]
set -euo pipefail
src=$(cd "${1:-$(dirname "$0")/../..}" && pwd)
check="$src/tests/layering/includes_point_down.sh"
tmp=$(mktemp -d "${TMPDIR:-/tmp}/layering-check.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
for d in libshard tools trainer examples kernels; do
    cp -r "$src/$d" "$tmp/"
done
fail() { echo "layering check test: $*"; exit 1; }

"$check" "$tmp" >/dev/null || fail "the check fails on an untouched copy of the tree"

plant() {   # plant FILE WHAT TEXT: TEXT appended to FILE fails the check, naming FILE
    local file=$1 what=$2 text=$3 out
    cp "$tmp/$file" "$tmp/orig"
    printf '%s\n' "$text" >> "$tmp/$file"
    if out=$("$check" "$tmp"); then
        fail "$what planted in $file was not found"
    fi
    grep -q "^$file[:]" <<<"$out" || fail "$what planted in $file was not named: $out"
    cp "$tmp/orig" "$tmp/$file"
}
plant libshard/ckpt/model/types.c "a call up to save/" \
    'int planted_up(void); int planted_up(void) { return ck__save_prepare(NULL, NULL); }'
plant tools/ckpt-inspect.c "a private include" '#include "format/layout.h"'
plant trainer/train.c "a private include" '#include "save/save_int.h"'
plant libshard/export/consolidate.c "a private include" '#include "io/writer.h"'
plant libshard/export/names.c "a private prototype" \
    'int ck__name_save(const char *name, const char *token, char *out, unsigned long len);'
plant tools/ckpt-verify.c "a private prototype" 'void ck__staging_unmap(void *p, unsigned long n);'
"$check" "$tmp" >/dev/null || fail "the copy does not pass again once restored"
echo "layering check test: every planted upward call, private include and private" \
     "prototype is found, named by file"
