#!/usr/bin/env bash
# Every include points down a floor (docs/ARCHITECTURE.md's arrows, libshard/ckpt/README.md):
#   - inside the checkpoint core, a box includes only itself and the boxes below it,
#     public headers (ck/X.h) counting as the box that implements them;
#   - the core never includes MPI, CUDA, the training library, the trainer or export;
#   - the training library includes only the core's public headers, never the trainer;
#   - inside the training library (libshard/train/README.md), a box includes only
#     itself and the boxes of lower floors, naming private headers from their folder;
#     its calls point the same way, and no files of it call each other in a circle;
#   - kernels/ knows nothing of libshard;
#   - the core's calls point down too: a file names only functions defined in its own
#     box or the boxes below it (a prototype can be repeated, an include cannot);
#   - the core's users outside it (tools/, trainer/, examples/, the export library)
#     include only public headers, and private names (ck__) stay inside the core and
#     the parts that use its internals on purpose (ckptd, benchmarks, tests, fuzzers):
#     no private prototype declared locally either (the public archive would not link
#     it: tests/layering/public_api_is_all_that_links.sh);
#   - the module tree (libshard/train/module/) names nothing of FSDP.
# Prints each offending include or call as FILE[:LINE] and exits 1 if there is any.
set -euo pipefail
cd "${1:-$(dirname "$0")/../..}"

boxes=(model io format load save ops async)
rank_of() {   # the floor of a box name, or of a public header's name
    case "$1" in
        error|types|layout|synth|grow|plan) echo 0 ;;
        engine|writer|hash|staging) echo 1 ;;
        ckpt|catalog|steps|decl) echo 2 ;;
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
for d in tools trainer examples libshard/export; do
    up "$d" 'format/|io/|model/|save/|load/|ops/|async/' "$d includes the core's internals"
done

# ck__ names are the core's private ones: public headers never declare or use them,
# and neither do the parts of the project that are the core's users.
hits=$(grep -rnw -E 'ck__[a-z0-9_]+' libshard/include tools trainer examples libshard/train \
       libshard/export \
       --include='*.c' --include='*.h' || true)
if [ -n "$hits" ]; then
    while IFS= read -r h; do complain "${h%%:*}:$(cut -d: -f2 <<<"$h")" "uses a private ck__ name"; done <<<"$hits"
fi

# ---- The training library's boxes (libshard/train/README.md), on floors: a box
# includes only itself and boxes of lower floors, never one of its own floor.
T=libshard/train
train_boxes=(device comm world compute module fsdp optim checkpoint)
train_floor() {
    case "$1" in
        device|comm) echo 0 ;;
        world) echo 1 ;;
        compute|module) echo 2 ;;
        fsdp|optim) echo 3 ;;
        checkpoint) echo 4 ;;
        *) echo 99 ;;
    esac
}
for b in "${train_boxes[@]}"; do
    [ -d "$T/$b" ] || complain "$T/$b" "missing box"
done
for d in "$T"/*/; do
    [ "$(train_floor "$(basename "$d")")" != 99 ] || complain "$d" "a folder that is no box"
done
for f in "$T"/*.[ch]; do
    [ ! -e "$f" ] || complain "$f" "a source file outside the boxes"
done
box_of() { local b=${1#"$T"/}; echo "${b%%/*}"; }
while IFS=: read -r file line inc; do
    box=$(box_of "$file")
    target=${inc#*\"}; target=${target%%\"*}
    case "$target" in
        sh/*|ck/*) ;;   # the public headers, the library's contract
        */*)
            tbox=${target%%/*}; tfloor=$(train_floor "$tbox")
            if [ "$tfloor" = 99 ] || [ ! -e "$T/$target" ]; then
                complain "$file:$line" "include \"$target\" names no box's header"
            elif [ "$tbox" != "$box" ] && [ "$tfloor" -ge "$(train_floor "$box")" ]; then
                complain "$file:$line" "$box includes $target (a box on its floor or above)"
            fi ;;
        *)  # kernels/ headers; a private header is named from its folder
            if [ -n "$(find "$T" -name "$target" -print -quit)" ]; then
                complain "$file:$line" "include \"$target\": name it from its box's folder"
            fi ;;
    esac
done < <(grep -Hn '^#include "' "$T"/*/*.[ch] || true)

