#!/usr/bin/env python3
"""bench/peer-dcp.py: DCP's FileSystemWriter against CkptWriter, in one run (by hand).

    PYTHONPATH=build/python .venv/bin/python bench/peer-dcp.py /var/tmp/peer --size 1GiB

The same FSDP2-style state dict (bf16 DTensors sharded on dim 0, rows that do not
divide by 2) on 2 gloo ranks: DCP's FileSystemWriter (default and thread_count=2) and
async_save against CkptWriter sync and async, embedded and through ckptd. Printed per
figure: ours, DCP's, the ratio, beside the physical references measured in the same
run: a memcpy of the rank's bytes (for stalls), a raw O_DIRECT write and read of the
same bytes (for completion and load). Stalls: the first save, and the mean of the third
onward. Loads: 3 ranks, the page cache dropped (posix_fadvise DONTNEED) first. Export:
DCP's full state dict to safetensors against ckpt-consolidate, time and peak RSS.
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
SAVES = 4


def size_arg(s):
    units = {"KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30}
    for u, m in units.items():
        if s.endswith(u):
            return int(float(s[:-len(u)]) * m)
    return int(s)


def shapes(total):
    """Eight bf16 matrices of 4099 columns whose rows sum to about total bytes."""
    rows = max(3, total // (8 * 4099 * 2))
    return [(rows + (i % 3), 4099) for i in range(8)]


def state(rank, world, total):
    from torch.distributed.tensor import DTensor, Shard, init_device_mesh
    mesh = init_device_mesh("cpu", (world,))
    sd = {}
    for i, shp in enumerate(shapes(total)):
        n = shp[0]
        c = -(-n // world)
        lo, hi = min(rank * c, n), min((rank + 1) * c, n)
        local = torch.full((hi - lo, shp[1]), float(i + rank), dtype=torch.bfloat16)
        sd[f"layers.{i}.w"] = DTensor.from_local(local, mesh, [Shard(0)], run_check=False,
                                                 shape=torch.Size(shp),
                                                 stride=(shp[1], 1))
    return sd


def drop_cache(path):
    for d, _, files in os.walk(path):
        for f in files:
            try:
                fd = os.open(os.path.join(d, f), os.O_RDONLY)
            except OSError:
                continue
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            os.close(fd)


def raw_io(dirpath, nbytes):
    """Seconds of an O_DIRECT write (with fsync) and read of nbytes."""
    path = os.path.join(dirpath, "raw.dat")
    buf = mmap.mmap(-1, 4 << 20)
    buf.write(b"\x5a" * (4 << 20))
    fd = os.open(path, os.O_CREAT | os.O_WRONLY | os.O_DIRECT | os.O_TRUNC, 0o600)
    t = time.perf_counter()
    done = 0
    while done < nbytes:
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


def saver(rank, world, store, args, q):
    dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank,
                            world_size=world)
    from torch.distributed.checkpoint import FileSystemWriter
    from libshard.dcp import CkptWriter
    sd = state(rank, world, args.size)
    mybytes = sum(v.to_local().numel() * 2 for v in sd.values())
    res = {"rank_bytes": mybytes}
    copies = [{k: torch.empty_like(v.to_local()) for k, v in sd.items()} for _ in range(2)]
    t = time.perf_counter()
    for k, v in sd.items():
        copies[0][k].copy_(v.to_local())
    res["memcpy"] = time.perf_counter() - t
    del copies

    def timed(tag, make_writer, is_async):
        stalls, totals = [], []
        for i in range(SAVES):
            dist.barrier()
            t0 = time.perf_counter()
            w = make_writer(i)
            if is_async:
                f = dcp.async_save(sd, storage_writer=w)
                stalls.append(time.perf_counter() - t0)
                f.result()
            else:
                dcp.save(sd, storage_writer=w)
            dist.barrier()
            totals.append(time.perf_counter() - t0)
        res[tag] = {"stall_first": stalls[0] if stalls else None,
                    "stall_steady": sum(stalls[2:]) / len(stalls[2:]) if stalls else None,
                    "total": sum(totals[1:]) / len(totals[1:])}

    fs = os.path.join(args.root, "fs")
    timed("dcp_fs", lambda i: FileSystemWriter(f"{fs}/s{i}"), False)
    timed("dcp_fs_t2", lambda i: FileSystemWriter(f"{fs}/t{i}", thread_count=2), False)
    timed("dcp_async", lambda i: FileSystemWriter(f"{fs}/a{i}"), True)
    ck = os.path.join(args.root, "ck")
    timed("ck_sync", lambda i: CkptWriter(ck, f"sync-{i}"), False)
    timed("ck_async", lambda i: CkptWriter(ck, f"async-{i}"), True)
    if args.socket:
        timed("ckptd_sync", lambda i: CkptWriter(ck, f"dsync-{i}", socket=args.socket), False)
        timed("ckptd_async", lambda i: CkptWriter(ck, f"dasync-{i}", socket=args.socket), True)
    if rank == 0:
        q.put(res)
    dist.destroy_process_group()


def loader(rank, world, store, args, q):
    dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank,
                            world_size=world)
    from torch.distributed.checkpoint import FileSystemReader
    from libshard.dcp import CkptReader
    res = {}
    for tag, make in (("dcp_load", lambda: FileSystemReader(f"{args.root}/fs/s0")),
                      ("ck_load", lambda: CkptReader(f"{args.root}/ck", "sync-0"))):
        sd = state(rank, world, args.size)
        if rank == 0:
            drop_cache(args.root)
        dist.barrier()
        t = time.perf_counter()
        dcp.load(sd, storage_reader=make())
        dist.barrier()
        res[tag] = time.perf_counter() - t
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
    """(seconds, peak RSS bytes) of DCP's full state dict to safetensors, and of
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


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("root")
    ap.add_argument("--size", type=size_arg, default=1 << 30)
    ap.add_argument("--no-ckptd", action="store_true")
    args = ap.parse_args()
    shutil.rmtree(args.root, ignore_errors=True)
    os.makedirs(os.path.join(args.root, "ck"))
    args.socket = None
    d = None
    if not args.no_ckptd:
        args.socket = os.path.join(args.root, "ck", ".ckptd.sock")
        d = subprocess.Popen([os.path.join(BUILD, "ckptd", "ckptd"), "--root",
                              f"{args.root}/ck", "--foreground", "--staging",
                              str(4 * args.size // 2 + (64 << 20))])
        while not os.path.exists(args.socket):
            time.sleep(0.05)
    try:
        s = spawn(saver, 2, args)
    finally:
        if d:
            d.terminate()
            d.wait()
    ld = spawn(loader, 3, args)
    w, r = raw_io(args.root, s["rank_bytes"] * 2)
    ex = export(args)
    gib = s["rank_bytes"] / (1 << 30)

    def row(what, ours, theirs, ref=None, ref_name=""):
        line = f"{what:<40} {ours:8.3f} s   DCP {theirs:8.3f} s   ratio {theirs / ours:6.1f}x"
        if ref:
            line += f"   {ref_name} {ref:.3f} s ({ours / ref:.2f}x of it)"
        print(line)

    print(f"state dict: {2 * gib:.2f} GiB on 2 ranks ({gib:.2f} GiB each), bf16")
    print(f"references: memcpy of a rank's bytes {s['memcpy']:.3f} s; raw O_DIRECT write "
          f"of both ranks' bytes {w:.3f} s ({2 * gib / w:.2f} GiB/s), read {r:.3f} s "
          f"({2 * gib / r:.2f} GiB/s)")
    print(f"DCP FileSystemWriter save: default {s['dcp_fs']['total']:.3f} s, "
          f"thread_count=2 {s['dcp_fs_t2']['total']:.3f} s")
    da = s["dcp_async"]
    for tag in ("ck_async", "ckptd_async"):
        if tag in s:
            row(f"{tag}: async_save stall, first", s[tag]["stall_first"], da["stall_first"],
                s["memcpy"], "memcpy")
            row(f"{tag}: async_save stall, 3rd on", s[tag]["stall_steady"], da["stall_steady"],
                s["memcpy"], "memcpy")
            row(f"{tag}: save to committed", s[tag]["total"], da["total"], w, "raw write")
    for tag in ("ck_sync", "ckptd_sync"):
        if tag in s:
            row(f"{tag}: dcp.save to committed", s[tag]["total"], s["dcp_fs"]["total"], w,
                "raw write")
    row("load onto 3 ranks (cache dropped)", ld["ck_load"], ld["dcp_load"], r, "raw read")
    (de, drss, drc), (ce, crss, crc) = ex["dcp_export"], ex["ck_export"]
    print(f"{'export to safetensors':<40} {ce:8.3f} s   DCP {de:8.3f} s   ratio {de / ce:6.1f}x"
          f"   peak RSS {crss / (1 << 20):.0f} MiB vs DCP {drss / (1 << 20):.0f} MiB"
          f"{'' if drc == 0 and crc == 0 else '   (an export failed: rc ' + str((drc, crc)) + ')'}")


if __name__ == "__main__":
    main()
