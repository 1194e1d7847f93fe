"""CheckpointManager's async saves never hang a training loop that runs collectives of
its own on the default group. DCP finishes an async save (plan, results, the commit's
all-reduce) on a thread of its own; on the default group those collectives interleaved
with the training thread's (an all_reduce of the loss, a barrier) in different orders
on different ranks, and every rank hung. The manager makes a gloo group of its own:
six steps, each saving and then reducing on the default group, finish within the
bound, every rank agrees, and the kept checkpoints are committed."""
import torch
import torch.distributed as dist

import common
import libshard
from libshard.loop import CheckpointManager


def rank_main(rank, world, root):
    torch.manual_seed(rank)
    m = torch.nn.Linear(64, 64)
    opt = torch.optim.AdamW(m.parameters())
    ckpt = CheckpointManager(root, keep_latest_k=2)
    assert ckpt.process_group is not None, "the manager saves on a group of its own"
    for step in range(1, 7):
        loss = m(torch.randn(8, 64)).square().mean()
        loss.backward()
        opt.step()
        opt.zero_grad()
        ckpt.save(step, {"model": m.state_dict()})
        t = torch.tensor([float(step)])
        dist.all_reduce(t)                  # the training thread's own collectives
        dist.barrier()
        assert t.item() == step * world, t
    ckpt.close()
    assert ckpt.failed_saves == 0
    if rank == 0:
        names = [n for *_, n in libshard.committed(root)]
        assert names == ["step-5", "step-6"], names


def main():
    root = common.tmpdir("mgr-beside")
    # A hang shows as ranks still running at the bound (it was every run before).
    common.run_ranks(2, rank_main, root, timeout=120)


if __name__ == "__main__":
    common.main(main)
