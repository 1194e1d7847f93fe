#!/usr/bin/env python3
"""bench/peer-dcp.py: CkptWriter/CkptReader against DCP's own storage, in one run.

    PYTHONPATH=build/python .venv/bin/python bench/peer-dcp.py /var/tmp/peer --size 1GiB
    PYTHONPATH=build-gpu/python python3 bench/peer-dcp.py /var/tmp/peer --device cuda

CPU (default): an FSDP2-style state dict (bf16 DTensors sharded on dim 0, rows that do
not divide by 2) on 2 gloo ranks. CUDA: FSDP2 on one GPU (NCCL, with gloo beside it for
DCP), --blocks blocks of Linear(--dim, 4 --dim) + Linear(4 --dim, --dim) in f32 after one
AdamW step, every tensor on the GPU (the defaults, 12 and 2048, make 4.83 GB).

Every figure is printed beside DCP's peer and a physical reference measured in the
same run, with the ratio:
  references   a memcpy of a rank's bytes (CPU) or a D2H copy into pinned memory (CUDA;
               and into pageable memory, t.cpu()); an O_DIRECT write (with fsync) and a
               read of the same bytes
  stall        how long async_save blocks: CkptWriter in copy mode after reserve (the
               first save, and the third on), through ckptd with a new writer per save, against DCP's
               default stager and DefaultStager with every StagingOptions this device
               allows; ratio to the copy reference (target <= 1.2 on CUDA, 1.1 on CPU)
  staging      async_staging=True: async_save's return, and the wait at the fence after
               a step of at least the copy's length
  committed    async_save to committed, hashing on and off, against the raw write
  sync save    dcp.save to committed, against FileSystemWriter and the raw write
  load         dcp.load with the page cache dropped, against FileSystemReader and the
               raw read; CkptReader checks every block's SHA-256 (the default) and,
               beside it, with verify=False: the ratio of the two (target <= 1.1). Each
               of the three loads runs --loads times, interleaved; medians are printed
Speeds are given as a fraction of the reference's speed (raw time / our time), stalls
as a multiple of the reference's time (our time / copy time). --export (CPU) also
times ckpt-consolidate against DCP's dcp_to_torch_save + safetensors (peak RSS too).

--tensors N measures what a save costs per tensor instead: one gloo rank, --size bytes
(default 256 MiB) split into N float32 tensors (under one key "model"), embedded engine, async_save in copy
mode against FileSystemWriter's: the first save without reserve() (a fresh engine), the
first after reserve(), the steady stall (3rd save on), and the microseconds per tensor
beyond one memcpy of all the bytes. Plans are not cached across the first saves: each
first save plans, as DCP's does.
"""
import argparse
import mmap
import os
import shutil
import subprocess
import sys
import tempfile
import time

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
import torch.multiprocessing as mp

HERE = os.path.dirname(os.path.abspath(__file__))
BUILD = os.environ.get("BUILD", os.path.join(HERE, "..", "build"))


