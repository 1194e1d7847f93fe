"""Shared by the tests of the PyTorch layer: ranks as processes over gloo, the FSDP2
model with uneven dims, its state dict, comparisons, and a real ckptd.

Each test is one script run by meson with the project's venv python (run.sh), the
package from the build tree (PYTHONPATH) and the tools' paths in the environment.
"""
import datetime
import os
import signal
import subprocess
import sys
import tempfile
import time
import traceback

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn as nn

SKIP = 77


def tool(name):
    return os.environ[name.upper().replace("-", "_")]


def tmpdir(tag):
    return tempfile.mkdtemp(prefix=f"py-{tag}-", dir=os.environ.get("TMPDIR", "/var/tmp"))


def _entry(rank, world, store, fn, args, errq):
    os.environ["OMP_NUM_THREADS"] = "1"
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank,
                            world_size=world)
    code = 0
    try:
        fn(rank, world, *args)
        # No rank tears gloo down while a peer may still be inside the last collective;
        # bounded, so that a peer that failed is reported, not waited for.
        dist.monitored_barrier(timeout=datetime.timedelta(seconds=120))
    except BaseException:
        errq.put((rank, traceback.format_exc()))
        code = 1
    finally:
        dist.destroy_process_group()
    # Leave without interpreter finalization: gloo's threads and torch's static
    # destructors race there, and once in CI (under ASan) a rank that had passed
    # aborted with "terminate called without an active exception". What the test
    # checks is done by now; the queue's pipe write above is synchronous.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def run_ranks(world, fn, *args, timeout=240, expect_exit=False):
    """Runs fn(rank, world, *args) on world processes; raises with the first failure.
    expect_exit: the ranks may die (tests that kill them); returns their exit codes."""
    store = os.path.join(tmpdir("store"), "store")
    ctx = mp.get_context("spawn")
    errq = ctx.SimpleQueue()
    procs = [ctx.Process(target=_entry, args=(r, world, store, fn, args, errq))
             for r in range(world)]
    for p in procs:
        p.start()
    deadline = time.monotonic() + timeout
    for p in procs:
        p.join(max(1, deadline - time.monotonic()))
    hung = [p for p in procs if p.is_alive()]
    for p in hung:
        p.kill()
        p.join()
    if expect_exit:
        return [p.exitcode for p in procs]
    if not errq.empty():
        rank, tb = errq.get()
        raise RuntimeError(f"rank {rank} failed:\n{tb}")
    if hung:
        raise RuntimeError(f"{len(hung)} ranks still running after {timeout} s")
    bad = [(i, p.exitcode) for i, p in enumerate(procs) if p.exitcode != 0]
    if bad:
        raise RuntimeError(f"ranks exited with {bad}")


class Block(nn.Module):
    def __init__(self, dim, hidden):
        super().__init__()
        self.up = nn.Linear(dim, hidden)
        self.down = nn.Linear(hidden, dim, bias=False)

    def forward(self, x):
        return x + self.down(torch.relu(self.up(x)))


class Model(nn.Module):
    """Rows that divide by neither 2 nor 3 (7, 11, 13, 5), a 1-row bias-free head."""

    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(13, 7)
        self.blocks = nn.ModuleList([Block(7, 11), Block(7, 5)])
        self.head = nn.Linear(7, 1)

    def forward(self, idx):
        x = self.emb(idx)
        for b in self.blocks:
            x = b(x)
        return self.head(x).sum()


def build(mesh=None, seed=0):
    """The FSDP2-sharded model and an AdamW that has taken one step."""
    from torch.distributed.fsdp import fully_shard
    torch.manual_seed(seed)
    model = Model()
    for b in model.blocks:
        fully_shard(b, mesh=mesh)
    fully_shard(model, mesh=mesh)
    opt = torch.optim.AdamW(model.parameters(), lr=0.01)
    g = torch.Generator().manual_seed(seed + 1)
    model(torch.randint(0, 13, (4, 3), generator=g)).backward()
    opt.step()
    return model, opt


def state(model, opt, note="trained"):
    """The state dict a training loop saves: model, AdamW state, and a Python object."""
    from torch.distributed.checkpoint.state_dict import get_state_dict
    msd, osd = get_state_dict(model, opt)
    return {"model": msd, "optim": osd, "extra": {"note": note, "epoch": 3}}


def fresh_state(mesh=None):
    """A state dict of the same structure with other values, to load into."""
    model, opt = build(mesh, seed=99)
    return state(model, opt, note="fresh")


def flatten(sd, prefix=""):
    out = {}
    for k, v in sd.items():
        key = f"{prefix}{k}"
        if isinstance(v, dict) and k != "extra":
            out.update(flatten(v, key + "."))
        elif isinstance(v, list) and k == "param_groups":
            out[key] = v
        else:
            out[key] = v
    return out


def local(v):
    from torch.distributed.tensor import DTensor
    return v.to_local() if isinstance(v, DTensor) else v


def same_bits(x, y):
    """Equal dtype, shape and bytes (NaNs of random bits compare equal to themselves)."""
    if x.dtype != y.dtype or x.shape != y.shape:
        return False
    return torch.equal(x.contiguous().reshape(-1).view(torch.uint8),
                       y.contiguous().reshape(-1).view(torch.uint8))


def assert_same(a, b, what):
    """Every tensor (local shard) and object of two state dicts equal, bit for bit."""
    fa, fb = flatten(a), flatten(b)
    if set(fa) != set(fb):
        raise AssertionError(f"{what}: keys differ: {sorted(set(fa) ^ set(fb))}")
    n = 0
    for k in sorted(fa):
        x, y = local(fa[k]), local(fb[k])
        if isinstance(x, torch.Tensor):
            if not same_bits(x, y):
                raise AssertionError(f"{what}: tensor {k} differs: {x} vs {y}")
            n += 1
        elif x != y:
            raise AssertionError(f"{what}: object {k} differs: {x!r} vs {y!r}")
    return n


def check(cmd, expect=0):
    """Runs a tool; its exit code must be expect. Returns its stdout."""
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    if p.returncode != expect:
        raise AssertionError(f"{cmd} exited {p.returncode}, expected {expect}:\n"
                             f"{p.stdout}\n{p.stderr}")
    return p.stdout + p.stderr


class Ckptd:
    """A real ckptd process on root, in the foreground, ended with SIGTERM (stop) or
    SIGKILL (kill); socket: its own, for several daemons on one root."""

    def __init__(self, root, *args, socket=None):
        self.socket = socket or os.path.join(root, ".ckptd.sock")
        self.proc = subprocess.Popen(
            [tool("ckptd"), "--root", root, "--foreground", "--staging", "256MiB",
             "--socket", self.socket, *args],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        deadline = time.monotonic() + 30
        while not os.path.exists(self.socket):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"ckptd did not start: {self.proc.stderr.read()}")
            time.sleep(0.05)

    def kill(self):
        self.proc.kill()
        self.proc.wait(60)

    def stop(self):
        self.proc.send_signal(signal.SIGTERM)
        self.proc.wait(60)
        if self.proc.returncode != 0:
            raise AssertionError(f"ckptd exited {self.proc.returncode}: "
                                 f"{self.proc.stderr.read()}")


def main(fn):
    try:
        fn()
    except SystemExit:
        raise
    except BaseException:
        traceback.print_exc()
        sys.exit(1)
    print("ok")
