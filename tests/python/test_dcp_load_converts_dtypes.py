"""dcp.load with CkptReader into tensors of another dtype than the one saved gives the
values torch's Tensor.to() gives (DCP's own FileSystemReader casts), for every pair of
the format's dtypes: one tensor of each dtype is saved through CkptWriter and loaded
once per dtype, every key into another dtype each time. The values (0, 0.5, 1, 1.5,
2, 2.5, 3, 6) are held by every dtype, so every pair converts except complex into
real, which fails naming the tensor and both dtypes. A load that reinterprets bits
gives other values, or a size error, for all but the pairs of equal dtypes."""
import shutil

import torch
import torch.distributed.checkpoint as dcp

import common
from libshard.dcp import CkptReader, CkptWriter
from libshard.torchio import _TORCH_OF_CODE
from libshard import _ck

BASE = torch.tensor([[0.0, 0.5, 1.0, 1.5], [2.0, 2.5, 3.0, 6.0]], dtype=torch.float64)


def name_of(dt):
    code = next(c for c, t in _TORCH_OF_CODE.items() if t == dt)
    return _ck.dtype_name(code)


def main():
    dtypes = sorted(_TORCH_OF_CODE.values(), key=str)
    assert len(dtypes) == 17, dtypes
    root = common.tmpdir("conv")
    saved = {f"t_{name_of(dt)}": BASE.to(dt) for dt in dtypes}
    dcp.save(saved, storage_writer=CkptWriter(root, "all"), no_dist=True)
    pairs = refused = 0
    for k in range(len(dtypes)):
        want, sd = {}, {}
        for i, src in enumerate(dtypes):
            dst = dtypes[(i + k) % len(dtypes)]
            key = f"t_{name_of(src)}"
            if src.is_complex and not dst.is_complex:
                # Alone, since the whole load fails.
                try:
                    dcp.load({key: torch.zeros(BASE.shape, dtype=dst)},
                             storage_reader=CkptReader(root, "all"), no_dist=True)
                except BaseException as e:     # DCP's CheckpointException
                    msg = str(e)
                    assert (f"tensor {key} " in msg and name_of(src) in msg and
                            f"loaded as {name_of(dst)}" in msg), msg
                else:
                    raise AssertionError(f"{key} loaded into {dst}")
                refused += 1
                continue
            sd[key] = torch.full(BASE.shape, 7.0, dtype=torch.float64).to(dst)
            want[key] = saved[key].to(dst)
        dcp.load(sd, storage_reader=CkptReader(root, "all"), no_dist=True)
        for key, w in want.items():
            assert common.same_bits(sd[key], w), (
                f"{key} loaded into {w.dtype}: {sd[key]} is not its .to(): {w}")
            pairs += 1
    assert pairs + refused == 17 * 17 and refused == 2 * 15, (pairs, refused)
    shutil.rmtree(root)
    print(f"{pairs} pairs equal to Tensor.to(), {refused} refused by name")


if __name__ == "__main__":
    common.main(main)
