#!/usr/bin/env bash
# The core's boundary is the build's (docs/decisions/0161): what links the public
# archive reaches the public API and nothing else.
#   - the public archive defines exactly the functions the public headers declare with
#     CK_API (libshard/include/ck/), and no private (ck__) one;
#   - a program that calls a private function, declared by a prototype of its own, does
#     not link against it; the same program calling a public function does;
#   - the Python extension exports PyInit__ck and nothing else.
#   public_api_is_all_that_links.sh SOURCE_ROOT PUBLIC_ARCHIVE CC [EXTENSION]
set -euo pipefail
src=$1 pub=$2 cc=$3 ext=${4:-}
bad=0
complain() { echo "$*"; bad=1; }
tmp=$(mktemp -d "${TMPDIR:-/tmp}/public-api.XXXXXX")
trap 'rm -rf "$tmp"' EXIT

# The CK_API prototypes: the name before the first "(" of each CK_API declaration.
sed -nE '/^CK_API /{:a; /\(/!{N; ba}; s/\(.*//; s/.*[ *]//; p}' \
    "$src"/libshard/include/ck/*.h | sort -u > "$tmp/declared"
nm -g --defined-only "$pub" | awk '$2 ~ /^[TDBRV]$/ {print $3}' | sort -u > "$tmp/defined"
[ -s "$tmp/declared" ] || complain "no CK_API prototype found in libshard/include/ck (is the parse broken?)"
while read -r s; do complain "the public archive exports $s, which no public header declares CK_API"
done < <(comm -13 "$tmp/declared" "$tmp/defined")
while read -r s; do complain "$s is declared CK_API but the public archive does not export it"
done < <(comm -23 "$tmp/declared" "$tmp/defined")

deps="-luring -llmdb -lcrypto -lpthread -lm"
cat > "$tmp/private.c" <<'C'
#include <stddef.h>
int ck__name_save(const char *name, const char *token, char *out, size_t len);
int main(void) { char b[64]; return ck__name_save("a", "b", b, sizeof b) < 0; }
C
cat > "$tmp/public.c" <<'C'
#include <stddef.h>
const char *ck_dtype_name(int dtype);
int main(void) { return ck_dtype_name(0) == NULL; }
C
# shellcheck disable=SC2086
$cc -o "$tmp/public" "$tmp/public.c" "$pub" $deps 2>"$tmp/public.err" ||
    complain "a program calling a public function does not link: $(head -3 "$tmp/public.err")"
# shellcheck disable=SC2086
if $cc -o "$tmp/private" "$tmp/private.c" "$pub" $deps 2>"$tmp/private.err"; then
    complain "a program calling the private ck__name_save links against the public archive"
elif ! grep -q "undefined reference to .ck__name_save" "$tmp/private.err"; then
    complain "the private call failed to link for another reason: $(head -3 "$tmp/private.err")"
fi

if [ -n "$ext" ]; then
    got=$(nm -D --defined-only "$ext" | awk '{print $3}' | tr '\n' ' ')
    [ "$got" = "PyInit__ck " ] || complain "the extension $ext exports more than PyInit__ck: $got"
fi
[ "$bad" -eq 0 ] || { echo "public API: the boundary leaks"; exit 1; }
echo "public API: $(wc -l < "$tmp/defined") functions, the CK_API ones, and nothing private link"
