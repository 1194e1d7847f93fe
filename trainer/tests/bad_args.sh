#!/usr/bin/env bash
# shard-train refuses bad device options with exit 2 and a message naming the option:
# an unknown --device, --safetensors evaluation on cuda (it reads into host memory),
# and, in a build without a usable GPU, --device cuda fails (exit 1) saying why.
#   bad_args.sh SHARD-TRAIN
set -uo pipefail
train=$1
fail=0
expect() {   # STATUS PATTERN ARGS...
    local want=$1 pat=$2
    shift 2
    out=$("$train" "$@" 2>&1)
    local rc=$?
    if [ $rc -ne "$want" ] || ! grep -q -- "$pat" <<<"$out"; then
        echo "FAIL: shard-train $*: exit $rc (want $want), output: $out"
        fail=1
    fi
}
expect 2 "--device: 'tpu' is neither cpu nor cuda" --steps 1 --device tpu
expect 2 "--safetensors reads into host memory" --eval --safetensors /nonexistent --device cuda
if ! nvidia-smi -L 2>/dev/null | grep -q GPU; then
    expect 1 "CUDA" --steps 1 --device cuda
fi
[ $fail -eq 0 ] && echo "ok: bad device options refused with a message naming them"
exit $fail
