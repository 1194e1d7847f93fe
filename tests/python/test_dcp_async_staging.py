"""dcp.async_save with CkptWriter on 2 gloo ranks, embedded and through ckptd:
 - async_staging=True: async_save returns with the copies queued; after
   maybe_wait_for_staging the state may change, and the checkpoint holds the values
   from before the change; state that is not contiguous (a transposed view) goes
   through the staging-in-place path and loads back equal;
 - the plans are cached while the state dict keeps its structure (the second save
   reuses them on every rank) and re-made when it changes (a new key is saved);
 - CheckpointManager fences every optimizer step: right after save(), optimizer.step()
   finds the staged copy done before it writes, and the checkpoint holds the
   parameters and moments from before that step."""
import copy

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp

import common
from libshard.dcp import CkptReader, CkptWriter
from libshard.loop import CheckpointManager
from libshard.writer import _PlanCache


def snapshot(sd):
    return copy.deepcopy({k: v for k, v in common.flatten(sd).items()})


def ranks(rank, world, root, sock):
    model, opt = common.build()
    sd = common.state(model, opt)
    sd["strided"] = torch.arange(60.0).reshape(6, 10).t()      # not contiguous
    sd["big"] = torch.randn(1 << 20, generator=torch.Generator().manual_seed(1))  # replicated
    cache = _PlanCache.of(None)
    plans0, hits0 = cache.plans, cache.hits
    want = {}
    for i, name in enumerate(("a-1", "a-2")):
        w = CkptWriter(root, name, socket=sock, async_staging=True)
        f = dcp.async_save(sd, storage_writer=w)
        w.maybe_wait_for_staging()
        want[name] = snapshot(sd)
        sd["big"].add_(1.0)                   # the state changes after the fence
        f.result(timeout=120)
    assert cache.plans == plans0 + 1 and cache.hits == hits0 + 1, \
        f"rank {rank}: plans {cache.plans - plans0}, reused {cache.hits - hits0}"
    sd["new"] = torch.full((3,), 7.0)         # another structure: planned again
    f = dcp.async_save(sd, storage_writer=CkptWriter(root, "a-3", socket=sock))
    want["a-3"] = snapshot(sd)
    f.result(timeout=120)
    assert cache.plans == plans0 + 2, f"rank {rank}: the new structure was not planned"
    for name, ref in want.items():
        got = common.fresh_state()
        got["strided"] = torch.zeros(6, 10).t()
        got["big"] = torch.zeros(1 << 20)
        if name == "a-3":
            got["new"] = torch.zeros(3)
        dcp.load(got, storage_reader=CkptReader(root, name))
        common.assert_same(common.flatten(got), ref, f"rank {rank}: {name}")

    # DCP's background thread runs collectives while training runs its own: a group of
    # its own keeps them apart, as DCP asks.
    group = dist.new_group(backend="gloo")
    mgr = CheckpointManager(root, socket=sock, process_group=group)
    before = snapshot(common.state(model, opt))
    mgr.save(10, common.state(model, opt))
    staged = mgr._writer._part
    model(torch.randint(0, 13, (4, 3))).backward()
    opt.step()                                # its pre-hook fences the save first
    assert staged.keep == [], f"rank {rank}: optimizer.step ran before the save's fence"
    mgr.close()
    got = common.fresh_state()
    dcp.load(got, storage_reader=CkptReader(root, "step-10"))
    common.assert_same(common.flatten(got), before, f"rank {rank}: step-10")


def main():
    for connected in (False, True):
        root = common.tmpdir("async-staging")
        d = common.Ckptd(root) if connected else None
        try:
            common.run_ranks(2, ranks, root, d.socket if d else None)
        finally:
            if d:
                d.stop()
        for n in ("a-1", "a-2", "a-3", "step-10"):
            common.check([common.tool("ckpt-verify"), root, n, "--deep"])
        print(f"{'ckptd' if connected else 'embedded'}: ok", flush=True)


if __name__ == "__main__":
    common.main(main)
