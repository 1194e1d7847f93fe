"""HSDP on a 2x2 mesh (replicate x shard, 4 ranks): DCP's planner deduplicates the
replicas by bytes, so ranks write uneven numbers of boxes; saved through CkptWriter,
loaded on 3 ranks (FSDP) through CkptReader, equal to DCP's FileSystemWriter round
trip; ckpt-verify --deep passes."""
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint import FileSystemReader, FileSystemWriter
from torch.distributed.device_mesh import init_device_mesh

import common
import libshard
from libshard.dcp import CkptReader, CkptWriter


def save(rank, world, root, fsdir):
    mesh = init_device_mesh("cpu", (2, 2), mesh_dim_names=("replicate", "shard"))
    model, opt = common.build(mesh)
    sd = common.state(model, opt)
    dcp.save(sd, storage_writer=FileSystemWriter(fsdir))
    dcp.save(sd, storage_writer=CkptWriter(root, "hsdp-00000100"))


def load(rank, world, root, fsdir):
    ref = common.fresh_state()
    dcp.load(ref, storage_reader=FileSystemReader(fsdir))
    got = common.fresh_state()
    dcp.load(got, storage_reader=CkptReader(root, "hsdp-00000100"))
    common.assert_same(got, ref, f"rank {rank}: hsdp")


def main():
    root = common.tmpdir("hsdp")
    fsdir = common.tmpdir("hsdpfs")
    common.run_ranks(4, save, root, fsdir)
    common.run_ranks(3, load, root, fsdir)
    common.check([common.tool("ckpt-verify"), root, "hsdp-00000100", "--deep"])
    ck = libshard.Checkpoint(root, "hsdp-00000100")
    assert ck.info()["n_files"] >= 2, ck.info()


if __name__ == "__main__":
    common.main(main)
