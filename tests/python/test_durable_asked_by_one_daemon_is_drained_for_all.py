"""One save, two ckptd with local tiers (--replicas 2), two gloo ranks, rank r saving
through node nr's daemon with DCP and CkptWriter: rank 0 asks for commit level
replicated, rank 1 for durable (decision 0176). The daemon that drains may be the one
whose ranks did not ask for durable (here n0, whose copy holds the first data file):
the save is drained all the same. Rank 0, DCP's coordinator, returns at level
replicated, the level it asked for; n1 tells its rank durable once the durable root
holds a complete step-3; and that durable copy loads back, with no daemon, what each
rank saved. Two ranks that save through one daemon (a third, with a local tier of its
own) asking for different levels are refused by name (every rank of a save asks for
the same level), never a hang."""
import os
import time

import torch
import torch.distributed.checkpoint as dcp
from torch.distributed.tensor import DTensor, Shard, init_device_mesh

import common
from libshard.dcp import CkptReader, CkptWriter

ROWS, COLS = 16, 8
LEVELS = ("replicated", "durable")


def state(v, rank, world):
    mesh = init_device_mesh("cpu", (world,))
    full = torch.arange(ROWS * COLS, dtype=torch.float32).reshape(ROWS, COLS) * v + v
    c = ROWS // world
    return {"w": DTensor.from_local(full[rank * c:(rank + 1) * c].clone(), mesh, [Shard(0)],
                                    run_check=False, shape=full.shape, stride=full.stride())}


def save(rank, world, root, socks):
    os.environ["CKPTD_NODES"] = str(world)
    w = CkptWriter(root, "step-3", socket=socks[rank], commit_level=LEVELS[rank])
    dcp.save(state(3, rank, world), storage_writer=w)
    if rank == 0:              # DCP's coordinator: the rank that waits for the commit
        assert w.committed_level == "replicated", \
            f"rank 0 asked for replicated, got {w.committed_level!r}: {w.level_note}"


def mixed(rank, world, root, sock):
    os.environ["CKPTD_NODES"] = "1"
    said = None
    try:
        dcp.save(state(5, rank, world), storage_writer=CkptWriter(
            root, "step-5", socket=sock, commit_level=LEVELS[rank]))
    except BaseException as e:         # DCP wraps the writer's error
        said = str(getattr(e, "failures", e))
    assert said and "every rank of a save asks for the same level" in said, \
        f"rank {rank}: two levels through one daemon: {said}"


def load(rank, world, root):
    sd = state(0, rank, world)
    dcp.load(sd, storage_reader=CkptReader(root, "step-3"))
    assert torch.equal(sd["w"].to_local(), state(3, rank, world)["w"].to_local()), \
        f"rank {rank}'s rows from the durable copy differ from what it saved"


def main():
    top = common.tmpdir("durable-asked")
    root = os.path.join(top, "root")
    os.makedirs(root)
    os.environ["UCX_TLS"] = "tcp"
    socks = [os.path.join(top, f"n{i}.sock") for i in range(2)]
    logs = [os.path.join(top, f"n{i}.log") for i in range(2)]
    d = []
    try:
        for i in range(2):
            local = os.path.join(top, f"n{i}.local")
            os.makedirs(local)
            d.append(common.Ckptd(root, "--local-root", local, "--id", f"n{i}",
                                  "--peer-listen", "127.0.0.1:0", "--replicas", "2",
                                  "--peer-timeout", "10", "--log", logs[i], socket=socks[i]))
        common.run_ranks(2, save, root, socks)
        told = "checkpoint step-3 committed at level durable"
        for _ in range(600):
            if told in open(logs[1]).read():
                break
            time.sleep(0.05)
        assert told in open(logs[1]).read(), f"n1 never told durable:\n{open(logs[1]).read()}"
        assert os.path.isfile(os.path.join(root, "step-3", "manifest.mdb")) and \
            not os.path.exists(os.path.join(root, "step-3", "copy")), \
            "n1 told durable without a complete step-3 in the durable root"
        said = open(logs[0]).read()
        assert "drain of step-3: committed in the durable root" in said, \
            f"n0, whose ranks asked for replicated, did not drain step-3:\n{said}"
        common.run_ranks(2, load, root)
        solo = os.path.join(top, "solo.local")
        os.makedirs(solo)
        d.append(common.Ckptd(root, "--local-root", solo, "--id", "solo",
                              socket=os.path.join(top, "solo.sock")))
        common.run_ranks(2, mixed, root, d[-1].socket)
    finally:
        for x in d:
            x.stop()


if __name__ == "__main__":
    common.main(main)
