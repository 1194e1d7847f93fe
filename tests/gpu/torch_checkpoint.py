"""tests/gpu/torch_checkpoint.py: CkptWriter and CkptReader on CUDA tensors (one GPU).

FSDP2 on one GPU (NCCL, with gloo beside it for DCP), a small model and its AdamW state,
every tensor in device memory; embedded, and through ckptd when $CKPTD_SOCKET is set:
  - the client's staging is page-locked (the DMA path is taken, not a pageable copy);
  - dcp.save and dcp.async_save (copy mode) load back bit for bit onto the GPU;
  - async_staging=True: a parameter changed in place right after maybe_wait_for_staging
    leaves the checkpoint with the value from before the change;
  - CheckpointManager: optimizer.step() right after save() waits at its fence, and the
    checkpoint holds the parameters and moments from before that step.
Prints "ok ..." and exits 0; 77 without a usable GPU; 1 on a mismatch.

    PYTHONPATH=build-gpu/python python3 tests/gpu/torch_checkpoint.py ROOT
"""
import copy
import os
import sys
import tempfile

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
import torch.nn as nn


def fail(msg):
    print(f"FAIL: {msg}", flush=True)
    sys.exit(1)


def flat(sd, prefix=""):
    out = {}
    for k, v in sd.items():
        if isinstance(v, dict):
            out.update(flat(v, f"{prefix}{k}."))
        else:
            out[f"{prefix}{k}"] = v
    return out


def local(v):
    return v.to_local() if hasattr(v, "to_local") else v


def same(a, b, what):
    fa, fb = flat(a), flat(b)
    if set(fa) != set(fb):
        fail(f"{what}: keys differ: {sorted(set(fa) ^ set(fb))}")
    n = 0
    for k in fa:
        x, y = local(fa[k]), local(fb[k])
        if isinstance(x, torch.Tensor):
            x, y = x.detach().cpu(), y.detach().cpu()
            if x.dtype != y.dtype or x.shape != y.shape or not torch.equal(
                    x.reshape(-1).view(torch.uint8), y.reshape(-1).view(torch.uint8)):
                fail(f"{what}: tensor {k} differs")
            n += 1
        elif x != y:
            fail(f"{what}: {k} differs: {x!r} vs {y!r}")
    return n


def build(seed):
    from torch.distributed.checkpoint.state_dict import get_state_dict
    from torch.distributed.fsdp import fully_shard
    torch.manual_seed(seed)
    model = nn.Sequential(*[nn.Sequential(nn.Linear(256, 1024), nn.Linear(1024, 256))
                            for _ in range(3)]).cuda()
    for b in model:
        fully_shard(b)
    fully_shard(model)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    model(torch.randn(4, 256, device="cuda")).sum().backward()
    opt.step()

    def state():
        msd, osd = get_state_dict(model, opt)
        return {"model": msd, "optim": osd}
    return model, opt, state


def snapshot(sd):
    return {k: (local(v).detach().clone() if isinstance(local(v), torch.Tensor) else
                copy.deepcopy(v)) for k, v in flat(sd).items()}


def main():
    if not torch.cuda.is_available():
        print("skip: torch sees no CUDA device")
        sys.exit(77)
    root = sys.argv[1] if len(sys.argv) > 1 else tempfile.mkdtemp(prefix="torch-gpu-")
    torch.cuda.set_device(0)
    store = tempfile.mktemp(prefix="store-", dir=os.environ.get("TMPDIR", "/var/tmp"))
    dist.init_process_group("cpu:gloo,cuda:nccl", init_method=f"file://{store}", rank=0,
                            world_size=1)
    from libshard import engine
    from libshard.dcp import CkptReader, CkptWriter
    from libshard.loop import CheckpointManager
    sock = engine.socket_of(None)
    how = "through ckptd" if sock else "embedded"
    model, opt, state = build(0)
    sd = state()
    want = snapshot(sd)

    dcp.save(sd, storage_writer=CkptWriter(root, "sync-1"))
    e = engine.engine(root, None, 1)
    if not e.client.pinned:
        fail("the client's staging is not page-locked for the GPU")
    f = dcp.async_save(sd, storage_writer=CkptWriter(root, "async-2"))
    f.result()
    for name in ("sync-1", "async-2"):
        got = build(1)[2]()
        dcp.load(got, storage_reader=CkptReader(root, name))
        n = same(flat(got), want, f"{name} onto the GPU")
    print(f"ok: dcp.save and async_save from device memory ({how}) load back bit for bit, "
          f"{n} tensors", flush=True)

    # Async staging: the copies are queued; after the fence the state may change.
    p = next(model.parameters())
    w = CkptWriter(root, "staged-3", async_staging=True)
    f = dcp.async_save(sd, storage_writer=w)
    w.maybe_wait_for_staging()
    with torch.no_grad():
        p.to_local().add_(1.0)
    f.result()
    got = build(1)[2]()
    dcp.load(got, storage_reader=CkptReader(root, "staged-3"))
    same(flat(got), want, "staged-3 (changed in place after the fence)")
    print("ok: async staging: a parameter changed right after the fence leaves the "
          "checkpoint with its earlier value", flush=True)

    # CheckpointManager fences the optimizer's step.
    with torch.no_grad():
        p.to_local().sub_(1.0)
    mgr = CheckpointManager(root)
    before = snapshot(state())
    mgr.save(4, state())
    staged = mgr._writer._part
    model(torch.randn(4, 256, device="cuda")).sum().backward()
    opt.step()
    if staged.keep:
        fail("optimizer.step() ran before the save's fence")
    mgr.close()
    got = build(1)[2]()
    dcp.load(got, storage_reader=CkptReader(root, "step-4"))
    same(flat(got), before, "step-4 (optimizer.step right after save)")
    print("ok: CheckpointManager: optimizer.step() right after save() waited at the fence; "
          "step-4 holds the state from before it", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
