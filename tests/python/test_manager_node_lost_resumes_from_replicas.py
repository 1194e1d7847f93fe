"""A node lost under CheckpointManager on gloo ranks (issue 31): two ckptd, each with a
local tier, --replicas 2 (one clique: each keeps the other's part), one durable root;
two ranks, rank r saving through node nr's daemon, a DTensor sharded on dim 0 so that
each node's part is its own rank's rows, at commit level replicated. Step 4 lies only
in the tiers (nothing of it in the durable root). Then node n1 is lost: its daemon
killed, its local tier deleted, and a replacement n1 starts on an empty disk. New ranks
load through their daemons: the manager resolves step 4, rank 1's part is fetched from
n0's replica, and every rank gets back exactly the rows it saved."""
import os
import shutil

import torch
from torch.distributed.tensor import DTensor, Shard, init_device_mesh

import common
from libshard.loop import CheckpointManager

ROWS, COLS = 13, 8


def state(v, rank, world):
    mesh = init_device_mesh("cpu", (world,))
    full = torch.arange(ROWS * COLS, dtype=torch.float32).reshape(ROWS, COLS) * v + v
    c = -(-ROWS // world)
    local = full[min(rank * c, ROWS):min((rank + 1) * c, ROWS)].clone()
    return {"model": {"w": DTensor.from_local(local, mesh, [Shard(0)], run_check=False,
                                              shape=full.shape, stride=full.stride())}}


def save(rank, world, root, socks):
    os.environ["CKPTD_NODES"] = str(world)
    m = CheckpointManager(root, socket=socks[rank], async_save=False,
                          commit_level="replicated")
    for step in (2, 4):
        m.save(step, state(step, rank, world))
    m.close()


def load(rank, world, root, socks):
    os.environ["CKPTD_NODES"] = str(world)
    m = CheckpointManager(root, socket=socks[rank], load_only=True)
    sd = state(0, rank, world)
    got = m.load(sd)
    m.close()
    assert got == 4, f"rank {rank} resumed from step {got}, not 4"
    want = state(4, rank, world)
    assert torch.equal(sd["model"]["w"].to_local(), want["model"]["w"].to_local()), \
        f"rank {rank}'s rows differ from what it saved"


def main():
    top = common.tmpdir("node-lost")
    root = os.path.join(top, "root")
    os.makedirs(root)
    os.environ["UCX_TLS"] = "tcp"
    socks = [os.path.join(top, f"n{i}.sock") for i in range(2)]

    def daemon(i):
        local = os.path.join(top, f"n{i}.local")
        os.makedirs(local, exist_ok=True)
        return common.Ckptd(root, "--local-root", local, "--id", f"n{i}", "--peer-listen",
                            "127.0.0.1:0", "--replicas", "2", "--peer-timeout", "10",
                            socket=socks[i])

    d = [daemon(0), daemon(1)]
    try:
        common.run_ranks(2, save, root, socks)
        assert not os.path.exists(os.path.join(root, "step-4")), "step-4 reached the root"
        kept = os.path.join(top, "n0.local", ".replicas", "n1", "step-4")
        assert os.path.isdir(kept), "n1's part of step-4 is not kept on n0"
        d[1].kill()
        shutil.rmtree(os.path.join(top, "n1.local"))
        d[1] = daemon(1)
        common.run_ranks(2, load, root, socks)
    finally:
        for x in d:
            x.stop()


if __name__ == "__main__":
    common.main(main)