def size_arg(s):
    units = {"KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30}
    for u, m in units.items():
        if s.endswith(u):
            return int(float(s[:-len(u)]) * m)
    return int(s)


# ---- the state dicts ----

def cpu_state(rank, world, total):
    """Eight bf16 DTensors of 4099 columns, about total bytes in all."""
    from torch.distributed.tensor import DTensor, Shard, init_device_mesh
    mesh = init_device_mesh("cpu", (world,))
    rows = max(3, total // (8 * 4099 * 2))
    sd = {}
    for i in range(8):
        shp = (rows + (i % 3), 4099)
        c = -(-shp[0] // world)
        lo, hi = min(rank * c, shp[0]), min((rank + 1) * c, shp[0])
        local = torch.full((hi - lo, shp[1]), float(i + rank), dtype=torch.bfloat16)
        sd[f"layers.{i}.w"] = DTensor.from_local(local, mesh, [Shard(0)], run_check=False,
                                                 shape=torch.Size(shp), stride=(shp[1], 1))
    return sd


def cuda_state(args):
    """FSDP2 over blocks of two Linears in f32 on the GPU, after one AdamW step."""
    from torch.distributed.fsdp import fully_shard
    from torch.distributed.checkpoint.state_dict import get_state_dict
    import torch.nn as nn
    torch.manual_seed(0)
    d = args.dim
    model = nn.Sequential(*[nn.Sequential(nn.Linear(d, 4 * d), nn.Linear(4 * d, d))
                            for _ in range(args.blocks)]).cuda()
    for b in model:
        fully_shard(b)
    fully_shard(model)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    model(torch.randn(8, d, device="cuda")).sum().backward()
    opt.step()
    msd, osd = get_state_dict(model, opt)
    return {"model": msd, "optim": osd}, model, opt


def local_tensors(obj):
    if isinstance(obj, torch.Tensor):
        yield obj.to_local() if hasattr(obj, "to_local") else obj
    elif isinstance(obj, dict):
        for v in obj.values():
            yield from local_tensors(v)


def nbytes(sd):
    return sum(t.numel() * t.element_size() for t in local_tensors(sd))


# ---- references ----

def drop_cache(path):
    for d, _, files in os.walk(path):
        for f in files:
            try:
                fd = os.open(os.path.join(d, f), os.O_RDONLY)
            except OSError:
                continue
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            os.close(fd)


def raw_io(dirpath, n):
    """Seconds of an O_DIRECT write (with fsync) and read of n bytes."""
    path = os.path.join(dirpath, "raw.dat")
    buf = mmap.mmap(-1, 4 << 20)
    buf.write(b"\x5a" * (4 << 20))
    fd = os.open(path, os.O_CREAT | os.O_WRONLY | os.O_DIRECT | os.O_TRUNC, 0o600)
    t = time.perf_counter()
    done = 0
    while done < n:
        done += os.write(fd, buf)
    os.fsync(fd)
    w = time.perf_counter() - t
    os.close(fd)
    drop_cache(dirpath)
    fd = os.open(path, os.O_RDONLY | os.O_DIRECT)
    t = time.perf_counter()
    while os.readv(fd, [buf]) > 0:
        pass
    r = time.perf_counter() - t
    os.close(fd)
    os.unlink(path)
    return w, r


def copy_refs(sd, cuda):
    """(copy reference, pageable D2H or None): the rank's bytes copied once, the second
    time (pages touched)."""
    ts = list(local_tensors(sd))
    if not cuda:
        dst = [torch.empty_like(t) for t in ts]
        best = None
        for _ in range(2):
            t0 = time.perf_counter()
            for d, s in zip(dst, ts):
                d.copy_(s)
            best = time.perf_counter() - t0
        return best, None
    pinned = [torch.empty(t.shape, dtype=t.dtype, pin_memory=True) for t in ts]
    for _ in range(2):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for d, s in zip(pinned, ts):
            d.copy_(s, non_blocking=True)
        torch.cuda.synchronize()
        ref = time.perf_counter() - t0
    del pinned
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    pageable = [t.cpu() for t in ts]
    pageable_s = time.perf_counter() - t0
    del pageable
    return ref, pageable_s


def step_like(seconds, cuda):
    """Something the size of a training step that writes nothing saved: a GPU busy with
    matrix products for about seconds, or a CPU that sleeps."""
    if not cuda:
        time.sleep(seconds)
        return
    a = torch.randn(4096, 4096, device="cuda")
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        for _ in range(8):
            a = (a @ a).clamp_(-1, 1)
        torch.cuda.synchronize()


# ---- the saves ----

def dcp_stagers(cuda):
    """DCP's DefaultStager with every StagingOptions this device allows (pinned memory
    and non-blocking copies need an accelerator)."""
    try:
        from torch.distributed.checkpoint.staging import DefaultStager, StagingOptions
    except ImportError:
        return None
    return lambda: DefaultStager(StagingOptions(use_pinned_memory=cuda,
                                                use_shared_memory=True,
                                                use_async_staging=True,
                                                use_non_blocking_copy=cuda))


def saver(rank, world, store, args, q):
    cuda = args.device == "cuda"
    if cuda:
        torch.cuda.set_device(0)
        dist.init_process_group("cpu:gloo,cuda:nccl", init_method=f"file://{store}",
                                rank=rank, world_size=world)
        sd, _model, _opt = cuda_state(args)
    else:
        dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank,
                                world_size=world)
        sd = cpu_state(rank, world, args.size)
    from torch.distributed.checkpoint import FileSystemWriter
    from libshard.dcp import CkptWriter
    res = {"rank_bytes": nbytes(sd)}
    res["copy"], res["pageable"] = copy_refs(sd, cuda)
    ck, fs = os.path.join(args.root, "ck"), os.path.join(args.root, "fs")
    saves = args.saves

    def timed(tag, make_writer, mode, n=saves, stager=None):
        """mode: 'async' (stall, then committed), 'staging' (async_staging: return and
        fence after a step), 'sync'."""
        stalls, fences, totals = [], [], []
        for i in range(n):
            dist.barrier()
            w = make_writer(i)
            t0 = time.perf_counter()
            if mode == "sync":
                dcp.save(sd, storage_writer=w)
            else:
                kw = {"async_stager": stager} if stager is not None else {}
                f = dcp.async_save(sd, storage_writer=w, **kw)
                stalls.append(time.perf_counter() - t0)
                if hasattr(f, "upload_completion"):      # DCP's async staging
                    staged = f.staging_completion
                    f = f.upload_completion
                else:
                    staged = None
                if mode == "staging":
                    step_like(max(res["copy"] * 1.5, 0.05), cuda)
                    t1 = time.perf_counter()
                    if staged is not None:
                        staged.result()
                    else:
                        w.maybe_wait_for_staging()
                    fences.append(time.perf_counter() - t1)
                f.result()
            dist.barrier()
            totals.append(time.perf_counter() - t0)
        res[tag] = {"stalls": stalls, "fences": fences, "totals": totals}

    # As CheckpointManager.load does at start-up: staging made (and pinned) before the
    # first save, for each engine (embedded, ckptd).
    t0 = time.perf_counter()
    CkptWriter(ck).reserve(sd, wait=True)
    if args.socket:
        CkptWriter(ck, socket=args.socket).reserve(sd, wait=True)
    res["reserve"] = time.perf_counter() - t0
    timed("ck_copy", lambda i: CkptWriter(ck, f"copy-{i}"), "async")
    timed("ck_staging", lambda i: CkptWriter(ck, f"staging-{i}", async_staging=True),
          "staging", n=2)
    timed("ck_nohash", lambda i: CkptWriter(ck, f"nohash-{i}", hash=False), "async", n=2)
    if args.socket:
        timed("ckptd_copy", lambda i: CkptWriter(ck, f"dcopy-{i}", socket=args.socket),
              "async", n=2)
    timed("dcp_default", lambda i: FileSystemWriter(f"{fs}/a{i}"), "async")
    make = dcp_stagers(cuda)
    if make is not None:
        stager = make()
        timed("dcp_best", lambda i: FileSystemWriter(f"{fs}/b{i}"), "staging", n=2,
              stager=stager)
        stager.close()
    timed("ck_sync", lambda i: CkptWriter(ck, f"sync-{i}"), "sync", n=1)
    timed("dcp_sync", lambda i: FileSystemWriter(f"{fs}/s{i}"), "sync", n=1)
    if rank == 0:
        q.put(res)
    dist.destroy_process_group()


def tensors_saver(rank, world, store, args, q):
    """--tensors N: the stalls of async_save for N float32 tensors on one rank."""
    dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank,
                            world_size=world)
    from torch.distributed.checkpoint import FileSystemWriter
    from libshard.dcp import CkptWriter
    from libshard import writer as ckw
    n = args.tensors
    per = max(1, args.size // (4 * n))
    # Nested, as a model's state dict is: DCP's own per-key work on the top level
    # (_stateful_to_state_dict) is then the same few keys for both writers.
    sd = {"model": {f"layers.{i}.w": torch.full((per,), float(i % 251), dtype=torch.float32)
                    for i in range(n)}}
    flat = torch.empty(per * n, dtype=torch.float32)
    dst = torch.empty_like(flat)
    copy = []
    for _ in range(3):
        t0 = time.perf_counter()
        dst.copy_(flat)
        copy.append(time.perf_counter() - t0)
    res = {"rank_bytes": per * n * 4, "copy": min(copy), "n": n}
    saves = max(3, args.saves)

    def run(tag, root, make_writer, reserve=False):
        ckw._PlanCache.entries.clear()         # every first save plans
        if reserve:
            CkptWriter(root).reserve(sd, wait=True)
        stalls = []
        for i in range(saves):
            w = make_writer(i)
            t0 = time.perf_counter()
            f = dcp.async_save(sd, storage_writer=w)
            stalls.append(time.perf_counter() - t0)
            f.result()
        res[tag] = stalls

    ck = os.path.join(args.root, "ck")
    run("ck_fresh", os.path.join(args.root, "ck-fresh"),
        lambda i: CkptWriter(os.path.join(args.root, "ck-fresh"), f"s-{i}"))
    run("ck_reserved", ck, lambda i: CkptWriter(ck, f"s-{i}"), reserve=True)
    run("dcp", None, lambda i: FileSystemWriter(f"{args.root}/fs/t{i}"))
    q.put(res)
    dist.destroy_process_group()


def tensors_report(s):
    n, cp = s["n"], s["copy"]
    ck_steady = median(s["ck_reserved"][2:])
    dcp_steady = median(s["dcp"][2:])
    print(f"tensors: {n} float32 tensors, {s['rank_bytes'] / (1 << 20):.0f} MiB on 1 gloo rank; "
          f"memcpy of all the bytes {cp:.3f} s")

    def row(what, ours, peer, peer_what="DCP"):
        print(f"{what:<40} {ours:8.3f} s   {peer_what} {peer:8.3f} s   ({ours / peer:5.2f}x)")
    row("first save, no reserve()", s["ck_fresh"][0], s["dcp"][0], "DCP first")
    row("first save after reserve()", s["ck_reserved"][0], ck_steady, "our steady")
    row("steady stall (3rd save on, median)", ck_steady, dcp_steady, "DCP steady")
    print(f"{'per tensor beyond the copy, steady':<40} {(ck_steady - cp) / n * 1e6:8.1f} us"
          f"  DCP {(dcp_steady - cp) / n * 1e6:8.1f} us")
    print("all stalls (s): ours fresh " + " ".join(f"{x:.3f}" for x in s["ck_fresh"])
          + "; ours reserved " + " ".join(f"{x:.3f}" for x in s["ck_reserved"])
          + "; DCP " + " ".join(f"{x:.3f}" for x in s["dcp"]))


def median(xs):
    xs = sorted(xs)
    k = len(xs)
    return (xs[(k - 1) // 2] + xs[k // 2]) / 2 if xs else float("nan")


def loader(rank, world, store, args, q):
    cuda = args.device == "cuda"
    if cuda:
        torch.cuda.set_device(0)
        dist.init_process_group("cpu:gloo,cuda:nccl", init_method=f"file://{store}",
                                rank=rank, world_size=world)
    else:
        dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank,
                                world_size=world)
    from torch.distributed.checkpoint import FileSystemReader
    from libshard.dcp import CkptReader
    res = {}
    loads = (("dcp_load", lambda: FileSystemReader(f"{args.root}/fs/s0")),
             ("ck_load", lambda: CkptReader(f"{args.root}/ck", "sync-0")),
             ("ck_load_unverified",
              lambda: CkptReader(f"{args.root}/ck", "sync-0", verify=False)))
    for _ in range(args.loads):
        for tag, make in loads:
            sd = cuda_state(args)[0] if cuda else cpu_state(rank, world, args.size)
            if rank == 0:
                drop_cache(args.root)
            dist.barrier()
            t = time.perf_counter()
            dcp.load(sd, storage_reader=make())
            if cuda:
                torch.cuda.synchronize()
            dist.barrier()
            res.setdefault(tag, []).append(time.perf_counter() - t)
    res = {tag: sorted(ts)[len(ts) // 2] for tag, ts in res.items()}
    if rank == 0:
        q.put(res)
    dist.destroy_process_group()


def spawn(fn, world, args):
    ctx = mp.get_context("spawn")
    q = ctx.SimpleQueue()
    store = tempfile.mktemp(dir=args.root)
    ps = [ctx.Process(target=fn, args=(r, world, store, args, q)) for r in range(world)]
    for p in ps:
        p.start()
    for p in ps:
        p.join()
    if any(p.exitcode for p in ps):
        sys.exit(f"{fn.__name__}: a rank failed")
    return q.get()


def export(args):
    """(seconds, peak RSS bytes, rc) of DCP's full state dict to safetensors and of
    ckpt-consolidate, each in a child process."""
    out = {}
    code = (f"import torch, sys\n"
            f"from torch.distributed.checkpoint.format_utils import dcp_to_torch_save\n"
            f"from safetensors.torch import save_file\n"
            f"dcp_to_torch_save('{args.root}/fs/s0', '{args.root}/full.pt')\n"
            f"sd = torch.load('{args.root}/full.pt')\n"
            f"save_file({{k: v.contiguous() for k, v in sd.items()}}, '{args.root}/dcp.safetensors')\n")
    for tag, cmd in (("dcp_export", [sys.executable, "-c", code]),
                     ("ck_export", [os.path.join(BUILD, "tools", "ckpt-consolidate"),
                                    f"{args.root}/ck", "sync-0", "-o", f"{args.root}/exp"])):
        drop_cache(args.root)
        t = time.perf_counter()
        p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL)
        hwm = 0
        while p.poll() is None:     # the child's own VmHWM (fork's RSS is not ours)
            try:
                with open(f"/proc/{p.pid}/status") as f:
                    for line in f:
                        if line.startswith("VmHWM:"):
                            hwm = max(hwm, int(line.split()[1]) * 1024)
            except OSError:
                pass
            time.sleep(0.01)
        out[tag] = (time.perf_counter() - t, hwm, p.returncode)
    return out


def mean(xs):
    return sum(xs) / len(xs) if xs else float("nan")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("root")
    ap.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    ap.add_argument("--size", type=size_arg, default=1 << 30, help="CPU: bytes in all")
    ap.add_argument("--blocks", type=int, default=12, help="CUDA: blocks of the model")
    ap.add_argument("--dim", type=int, default=2048, help="CUDA: the model's width")
    ap.add_argument("--saves", type=int, default=3, help="saves per copy-mode figure")
    ap.add_argument("--loads", type=int, default=3, help="runs of each load figure")
    ap.add_argument("--no-ckptd", action="store_true")
    ap.add_argument("--export", action="store_true", help="CPU: time the exports too")
    ap.add_argument("--tensors", type=int, default=0,
                    help="N: the per-tensor cost of a save, N float32 tensors on one rank")
    args = ap.parse_args()
    if args.tensors:
        if args.size == 1 << 30 and "--size" not in sys.argv:
            args.size = 256 << 20
        shutil.rmtree(args.root, ignore_errors=True)
        os.makedirs(os.path.join(args.root, "ck"))
        tensors_report(spawn(tensors_saver, 1, args))
        return
    if args.device == "cuda" and not torch.cuda.is_available():
        print("skip: torch sees no CUDA device")
        sys.exit(77)
    world = 1 if args.device == "cuda" else 2
    shutil.rmtree(args.root, ignore_errors=True)
    os.makedirs(os.path.join(args.root, "ck"))
    args.socket = None
    d = None
    if not args.no_ckptd:
        args.socket = os.path.join(args.root, "ck", ".ckptd.sock")
        staging = 8 * args.dim * args.dim * 12 * args.blocks if args.device == "cuda" \
            else args.size
        d = subprocess.Popen([os.path.join(BUILD, "ckptd", "ckptd"), "--root",
                              f"{args.root}/ck", "--foreground", "--staging",
                              str(2 * staging + (256 << 20))])
        while not os.path.exists(args.socket):
            if d.poll() is not None:
                sys.exit("ckptd did not start")
            time.sleep(0.05)
    try:
        s = spawn(saver, world, args)
    finally:
        if d:
            d.terminate()
            d.wait()
    ld = spawn(loader, 1 if args.device == "cuda" else 3, args)
    total = s["rank_bytes"] * world
    w, r = raw_io(args.root, total)
    cp = s["copy"]
    cpname = "pinned D2H" if args.device == "cuda" else "memcpy"

    print(f"state dict: {total / 1e9:.2f} GB on {world} rank(s) "
          f"({s['rank_bytes'] / 1e9:.2f} GB each), {args.device}")
    print(f"references: {cpname} of a rank's bytes {cp:.3f} s "
          f"({s['rank_bytes'] / cp / 1e9:.1f} GB/s)"
          + (f", pageable D2H (t.cpu()) {s['pageable']:.3f} s" if s["pageable"] else "")
          + f"; O_DIRECT write of all bytes {w:.3f} s ({total / w / 1e9:.2f} GB/s), "
          f"read {r:.3f} s ({total / r / 1e9:.2f} GB/s)")

    def stall(what, ours, dcp_s):
        print(f"{what:<44} {ours:8.3f} s   DCP {dcp_s:8.3f} s ({dcp_s / ours:5.1f}x ours)"
              f"   = {ours / cp:5.2f}x the {cpname}")

    def speed(what, ours, dcp_s, ref, ref_name):
        print(f"{what:<44} {ours:8.3f} s   DCP {dcp_s:8.3f} s ({dcp_s / ours:5.1f}x ours)"
              f"   = {ref / ours:5.2f} of the {ref_name} speed")

    print(f"staging reserved at start-up (CkptWriter.reserve, both engines): "
          f"{s['reserve']:.3f} s")
    dd = s["dcp_default"]
    best = s.get("dcp_best")
    ck = s["ck_copy"]
    stall("stall, copy mode, first save", ck["stalls"][0], dd["stalls"][0])
    stall("stall, copy mode, 3rd save on", mean(ck["stalls"][2:] or ck["stalls"][-1:]),
          mean(dd["stalls"][2:] or dd["stalls"][-1:]))
    if "ckptd_copy" in s:
        stall("stall through ckptd, new writer per save", mean(s["ckptd_copy"]["stalls"]),
              mean(dd["stalls"]))
        print(f"{'   ... vs the embedded stall':<44} "
              f"{mean(s['ckptd_copy']['stalls']) / mean(ck['stalls'][1:] or ck['stalls']):5.2f}x")
    st = s["ck_staging"]
    if best:
        stall("async staging: async_save returns", mean(st["stalls"]), mean(best["stalls"]))
        print(f"{'async staging: wait at the fence after a step':<44} "
              f"{mean(st['fences']) * 1e3:8.1f} ms   DCP {mean(best['fences']) * 1e3:8.1f} ms"
              f" (DefaultStager, every option)")
        stall("DCP DefaultStager (every option), stall", mean(best["stalls"]),
              mean(best["stalls"]))
    else:
        print(f"{'async staging: async_save returns':<44} {mean(st['stalls']):8.3f} s; "
              f"fence after a step {mean(st['fences']) * 1e3:.1f} ms")
    speed("async_save to committed, hashed", mean(ck["totals"][1:] or ck["totals"]),
          mean(dd["totals"][1:] or dd["totals"]), w, "raw write")
    speed("async_save to committed, no hash", mean(s["ck_nohash"]["totals"]),
          mean(dd["totals"][1:] or dd["totals"]), w, "raw write")
    speed("sync dcp.save to committed", s["ck_sync"]["totals"][0],
          s["dcp_sync"]["totals"][0], w, "raw write")
    speed(f"dcp.load onto {1 if args.device == 'cuda' else 3} rank(s), cache dropped",
          ld["ck_load"], ld["dcp_load"], r, "raw read")
    speed("   ... with verify=False (no SHA-256)", ld["ck_load_unverified"], ld["dcp_load"],
          r, "raw read")
    print(f"{'   ... verified / unverified':<44} "
          f"{ld['ck_load'] / ld['ck_load_unverified']:5.2f}x   (target <= 1.10; medians "
          f"of {args.loads})")
    if args.export:
        ex = export(args)
        (de, drss, drc), (ce, crss, crc) = ex["dcp_export"], ex["ck_export"]
        print(f"{'export to safetensors':<44} {ce:8.3f} s   DCP {de:8.3f} s ({de / ce:5.1f}x "
              f"ours)   peak RSS {crss / (1 << 20):.0f} MiB vs DCP {drss / (1 << 20):.0f} MiB"
              f"{'' if drc == 0 and crc == 0 else '   (an export failed: rc ' + str((drc, crc)) + ')'}")


if __name__ == "__main__":
    main()
