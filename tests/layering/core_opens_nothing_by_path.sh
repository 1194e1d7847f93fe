#!/usr/bin/env bash
# Every look under a checkpoint root goes through the root's descriptor, never through
# a path (docs/FORMAT.md, "Links and special files"; libshard/ckpt/io/rootfs.h): a path
# is resolved again at each call, following any link someone planted in the root since.
# So the core (libshard/ckpt/) calls no libc function that takes a path (stat, lstat,
# open, opendir, access, fopen, mkdir, unlink, rename, ...; LMDB's mdb_env_open too),
# and passes AT_FDCWD to none of the *at calls, outside the short list below, each
# entry with its reason. Comments and string literals are not code and are skipped.
# Prints each offence as FILE:LINE: CALL and exits 1 if there is any.
#   core_opens_nothing_by_path.sh [SOURCE_ROOT]
set -euo pipefail
cd "${1:-$(dirname "$0")/../..}"

# FILE|TEXT ON THE LINE|why it is no look under a root
allowed=(
  "libshard/ckpt/io/rootfs.c|open(root,|the root itself, opened once as its user named it"
  "libshard/ckpt/io/rootfs.c|e->ops->open(e, AT_FDCWD, root,|the same, through a save's engine"
  "libshard/ckpt/io/rootfs.c|if (dir == AT_FDCWD)|ck__openat(AT_FDCWD, ...): a path the caller names, never one under a root"
  "libshard/ckpt/io/rootfs.c|openat(AT_FDCWD, rel,|the same"
  "libshard/ckpt/io/rootfs.c|if (dir == AT_FDCWD && slash == rel)|ck__parent_at on a path the caller names"
  "libshard/ckpt/io/rootfs.c|open(\"/\", O_PATH|the same: its parent /"
  "libshard/ckpt/io/rootfs.c|return dir == AT_FDCWD ?|the same"
  "libshard/ckpt/io/rootfs.c|if (dir != AT_FDCWD &&|the test that keeps paths under a root beneath it"
  "libshard/ckpt/io/rootfs.c|bool link = lstat(root, &st)|the root itself, named by its user: why it is no directory"
  "libshard/ckpt/io/rootfs.c|int s = stat(root, &st);|the same"
  "libshard/ckpt/format/names.c|if (mkdir(root, 0755)|ck_root_make: the root itself, as its user named it"
  "libshard/ckpt/io/rootfs.c|access(out, F_OK)|/proc/self/fd/N (ck__fd_path): is /proc mounted"
  "libshard/ckpt/format/reader.c|ck__openat(AT_FDCWD, dir,|ck_open_dir(DIR): DIR is the caller's (FORMAT.md says so)"
  "libshard/ckpt/format/manifest.c|mdb_env_open(env, mpath,|LMDB opens by path: /proc/self/fd/N of the file the save made"
  "libshard/ckpt/format/reader.c|mdb_env_open(ck->env, mpath,|LMDB on the manifest's sealed private copy, /proc/self/fd/N"
  "libshard/ckpt/format/catalog.c|mdb_env_open(c->env, mp,|LMDB on the catalog's private copy, /proc/self/fd/N"
  "libshard/ckpt/io/staging.c|fopen(file,|the kernel's THP setting under /sys, no root"
  "libshard/ckpt/io/writer.c|AT_FDCWD,|a file named by path (export's output), no root's: rel is NULL"
)

calls='stat|lstat|stat64|lstat64|open|open64|creat|fopen|freopen|opendir|access|euidaccess|'
calls+='eaccess|realpath|canonicalize_file_name|mkdir|rmdir|unlink|remove|rename|link|'
calls+='symlink|readlink|truncate|chmod|chown|lchown|utime|utimes|lutimes|mkfifo|mknod|'
calls+='statfs|statvfs|chdir|mdb_env_open|mdb_env_copy|dlopen'
# A call: the name not preceded by an identifier character or a member access (fstat,
# e->ops->open and s.open are other functions).
re="(^|[^A-Za-z0-9_>.])($calls)[[:space:]]*\\(|\\bAT_FDCWD\\b"

# Blanks comments and string and character literals, keeping lines where they are.
strip() {
    awk '{
        out = ""; n = length($0)
        for (i = 1; i <= n; i++) {
            c = substr($0, i, 1); d = substr($0, i, 2)
            if (inc) { if (d == "*/") { inc = 0; i++ }; continue }
            if (d == "/*") { inc = 1; i++; continue }
            if (d == "//") break
            if (c == "\"" || c == "\047") {
                q = c
                for (i++; i <= n; i++) {
                    c = substr($0, i, 1)
                    if (c == "\\") { i++; continue }
                    if (c == q) break
                }
                out = out q q; continue
            }
            out = out c
        }
        print out
    }' "$1"
}

bad=0
files=$(find libshard/ckpt -name '*.[ch]' | sort)
[ -n "$files" ] || { echo "path check: no sources under libshard/ckpt"; exit 1; }
for f in $files; do
    while IFS=: read -r line code; do
        orig=$(sed -n "${line}p" "$f")
        ok=0
        for a in "${allowed[@]}"; do
            IFS='|' read -r af text _why <<<"$a"
            if [ "$af" = "$f" ] && [[ "$orig" == *"$text"* ]]; then
                ok=1
                break
            fi
        done
        if [ "$ok" -eq 0 ]; then
            echo "$f:$line: reaches a path, not a descriptor beneath the root:$code"
            bad=1
        fi
    done < <(strip "$f" | grep -nE -- "$re" || true)
done
[ "$bad" -eq 0 ] || { echo "path check: the core opens or looks at paths (use io/rootfs.h's *at calls beneath the root)"; exit 1; }
echo "path check: the core reaches nothing under a root by path"
