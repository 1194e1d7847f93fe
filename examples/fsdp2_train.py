"""examples/fsdp2_train.py - FSDP2 training with libshard checkpoints.

The state is built as DCP's own recipe builds it: a Stateful whose state_dict() and
load_state_dict() go through get_state_dict / set_state_dict, so the model's and the
optimizer's shards are saved as DTensors and load onto any number of ranks. The
manager (libshard.loop.CheckpointManager) saves every --interval steps, resumes from
the run's newest step-N, keeps the last --keep, and rolls back with --rollback-to.

    torchrun --nproc-per-node 2 examples/fsdp2_train.py --root ckpt --steps 6
    python examples/fsdp2_train.py --root ckpt --steps 8             # 1 rank resumes at 6
    python examples/fsdp2_train.py --root ckpt --rollback-to 4 --steps 6

Every step sees the same global batch of 8 samples (drawn from the step number), each
rank its slice, so the losses do not depend on the number of ranks. Rank 0 prints
"step N loss X". On CPUs it runs over gloo; with CUDA, over NCCL, one GPU per rank.
"""
import argparse
import logging
import os
import socket

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict
from torch.distributed.checkpoint.stateful import Stateful
from torch.distributed.fsdp import fully_shard

from libshard.loop import CheckpointManager

BATCH, DIM = 8, 16


class AppState(Stateful):
    """The model and optimizer as DCP saves them: sharded, with FQN keys."""

    def __init__(self, model, optimizer):
        self.model = model
        self.optimizer = optimizer

    def state_dict(self):
        model, optim = get_state_dict(self.model, self.optimizer)
        return {"model": model, "optim": optim}

    def load_state_dict(self, state_dict):
        set_state_dict(self.model, self.optimizer, model_state_dict=state_dict["model"],
                       optim_state_dict=state_dict["optim"])


def init_distributed():
    """torchrun's environment, or one process of its own."""
    if "RANK" not in os.environ:
        with socket.socket() as s:                 # a free port for a world of one
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        os.environ.update(RANK="0", WORLD_SIZE="1", LOCAL_RANK="0",
                          MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    cuda = torch.cuda.is_available()
    if cuda:
        torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    dist.init_process_group("nccl" if cuda else "gloo")
    return torch.device("cuda") if cuda else torch.device("cpu")


def build(device):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(DIM, 32), nn.ReLU(), nn.Linear(32, 32), nn.ReLU(),
                          nn.Linear(32, 1)).to(device)
    for layer in model:
        if isinstance(layer, nn.Linear):
            fully_shard(layer)
    fully_shard(model)
    return model, torch.optim.AdamW(model.parameters(), lr=1e-2)


def batch(step, rank, world, device):
    g = torch.Generator().manual_seed(step)
    x = torch.randn(BATCH, DIM, generator=g)
    y = x.sum(dim=1, keepdim=True).sin()
    per = BATCH // world
    return x[rank * per:(rank + 1) * per].to(device), y[rank * per:(rank + 1) * per].to(device)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--root", required=True, help="checkpoint root (made if missing)")
    ap.add_argument("--steps", type=int, required=True, help="train up to this step")
    ap.add_argument("--interval", type=int, default=2, help="save every N steps")
    ap.add_argument("--keep", type=int, default=3, help="keep the N newest steps")
    ap.add_argument("--rollback-to", type=int, help="load this step, remove newer ones")
    args = ap.parse_args()

    device = init_distributed()
    rank, world = dist.get_rank(), dist.get_world_size()
    # The manager's lines (each commit: step, bytes, seconds; what it loads, removes).
    logging.basicConfig(level=logging.INFO if rank == 0 else logging.WARNING,
                        format="%(message)s")
    if BATCH % world:
        raise SystemExit(f"{world} ranks do not divide the batch of {BATCH}")
    model, optimizer = build(device)
    state = {"app": AppState(model, optimizer)}
    ckpt = CheckpointManager(args.root, keep_latest_k=args.keep, interval=args.interval)
    if args.rollback_to is not None:
        start = ckpt.load(state, step=args.rollback_to, discard_newer=True)
    else:
        start = ckpt.load(state) or 0
    if rank == 0 and start:
        print(f"resumed from step {start} on {world} rank{'s' if world > 1 else ''}",
              flush=True)
    for step in range(start + 1, args.steps + 1):
        x, y = batch(step, rank, world, device)
        loss = (model(x) - y).square().mean()
        loss.backward()
        optimizer.step()             # waits for the copies of the save in flight first
        optimizer.zero_grad()
        total = loss.detach().clone()
        dist.all_reduce(total)       # the training thread's own collective
        if rank == 0:
            print(f"step {step} loss {total.item() / world:.6f}", flush=True)
        ckpt.save(step, state, last_step=step == args.steps)
    ckpt.close()
    if rank == 0:
        s = ckpt.stats
        print(f"saves {s.saves} failed {s.failed} last {s.last_step}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
