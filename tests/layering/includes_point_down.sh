#!/usr/bin/env bash
# Every include points down a floor (docs/ARCHITECTURE.md's arrows, libshard/ckpt/README.md):
#   - inside the checkpoint core, a box includes only itself and the boxes below it,
#     public headers (ck/X.h) counting as the box that implements them;
#   - the core never includes MPI, CUDA, the training library, the trainer or export;
#   - the training library includes only the core's public headers, never the trainer;
#   - kernels/ knows nothing of libshard;
#   - private names (ck__) stay inside the core and the parts that use its internals;
#   - the module tree (libshard/train/module.c) names nothing of FSDP.
# Prints each offending include as FILE:LINE and exits 1 if there is any.
set -euo pipefail
cd "${1:-$(dirname "$0")/../..}"

boxes=(model io format load save ops async)
rank_of() {   # the floor of a box name, or of a public header's name
    case "$1" in
        error|types|layout|synth|grow|plan) echo 0 ;;
        engine|writer|hash|staging) echo 1 ;;
        ckpt|catalog) echo 2 ;;
        load) echo 3 ;;
        save) echo 4 ;;
        verify|compare|reshard) echo 5 ;;
        client|ck) echo 6 ;;
        *) for i in "${!boxes[@]}"; do [ "${boxes[$i]}" = "$1" ] && { echo "$i"; return; }; done
           echo 99 ;;
    esac
}

bad=0
complain() { echo "$1: $2"; bad=1; }

for i in "${!boxes[@]}"; do
    box=${boxes[$i]}
    [ -d "libshard/ckpt/$box" ] || complain "libshard/ckpt/$box" "missing box"
    while IFS=: read -r file line inc; do
        target=${inc#*\"}; target=${target%%\"*}
        case "$target" in
            ck/*) name=${target#ck/}; name=${name%.h}; floor=$(rank_of "$name") ;;
            */*)  floor=$(rank_of "${target%%/*}") ;;
            *)    complain "$file:$line" "include \"$target\" names no box"; continue ;;
        esac
        [ "$floor" -le "$i" ] || complain "$file:$line" "$box includes $target (a box above it)"
    done < <(grep -Hn '^#include "' libshard/ckpt/"$box"/*.[ch] || true)
done

# Public headers follow the same floors as the boxes that implement them.
for h in libshard/include/ck/*.h; do
    own=$(rank_of "$(basename "$h" .h)")
    while IFS=: read -r file line inc; do
        target=${inc#*\"}; target=${target%%\"*}
        case "$target" in
            ck/*) name=${target#ck/}; floor=$(rank_of "${name%.h}") ;;
            *)    complain "$file:$line" "a public header includes the private $target"; continue ;;
        esac
        [ "$floor" -le "$own" ] || complain "$file:$line" "includes $target (a floor above)"
    done < <(grep -Hn '^#include "' "$h" || true)
done

up() {   # up DIR REGEX WHY: no file under DIR includes a header matching REGEX
    local hits
    hits=$(grep -rHnE "^#include [<\"]($2)" "$1" --include='*.c' --include='*.h' --include='*.cu' || true)
    if [ -n "$hits" ]; then
        while IFS= read -r h; do complain "${h%%:#*}" "$3"; done <<<"$hits"
    fi
}
up libshard/ckpt   'mpi\.h|nccl|cuda|sh/|export/|cast\.h|ckpt\.h"' "the core includes training, export or device code"
up libshard/include/ck 'mpi\.h|nccl|cuda|sh/|export/' "a core header includes training, export or device code"
up libshard/train  'format/|io/|model/|save/|load/|ops/|async/|cli\.h|data\.h|layers\.h|lr\.h|saves\.h|step\.h|train\.h' \
   "the training library includes the core's internals or the trainer"
up libshard/include/sh 'format/|io/|model/|save/|load/|ops/|async/' "a training header includes the core's internals"
up kernels         'ck/|sh/|export/' "kernels/ includes libshard"

# ck__ names are the core's private ones: public headers never declare or use them,
# and neither do the parts of the project that are the core's users.
hits=$(grep -rnw -E 'ck__[a-z0-9_]+' libshard/include tools trainer examples libshard/train \
       --include='*.c' --include='*.h' || true)
if [ -n "$hits" ]; then
    while IFS= read -r h; do complain "${h%%:*}:$(cut -d: -f2 <<<"$h")" "uses a private ck__ name"; done <<<"$hits"
fi

# Modules know modules, not FSDP: fully_shard installs its hooks through the table.
if grep -nE 'fsdp|sh_group_' libshard/train/module.c; then
    complain libshard/train/module.c "names FSDP (it runs whatever hooks fully_shard installed)"
fi

if [ "$bad" -ne 0 ]; then
    echo "layering: includes that point up a floor (see libshard/ckpt/README.md)"
    exit 1
fi
echo "layering: every include points down"
