"""dtypes beyond format 1.0 (fp8 e4m3/e5m2, complex64/128, uint16/32/64) and keys
outside [A-Za-z0-9._-] (spaces, '/', UTF-8, a leading '.', '%') round-trip through
CkptWriter and CkptReader bit for bit (one process, sync and async), the names on disk
are the escaped keys, ckpt-verify --deep passes, and a dtype the format lacks is
refused with a message naming the tensor. Keys named like the writer's own blobs
("dcp-x.planner_data", beside a nested dict that makes DCP write its planner data)
come back as they were: they are escaped, never overwritten. A tensor loads into
another dtype converted as Tensor.to() converts it (bf16 into f32, into int32
truncated); complex into real is refused, naming the tensor and both dtypes."""
import os

import torch
import torch.distributed.checkpoint as dcp

import common
import libshard
from libshard.dcp import CkptReader, CkptWriter


def state():
    g = torch.Generator().manual_seed(3)
    r = lambda *s: torch.randn(*s, generator=g)
    return {
        "f8e4m3": r(5, 3).to(torch.float8_e4m3fn),
        "f8e5m2": r(7).to(torch.float8_e5m2),
        "c64": torch.complex(r(4), r(4)),
        "c128": torch.complex(r(2, 3).double(), r(2, 3).double()),
        "u16": torch.randint(0, 65535, (6,), generator=g).to(torch.uint16),
        "u32": torch.randint(0, 2**31, (3, 2), generator=g).to(torch.uint32),
        "u64": torch.randint(0, 2**62, (4,), generator=g).to(torch.uint64),
        "bool": torch.rand(9, generator=g) > 0.5,
        "step": torch.tensor(17.0),
        "a key/with space ü": r(3),
        ".hidden%": r(2),
        "obj": [1, "two", 3.0],
    }


def blank(sd):
    return {k: torch.zeros_like(v) if isinstance(v, torch.Tensor) else None
            for k, v in sd.items()}


def main():
    root = common.tmpdir("dt")
    sd = state()
    dcp.save(sd, storage_writer=CkptWriter(root, "sync-1"), no_dist=True)
    dcp.async_save(sd, storage_writer=CkptWriter(root, "async-2"), no_dist=True).result()
    for name in ("sync-1", "async-2"):
        got = blank(sd)
        dcp.load(got, storage_reader=CkptReader(root, name), no_dist=True)
        for k, v in sd.items():
            if isinstance(v, torch.Tensor):
                assert common.same_bits(got[k], v), (name, k, got[k], v)
            else:
                assert got[k] == v, (name, k, got[k])
        common.check([common.tool("ckpt-verify"), root, name, "--deep"])
    on_disk = {n for n, *_ in libshard.Checkpoint(root, "sync-1").tensors()}
    assert "a%20key%2Fwith%20space%20%C3%BC" in on_disk, on_disk
    assert "%2Ehidden%25" in on_disk, on_disk
    try:
        dcp.save({"q": torch.zeros(2, dtype=torch.complex32)},
                 storage_writer=CkptWriter(root, "bad-3"), no_dist=True)
    except BaseException as e:    # DCP's CheckpointException is a BaseException
        assert "tensor q" in str(e), e
    else:
        raise AssertionError("a complex32 tensor was not refused")
    assert not os.path.exists(os.path.join(root, "bad-3"))

    # The writer's reserved names: a user key can never be one.
    sd = {"nested": {"w": torch.arange(6.0)}, "dcp-x.planner_data": ["mine", 1],
          "dcp-x.t": torch.ones(3)}
    for name, save in (("res-sync", dcp.save), ("res-async", dcp.async_save)):
        f = save(sd, storage_writer=CkptWriter(root, name), no_dist=True)
        if save is dcp.async_save:
            f.result()
        got = {"nested": {"w": torch.zeros(6)}, "dcp-x.planner_data": None,
               "dcp-x.t": torch.zeros(3)}
        dcp.load(got, storage_reader=CkptReader(root, name), no_dist=True)
        assert got["dcp-x.planner_data"] == ["mine", 1], (name, got)
        assert torch.equal(got["nested"]["w"], sd["nested"]["w"]), (name, got)
        assert torch.equal(got["dcp-x.t"], sd["dcp-x.t"]), (name, got)

    # Dtypes on load: values converted as Tensor.to() does; complex into real refused.
    w = torch.randn(4, 3).bfloat16() * 8
    c = torch.complex(torch.randn(3), torch.randn(3))
    dcp.save({"w": w, "c": c}, storage_writer=CkptWriter(root, "bf16-4"), no_dist=True)
    got = {"w": torch.zeros(4, 3)}
    dcp.load(got, storage_reader=CkptReader(root, "bf16-4"), no_dist=True)
    assert got["w"].dtype == torch.float32 and torch.equal(got["w"], w.float()), got
    got = {"w": torch.zeros(4, 3, dtype=torch.int32)}
    dcp.load(got, storage_reader=CkptReader(root, "bf16-4"), no_dist=True)
    assert torch.equal(got["w"], w.to(torch.int32)), (got, w)
    try:
        dcp.load({"c": torch.zeros(3)}, storage_reader=CkptReader(root, "bf16-4"),
                 no_dist=True)
    except BaseException as e:
        assert "tensor c " in str(e) and "c64" in str(e) and "f32" in str(e), e
    else:
        raise AssertionError("a complex tensor loaded into a real one")


if __name__ == "__main__":
    common.main(main)
