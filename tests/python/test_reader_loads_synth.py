"""CkptReader loads a checkpoint written by ckpt-synth (format 1.0, mesh placements,
uneven shards) with dcp.load onto 3 ranks, and onto one process, and one written by the
C trainer (where the training library is built), and every element equals what
ckpt-consolidate exports (safetensors, read by safetensors.torch)."""
import os

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from safetensors.torch import load_file

import common
from libshard.dcp import CkptReader


def load_on_ranks(rank, world, root, full):
    # Rank r loads the rows torch.chunk gives it, into a plain tensor wrapped as a
    # DTensor on a 1-D mesh of 3.
    from torch.distributed.tensor import Shard, distribute_tensor, init_device_mesh
    mesh = init_device_mesh("cpu", (world,))
    sd = {k: distribute_tensor(torch.zeros_like(v), mesh, [Shard(0)]) for k, v in full.items()}
    dcp.load(sd, storage_reader=CkptReader(root))          # the newest: s2
    for k, v in sd.items():
        parts = torch.chunk(full[k], world)
        ref = parts[rank] if rank < len(parts) else full[k][0:0]
        assert common.same_bits(v.to_local(), ref), f"rank {rank}: {k} differs"


def main():
    root = common.tmpdir("synth")
    for name, seed in (("s1", 7), ("s2", 8)):
        common.check([common.tool("ckpt-synth"), root, "--name", name, "--mesh", "2x2",
                      "--dims", "replicate,shard", "--placements", "R,S(0)", "--tensors", "3",
                      "--bytes", "256KiB", "--dtype", "bf16", "--uneven", "--seed", str(seed)])
    out = os.path.join(root, "export")
    common.check([common.tool("ckpt-consolidate"), root, "s2", "-o", out])
    full = load_file(os.path.join(out, "model.safetensors"))
    sd = {k: torch.zeros_like(v) for k, v in full.items()}
    dcp.load(sd, storage_reader=CkptReader(root, "s2"), no_dist=True)
    for k in full:
        assert common.same_bits(sd[k], full[k]), f"{k} differs from ckpt-consolidate's export"
    common.run_ranks(3, load_on_ranks, root, full)
    if os.environ.get("SHARD_TRAIN"):
        trainer_checkpoint()


def trainer_checkpoint():
    import libshard
    from libshard.torchio import torch_dtype
    root = common.tmpdir("trainer")
    common.check([os.environ["SHARDRUN"], "--nproc-per-node", "2", os.environ["SHARD_TRAIN"],
                  "--data", os.environ["TRAIN_DATA"], "--mesh", "1x2", "--layers", "1",
                  "--dim", "16", "--heads", "2", "--seq", "16", "--batch", "4", "--steps", "2",
                  "--ckpt-root", root, "--ckpt-every", "2"])
    name = libshard.newest(root)
    tensors = libshard.Checkpoint(root, name).tensors()
    sd = {n: torch.zeros(shape, dtype=torch_dtype(code, n)) for n, code, shape, _ in tensors}
    dcp.load(sd, storage_reader=CkptReader(root), no_dist=True)
    out = os.path.join(root, "export")
    common.check([common.tool("ckpt-consolidate"), root, name, "-o", out])
    full = load_file(os.path.join(out, "model.safetensors"))
    assert set(full) == set(sd), sorted(set(full) ^ set(sd))
    for k in full:
        assert common.same_bits(sd[k], full[k]), f"trainer checkpoint: {k} differs"


if __name__ == "__main__":
    common.main(main)
