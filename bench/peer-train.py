#!/usr/bin/env python3
"""bench/peer-train.py: the trainer's GPT (trainer/model.c) in PyTorch, the peer that
bench/train's tokens/s are read beside (tests/gpu/run runs both at the same shapes).

    python3 bench/peer-train.py --layers 6 --dim 512 --heads 8 --seq 128 --batch 32 \
        [--steps 10] [--modes f32,bf16,compile] [--device cuda] [--budget SECONDS]

The same model as trainer/model.c: byte vocabulary (256), token plus position
embeddings, pre-norm blocks (LayerNorm eps 1e-5; qkv, proj, fc, fc-proj with biases;
GELU tanh form; causal attention through scaled_dot_product_attention), a final
LayerNorm and a head tied to the token embedding; the parameter count is checked
against tr_model_numel's formula. The same step as bench/train's: cross-entropy over
every token, backward, gradient clipping at norm 1, AdamW (betas 0.9, 0.95, eps 1e-8,
weight decay 0, fused on CUDA), zero_grad. The data are random bytes already on the
device (bench/train samples a corpus on the host; its copy up is part of its step).

Modes: f32 (TF32 off, as bench/train's f32 GEMMs), bf16 (autocast), compile
(torch.compile of the bf16 model; its compile time printed apart and not counted).
Each mode: 3 warm-up steps, then --steps timed ones between two synchronizations.
MFU: the model's FLOPs (6 x the matmul parameters, head included, plus 12 L C T per
token for attention, PaLM's count, as bench/train's) over the rate of a bf16 GEMM
(8192^3, cuBLAS through torch.matmul) timed in the same run. --budget stops before a
mode that would start after that many seconds (a GPU check has a fixed time).
"""
import argparse
import contextlib
import math
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

VOCAB = 256
T0 = time.monotonic()


class Block(nn.Module):
    def __init__(self, C, H):
        super().__init__()
        self.H = H
        self.ln1 = nn.LayerNorm(C, eps=1e-5)
        self.qkv = nn.Linear(C, 3 * C)
        self.proj = nn.Linear(C, C)
        self.ln2 = nn.LayerNorm(C, eps=1e-5)
        self.fc = nn.Linear(C, 4 * C)
        self.fcp = nn.Linear(4 * C, C)

    def forward(self, x):
        B, T, C = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(C, dim=2)
        q, k, v = (t.view(B, T, self.H, C // self.H).transpose(1, 2) for t in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(y.transpose(1, 2).contiguous().view(B, T, C))
        return x + self.fcp(F.gelu(self.fc(self.ln2(x)), approximate="tanh"))


class GPT(nn.Module):
    def __init__(self, L, C, H, T):
        super().__init__()
        self.wte = nn.Embedding(VOCAB, C)
        self.wpe = nn.Embedding(T, C)
        self.blocks = nn.ModuleList(Block(C, H) for _ in range(L))
        self.ln_f = nn.LayerNorm(C, eps=1e-5)
        for p in self.parameters():
            if p.dim() == 2:
                nn.init.normal_(p, std=0.02)

    def forward(self, tok):
        x = self.wte(tok) + self.wpe.weight[: tok.shape[1]]
        for b in self.blocks:
            x = b(x)
        return self.ln_f(x) @ self.wte.weight.t()   # the head is tied to wte


def numel(L, C, T):
    """tr_model_numel (trainer/model.c)."""
    return VOCAB * C + T * C + 2 * C + L * (12 * C * C + 13 * C)


def flops_per_token(L, C, T):
    """6 N for the linear layers (head included) plus 12 L C T for attention."""
    return 6 * (L * 12 * C * C + VOCAB * C) + 12 * L * C * T


def sync(dev):
    if dev == "cuda":
        torch.cuda.synchronize()


def gemm_rate():
    """TFLOP/s of a bf16 8192^3 GEMM through torch.matmul (cuBLAS)."""
    n = 8192
    a = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    for _ in range(2):
        a @ b
    sync("cuda")
    t = time.perf_counter()
    reps = 10
    for _ in range(reps):
        a @ b
    sync("cuda")
    return 2.0 * n ** 3 * reps / (time.perf_counter() - t) / 1e12


def run_mode(mode, args, dev):
    torch.manual_seed(1)
    model = GPT(args.layers, args.dim, args.heads, args.seq).to(dev)
    n = sum(p.numel() for p in model.parameters())
    want = numel(args.layers, args.dim, args.seq)
    if n != want:
        sys.exit(f"peer: {n} parameters, tr_model_numel's formula says {want}")
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4, betas=(0.9, 0.95), eps=1e-8,
                            weight_decay=0.0, fused=dev == "cuda")
    fwd = torch.compile(model) if mode == "compile" else model
    amp = (torch.autocast(dev, dtype=torch.bfloat16) if mode in ("bf16", "compile")
           else contextlib.nullcontext())
    data = torch.randint(0, VOCAB, (4, args.batch, args.seq + 1), device=dev)

    def step(i):
        x, y = data[i % 4, :, :-1], data[i % 4, :, 1:]
        with amp:
            loss = F.cross_entropy(fwd(x).reshape(-1, VOCAB).float(), y.reshape(-1))
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        return loss

    t = time.perf_counter()
    for i in range(3):
        loss = step(i)
    sync(dev)
    warm = time.perf_counter() - t
    t = time.perf_counter()
    for i in range(args.steps):
        loss = step(i)
    sync(dev)
    dt = time.perf_counter() - t
    return args.batch * args.seq * args.steps / dt, warm, float(loss.detach())


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--layers", type=int, default=6)
    ap.add_argument("--dim", type=int, default=512)
    ap.add_argument("--heads", type=int, default=8)
    ap.add_argument("--seq", type=int, default=128)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--modes", default="f32,bf16,compile")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--budget", type=float, default=1e9)
    args = ap.parse_args()
    dev = args.device
    if dev == "cuda" and not torch.cuda.is_available():
        print("skip: peer-train: torch sees no CUDA device")
        return 77
    # f32 means f32: no TF32 in the GEMMs (bench/train's cuBLAS calls use none).
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.set_float32_matmul_precision("highest")
    L, C, T = args.layers, args.dim, args.seq
    where = torch.cuda.get_device_name() if dev == "cuda" else "cpu"
    peak = gemm_rate() if dev == "cuda" else 0.0
    fpt = flops_per_token(L, C, T)
    print(f"peer: torch {torch.__version__} on {where}: {L} layers, dim {C}, "
          f"{args.heads} heads, seq {T}, batch {args.batch}, "
          f"{numel(L, C, T)} parameters, {fpt / 1e9:.3f} GFLOP a token")
    if peak:
        print(f"peer: bf16 GEMM 8192^3 (cuBLAS through torch.matmul): {peak:.1f} TFLOP/s")
    for mode in args.modes.split(","):
        if time.monotonic() - T0 > args.budget:
            print(f"peer {mode:<8} not run: the {args.budget:.0f} s budget is spent")
            continue
        tps, warm, loss = run_mode(mode, args, dev)
        tf = tps * fpt / 1e12
        mfu = f"MFU {100 * tf / peak:5.1f}%" if peak else "MFU -"
        extra = f", compiled in {warm:.1f} s" if mode == "compile" else ""
        print(f"peer {mode:<8} {tps:12.0f} tokens/s  {tf:7.2f} TFLOP/s  {mfu}  "
              f"(loss {loss:.3f}{extra})")
        sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
