#!/bin/bash
# The official Python safetensors package reads ckpt-consolidate's output (single and
# sharded), and every element equals the synth formula recomputed in numpy. The venv
# lives under the build directory; without PyPI the test skips (77).
set -u
venv=$BUILD_DIR/py-safetensors-venv
if ! "$venv/bin/python" -c 'import safetensors, numpy' 2>/dev/null; then
    python3 -m venv "$venv" >/dev/null 2>&1 || { echo "no python3 venv: skip"; exit 77; }
    timeout 180 "$venv/bin/pip" install -q safetensors numpy >/dev/null 2>&1 ||
        { echo "pip cannot install safetensors numpy (no PyPI?): skip"; exit 77; }
fi
root=$(mktemp -d "${TMPDIR:-/var/tmp}/ck-py-XXXXXX")
trap 'rm -rf "$root"' EXIT
"$CKPT_SYNTH" "$root" --name src --mesh 2x4 --tensors 5 --bytes 3MiB --uneven --seed 11 \
    >/dev/null || exit 1
"$CKPT_SYNTH" "$root" --name h --mesh 3 --tensors 2 --bytes 1MiB --dtype bf16 --seed 12 \
    >/dev/null || exit 1
"$CKPT_SYNTH" "$root" --name u --mesh 4 --tensors 3 --bytes 1MiB --dtype u16 --boxes --uneven \
    --seed 13 >/dev/null || exit 1
"$CKPT_CONSOLIDATE" "$root" src -o "$root/single" >/dev/null || exit 1
"$CKPT_CONSOLIDATE" "$root" u -o "$root/u" >/dev/null || exit 1
"$CKPT_CONSOLIDATE" "$root" src -o "$root/sharded" --max-shard-size 700KB >/dev/null || exit 1
"$CKPT_CONSOLIDATE" "$root" h -o "$root/h" >/dev/null || exit 1
"$venv/bin/python" - "$root" <<'PY'
import json, os, sys
import numpy as np
from safetensors.numpy import load_file
root = sys.argv[1]
M = np.uint64(0xFFFFFFFFFFFFFFFF)
def formula(seed, i, n):
    with np.errstate(over='ignore'):
        x = np.uint64(seed) ^ (np.uint64(i) << np.uint64(40)) ^ np.arange(n, dtype=np.uint64)
        z = x + np.uint64(0x9E3779B97F4A7C15)
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        return z ^ (z >> np.uint64(31))
def check(tensors, seed, itemsize):
    for name, arr in tensors.items():
        i = int(name[1:])
        want = formula(seed, i, arr.size).view(np.uint8).reshape(-1, 8)[:, :itemsize]
        got = np.ascontiguousarray(arr).view(np.uint8).reshape(-1, itemsize)
        assert np.array_equal(want, got), f"{name}: differs from the formula"
single = load_file(os.path.join(root, "single", "model.safetensors"))
assert sorted(single) == [f"t{i}" for i in range(5)], sorted(single)
assert all(a.dtype == np.float32 and a.ndim == 2 for a in single.values())
check(single, 11, 4)
idx = json.load(open(os.path.join(root, "sharded", "model.safetensors.index.json")))
files = sorted(set(idx["weight_map"].values()))
assert len(files) > 1, files
merged = {}
for f in files:
    merged.update(load_file(os.path.join(root, "sharded", f)))
assert sorted(merged) == sorted(single)
assert idx["metadata"]["total_size"] == sum(a.nbytes for a in merged.values())
for k in single:
    assert np.array_equal(single[k].view(np.uint32), merged[k].view(np.uint32)), k
# bf16 has no numpy dtype: read it through the torch-free API as raw bytes.
from safetensors import safe_open
with safe_open(os.path.join(root, "h", "model.safetensors"), framework="numpy") as f:
    pass
import struct
with open(os.path.join(root, "h", "model.safetensors"), "rb") as fh:
    n = struct.unpack("<Q", fh.read(8))[0]
    hdr = json.loads(fh.read(n))
    assert hdr["__metadata__"] == {"format": "pt"}
    data = fh.read()
for name, v in hdr.items():
    if name == "__metadata__":
        continue
    assert v["dtype"] == "BF16"
    b, e = v["data_offsets"]
    check({name: np.frombuffer(data[b:e], dtype=np.uint16)}, 12, 2)
# A box-list checkpoint of a 1.1 dtype: U16 in the header, the formula's bytes.
u = load_file(os.path.join(root, "u", "model.safetensors"))
assert sorted(u) == ["t0", "t1", "t2"] and all(a.dtype == np.uint16 for a in u.values())
check(u, 13, 2)
print("python safetensors: ok")
PY
