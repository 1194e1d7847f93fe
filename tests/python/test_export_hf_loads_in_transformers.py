"""A GPT-2 trained under FSDP2 on 2 gloo ranks with CheckpointManager, saved as DCP's
tutorial saves a Stateful app (model and AdamW state under "app."), exports model-only
into what transformers' GPT2LMHeadModel.from_pretrained loads with no missing or
unexpected key: in f32 (export_hf, sharded, with an index) it gives the trained model's
logits exactly; in bf16 (ckpt-consolidate --model-only --dtype bf16, one file) exactly
the logits of the trained weights rounded to bf16. A key_map callable that leaves out
the tied lm_head.weight still loads, tied to the embedding; one that raises fails the
export with its own exception. The optimizer's state stays out of every export. The
model is built from a local GPT2Config: nothing is downloaded. About 25 s on 2 cores."""
import os
import sys

os.environ["HF_HUB_OFFLINE"] = "1"      # a local config and local files: no network at all

try:
    import transformers  # noqa: F401
except ImportError:
    print("SKIP: transformers missing from the venv (scripts/install-deps installs it)")
    sys.exit(77)

import torch
from torch.distributed.checkpoint.stateful import Stateful

import common

STEPS = 3


def config():
    from transformers import GPT2Config
    return GPT2Config(n_layer=2, n_embd=64, n_head=2, vocab_size=128, n_positions=64,
                      bos_token_id=0, eos_token_id=0, resid_pdrop=0.0, embd_pdrop=0.0,
                      attn_pdrop=0.0)


class App(Stateful):
    """The model and the optimizer as one Stateful, as DCP's tutorial saves them."""

    def __init__(self, model, opt):
        self.model, self.opt = model, opt

    def state_dict(self):
        from torch.distributed.checkpoint.state_dict import get_state_dict
        msd, osd = get_state_dict(self.model, self.opt)
        return {"model": msd, "optim": osd}

    def load_state_dict(self, sd):
        from torch.distributed.checkpoint.state_dict import set_state_dict
        set_state_dict(self.model, self.opt, model_state_dict=sd["model"],
                       optim_state_dict=sd["optim"])


def train(rank, world, root, ref_path):
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict
    from torch.distributed.fsdp import fully_shard
    from transformers import GPT2LMHeadModel
    from libshard.loop import CheckpointManager
    torch.manual_seed(0)
    model = GPT2LMHeadModel(config())
    for block in model.transformer.h:
        fully_shard(block)
    fully_shard(model)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    ckpt = CheckpointManager(root)
    g = torch.Generator().manual_seed(rank)
    for step in range(1, STEPS + 1):
        x = torch.randint(0, 128, (2, 16), generator=g)
        model(x, labels=x).loss.backward()
        opt.step()
        opt.zero_grad()
        ckpt.save(step, {"app": App(model, opt)})
    ckpt.close()
    assert ckpt.failed_saves == 0
    full = get_model_state_dict(model, options=StateDictOptions(full_state_dict=True,
                                                                cpu_offload=True))
    if rank == 0:
        torch.save(full, ref_path)


def logits(model, x):
    with torch.no_grad():
        return model(x).logits


def load(d, dtype=None):
    from transformers import GPT2LMHeadModel
    config().save_pretrained(d)             # the export writes the weights only
    kw = {"dtype": dtype} if dtype is not None else {}
    model, info = GPT2LMHeadModel.from_pretrained(d, output_loading_info=True, **kw)
    bad = {k: v for k, v in info.items() if v}
    assert not bad, f"{d}: from_pretrained says {bad}"
    return model.eval()


def main():
    from transformers import GPT2LMHeadModel
    import libshard
    from libshard.export import export_hf
    root = common.tmpdir("hf")
    ref_path = os.path.join(root, "trained.pt")
    common.run_ranks(2, train, os.path.join(root, "ckpt"), ref_path, timeout=200)
    root_ck = os.path.join(root, "ckpt")
    name = f"step-{STEPS}"
    ck = libshard.Checkpoint(root_ck, name)
    keys = [libshard._ck.key_decode(t[0]) for t in ck.tensors()]
    ck.close()
    optim = [k for k in keys if k.startswith("app.optim.")]
    assert optim and any(k.startswith("app.model.") for k in keys), keys

    ref = GPT2LMHeadModel(config()).eval()
    ref.load_state_dict(torch.load(ref_path))
    x = torch.arange(40).reshape(2, 20) % 128
    want = logits(ref, x)
    rounded = GPT2LMHeadModel(config()).eval()
    rounded.load_state_dict({k: v.to(torch.bfloat16).float() for k, v in ref.state_dict().items()})
    want_bf16 = logits(rounded, x)
    assert not torch.equal(want, want_bf16), "bf16 rounding changed no logit: a weak test"

    # f32, several files and an index, from Python; the newest step (name None).
    d = os.path.join(root, "hf-f32")
    s = export_hf(root_ck, None, d, max_shard_size=100_000)
    assert s["prefix"] == "app.model." and s["files"] > 1 and s["sharded"], s
    assert s["tensors"] == len(ref.state_dict()), (s, len(ref.state_dict()))
    assert os.path.exists(os.path.join(d, "model.safetensors.index.json"))
    m = load(d, torch.float32)
    assert torch.equal(logits(m, x), want), "the f32 export's logits are not the trained ones"

    # bf16, one file, from the command line.
    d = os.path.join(root, "hf-bf16")
    out = common.check([common.tool("ckpt-consolidate"), root_ck, name, "-o", d, "--model-only",
                        "--dtype", "bf16"])
    assert "prefix 'app.model.' cut off" in out, out
    assert sorted(os.listdir(d)) == ["model.safetensors"], os.listdir(d)
    m = load(d)
    assert all(p.dtype == torch.bfloat16 for p in m.parameters())
    assert torch.equal(logits(m.float(), x), want_bf16), \
        "the bf16 export's logits are not the rounded model's"

    # A callable key map that leaves out the tied head: transformers ties it to wte.
    d = os.path.join(root, "hf-untied")
    s = export_hf(root_ck, name, d, dtype=torch.bfloat16,
                  key_map=lambda k: None if k == "lm_head.weight" else k)
    assert s["tensors"] == len(ref.state_dict()) - 1, s
    from safetensors import safe_open
    with safe_open(os.path.join(d, "model.safetensors"), "pt") as f:
        assert "lm_head.weight" not in f.keys() and f.metadata() == {"format": "pt"}
    m = load(d, torch.float32)
    assert torch.equal(logits(m, x), want_bf16), "the export without lm_head.weight differs"

    # A key map that raises, or answers with no str, fails the export with its error.
    for bad, exc in ((lambda k: 1 // 0, ZeroDivisionError), (lambda k: 7, TypeError)):
        d = os.path.join(root, f"hf-{exc.__name__}")
        try:
            export_hf(root_ck, name, d, key_map=bad)
        except exc:
            pass
        else:
            raise AssertionError(f"a key_map raising {exc.__name__} exported")
        assert not os.path.exists(os.path.join(d, "model.safetensors")), d


if __name__ == "__main__":
    common.main(main)