# The same for calls, which an include does not show (a declaration can be repeated):
# each file's global sh_* functions and tables are found where they are defined, and
# a file that names one of another box calls down a floor. No files call each other
# in a circle, in a box or across (fsdp.c and fsdp_hooks.c once did).
strip_c() {   # FILE: its code, comments and string and character literals blanked
    awk '{
        out = ""; n = length($0); i = 1
        while (i <= n) {
            c = substr($0, i, 1); d = substr($0, i, 2)
            if (incomment) { if (d == "*/") { incomment = 0; i += 2 } else i++; continue }
            if (d == "/*") { incomment = 1; i += 2; continue }
            if (d == "//") break
            if (c == "\"" || c == "\047") {
                for (i++; i <= n; i++) {
                    e = substr($0, i, 1)
                    if (e == "\\") i++
                    else if (e == c) break
                }
                i++; out = out c c; continue
            }
            out = out c; i++
        }
        print out
    }' "$1"
}
declare -A defined_in   # symbol -> the files that define it (CUDA and CPU twins)
train_c=("$T"/*/*.c)
for f in "${train_c[@]}"; do
    while read -r sym; do
        defined_in[$sym]+="$f "
    done < <(strip_c "$f" | sed -nE '/^(static|typedef|extern|#)/d
        /;[[:space:]]*$/{/=/!d}
        s/^[A-Za-z_][^;=(]*[ *](sh_[a-z0-9_]+)[[:space:]]*(\(|=).*/\1/p')
done
edges=()
for f in "${train_c[@]}"; do
    box=$(box_of "$f"); floor=$(train_floor "$box")
    while read -r sym; do
        # A file that defines the symbol too (a twin: CUDA's and the CPU build's) uses
        # its own.
        [[ " ${defined_in[$sym]:-} " != *" $f "* ]] || continue
        for g in ${defined_in[$sym]:-}; do
            edges+=("$f $g")
            gbox=$(box_of "$g")
            if [ "$gbox" != "$box" ] && [ "$(train_floor "$gbox")" -ge "$floor" ]; then
                complain "$f" "$box calls $sym of $g (a box on its floor or above)"
            fi
        done
    done < <(strip_c "$f" | grep -oE '\bsh_[a-z0-9_]+' | sort -u)
done
[ "${#edges[@]}" -gt 0 ] || complain "$T" "no calls between files found (is the parse broken?)"
loop=$(printf '%s\n' "${edges[@]}" | sort -u | tsort 2>&1 >/dev/null || true)
if [ -n "$loop" ]; then
    complain "$T" "files that call each other in a circle: $(grep -o "$T/[^ ]*" <<<"$loop" |
        tr '\n' ' ')"
fi

# The checkpoint core's files call each other without a circle too (client.c and its
# transports once did, through the state calls now in client_state.c): its global ck_
# and ck__ functions are found where they are defined, as above.
declare -A ck_defined_in
core_c=(libshard/ckpt/*/*.c)
for f in "${core_c[@]}"; do
    while read -r sym; do
        ck_defined_in[$sym]+="$f "
    done < <(strip_c "$f" | sed -nE '/^(static|typedef|extern|#)/d
        /;[[:space:]]*$/{/=/!d}
        s/^[A-Za-z_][^;=(]*[ *](ck_[a-z0-9_]+)[[:space:]]*(\(|=).*/\1/p')
done
ck_edges=()
core_box() { local b=${1#libshard/ckpt/}; rank_of "${b%%/*}"; }
for f in "${core_c[@]}"; do
    floor=$(core_box "$f")
    while read -r sym; do
        for g in ${ck_defined_in[$sym]:-}; do
            [ "$g" != "$f" ] && ck_edges+=("$f $g")
            [ "$(core_box "$g")" -le "$floor" ] ||
                complain "$f" "calls $sym of $g (a box above it)"
        done
    done < <(strip_c "$f" | grep -oE '\bck_[a-z0-9_]+' | sort -u)
done
[ "${#ck_edges[@]}" -gt 0 ] || complain libshard/ckpt "no calls between files found (is the parse broken?)"
loop=$(printf '%s\n' "${ck_edges[@]}" | sort -u | tsort 2>&1 >/dev/null || true)
if [ -n "$loop" ]; then
    complain libshard/ckpt "files that call each other in a circle: $(grep -o 'libshard/ckpt/[^ ]*' <<<"$loop" |
        tr '\n' ' ')"
fi

# Modules know modules, not FSDP: fully_shard installs its hooks through the table, and
# finds a module's group as the state of its own hooks.
if grep -rnE 'fsdp|sh_group' "$T/module"; then
    complain "$T/module" "names FSDP (it runs whatever hooks fully_shard installed)"
fi

if [ "$bad" -ne 0 ]; then
    echo "layering: includes or calls that point up a floor (see libshard/ckpt/README.md" \
         "and libshard/train/README.md)"
    exit 1
fi
echo "layering: every include points down"
