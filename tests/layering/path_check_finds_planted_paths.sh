#!/usr/bin/env bash
# core_opens_nothing_by_path.sh finds what it is there for. In a copy of the core:
# the copy as it is passes; a call named in a comment or a string passes; and each of
# stat, lstat, open, opendir, access, fopen, unlink by path and openat(AT_FDCWD, ...)
# planted in a file of the core, one at a time, fails the check, named by file and
# line, also in a file the allow-list names for other lines.
#   path_check_finds_planted_paths.sh [SOURCE_ROOT]
set -euo pipefail
src=$(cd "${1:-$(dirname "$0")/../..}" && pwd)
check="$src/tests/layering/core_opens_nothing_by_path.sh"
tmp=$(mktemp -d "${TMPDIR:-/tmp}/path-check.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$tmp/libshard"
cp -r "$src/libshard/ckpt" "$tmp/libshard/"
fail() { echo "path check test: $*"; exit 1; }

"$check" "$tmp" >/dev/null || fail "the check fails on an untouched copy of the core"

for f in save/meet.c io/rootfs.c; do
    file="$tmp/libshard/ckpt/$f"
    cp "$file" "$tmp/orig.c"
    cat >> "$file" <<'EOF'
/* A comment may say stat(path, &st) or open(path): no call. */
static const char *planted_words = "lstat(path) access(path, F_OK)";
EOF
    "$check" "$tmp" >/dev/null || fail "a comment or a string in $f was taken for a call"
    for call in 'stat(path, &st)' 'lstat(path, &st)' 'open(path, O_RDONLY)' \
                'opendir(path) != NULL' 'access(path, F_OK)' 'fopen(path, "r") != NULL' \
                'unlink(path)' 'openat(AT_FDCWD, path, O_RDONLY)'; do
        cp "$tmp/orig.c" "$file"
        printf 'static int planted(const char *path)\n{\n    struct stat st;\n    return %s;\n}\n' \
            "$call" >> "$file"
        line=$(($(wc -l < "$file") - 1))
        if out=$("$check" "$tmp"); then
            fail "$call planted in $f was not found"
        fi
        grep -q "^libshard/ckpt/$f:$line: " <<<"$out" ||
            fail "$call planted in $f:$line was not named by file and line: $out"
    done
    cp "$tmp/orig.c" "$file"
done
echo "path check test: every planted call by path is found, named by file and line"
