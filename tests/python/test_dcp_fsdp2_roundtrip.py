"""FSDP2 (CPU, gloo) with uneven dims, AdamW state from get_state_dict and a Python
object: saved on 2 ranks through CkptWriter (sync and async, embedded and through a
real ckptd), loaded on 3 ranks through CkptReader, every tensor and object equal to
DCP's own FileSystemWriter/FileSystemReader round trip. Each checkpoint passes
ckpt-verify --deep; ckpt-consolidate's safetensors equal the full model state dict; a
committed name is refused on every rank and stays as it was."""
import os

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from safetensors.torch import load_file
from torch.distributed.checkpoint import FileSystemReader, FileSystemWriter
from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

import common
from libshard.dcp import CkptReader, CkptWriter

SAVES = [("sync-emb-00000100", False, None), ("async-emb-00000200", True, None),
         ("sync-ckptd-00000300", False, "ckptd"), ("async-ckptd-00000400", True, "ckptd")]


def save(rank, world, root, fsdir, sock, full_path):
    model, opt = common.build()
    sd = common.state(model, opt)
    dcp.save(sd, storage_writer=FileSystemWriter(fsdir))
    for name, is_async, via in SAVES:
        w = CkptWriter(root, name, socket=sock if via else None)
        if is_async:
            dcp.async_save(sd, storage_writer=w).result()
        else:
            dcp.save(sd, storage_writer=w)
    # checkpoint_id=ROOT/NAME (DCP's reset) works too.
    dcp.save(sd, checkpoint_id=os.path.join(root, "by-id-00000500"), storage_writer=CkptWriter())
    # A committed name is refused on every rank (DCP raises CheckpointException).
    try:
        dcp.save(common.state(*common.build(seed=5)), storage_writer=CkptWriter(root, SAVES[0][0]))
    except BaseException as e:    # DCP's CheckpointException is a BaseException
        assert "already committed" in str(e), e
    else:
        raise AssertionError("saving over a committed checkpoint did not fail")
    full = get_model_state_dict(model, options=StateDictOptions(full_state_dict=True,
                                                                cpu_offload=True))
    if rank == 0:
        torch.save(full, full_path)


def load(rank, world, root, fsdir):
    ref = common.fresh_state()
    dcp.load(ref, storage_reader=FileSystemReader(fsdir))
    for name in [s[0] for s in SAVES] + ["by-id-00000500"]:
        got = common.fresh_state()
        dcp.load(got, storage_reader=CkptReader(root, name))
        n = common.assert_same(got, ref, f"rank {rank}: {name}")
        assert n > 10, n
    got = common.fresh_state()
    dcp.load(got, checkpoint_id=os.path.join(root, "by-id-00000500"), storage_reader=CkptReader())
    common.assert_same(got, ref, "checkpoint_id load")


def main():
    root = common.tmpdir("ck")
    fsdir = common.tmpdir("fs")
    full_path = os.path.join(fsdir, "full.pt")
    d = common.Ckptd(root)
    try:
        common.run_ranks(2, save, root, fsdir, d.socket, full_path)
    finally:
        d.stop()
    common.run_ranks(3, load, root, fsdir)
    for name, *_ in SAVES:
        common.check([common.tool("ckpt-verify"), root, name, "--deep"])
    out = os.path.join(root, "..", os.path.basename(root) + "-export")
    common.check([common.tool("ckpt-consolidate"), root, SAVES[1][0], "-o", out,
                  "--filter", "model.*"])
    exported = load_file(os.path.join(out, "model.safetensors"))
    full = torch.load(full_path)
    assert set(exported) == {f"model.{k}" for k in full}, sorted(exported)
    for k, v in full.items():
        assert common.same_bits(exported[f"model.{k}"], v), k


if __name__ == "__main__":
    common.main(main)
