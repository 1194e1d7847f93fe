"""CheckpointManager takes torchtitan's [checkpoint] options and does what they say
(one process, a small torch model):
- interval=2 with enable_first_step_checkpoint saves steps 1, 2, 4 and the last_step 5;
- async_mode maps onto ours ("disabled": committed when save returns; "async": no
  staging fence; "async_with_pinned_mem": the fence), and an unknown mode is refused;
- load_step loads that step; exclude_from_loading leaves those keys alone; load_only
  never saves;
- last_save_model_only with export_dtype=bfloat16: the last save holds the model alone,
  its floating tensors in bf16 (integer ones unchanged), and a later load() loads the
  model from it and leaves the rest of the state alone;
- last_save_in_hf: the model-only step-N, exported by the streaming exporter into
  ROOT-hf/step-N/model.safetensors under the model's own state_dict() keys mapped by
  hf_key_map, in bf16;
- initial_load_path, when the root holds no step of the run: that safetensors export
  (model only, through the same key map), another root's checkpoint (model only by
  default; the whole state with initial_load_model_only=False, returning its step), a
  DCP FileSystemWriter directory; and it is ignored once the root has steps."""
import os

import torch
import torch.distributed.checkpoint as dcp
import torch.nn as nn

import common
import libshard
from libshard.loop import CheckpointManager

BF16 = {name: code for code, name, *_ in libshard._ck.dtypes()}["bf16"]


def make(seed):
    torch.manual_seed(seed)
    m = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 3))
    m.register_buffer("seen", torch.tensor([seed], dtype=torch.int64))
    return m


def state(seed):
    m = make(seed)
    return m, {"model": m.state_dict(), "extra": {"lr": torch.tensor(float(seed))},
               "data": {"pos": torch.tensor(seed)}}


def names(root):
    return sorted(n for *_, n in libshard.committed(root))


def same_model(a, b, dtype=None):
    for k, v in a.state_dict().items():
        w = b.state_dict()[k]
        want = v.to(dtype).to(v.dtype) if dtype is not None and v.is_floating_point() else v
        assert torch.equal(want, w), (k, want, w)


def main():
    base = common.tmpdir("mgr-tt")
    root = os.path.join(base, "run")

    # interval, enable_first_step_checkpoint, async_mode="disabled"
    trained, st = state(1)
    m = CheckpointManager(root, interval=2, enable_first_step_checkpoint=True,
                          async_mode="disabled")
    for step in range(1, 6):
        st["data"]["pos"].fill_(step)
        saved = m.save(step, st, last_step=step == 5)
        assert saved == (step in (1, 2, 4, 5)), (step, saved)
        assert saved == os.path.isdir(os.path.join(root, f"step-{step}")), step
    m.close()
    assert names(root) == ["step-1", "step-2", "step-4", "step-5"], names(root)

    # async modes: ours underneath
    for mode, want in (("disabled", (False, False)), ("async", (True, False)),
                       ("async_with_pinned_mem", (True, True))):
        x = CheckpointManager(root, async_mode=mode, load_only=True)
        assert (x.async_save, x.async_staging) == want, (mode, x.async_save, x.async_staging)
    try:
        CheckpointManager(root, async_mode="pinned")
    except ValueError as e:
        assert "async_with_pinned_mem" in str(e), e
    else:
        raise AssertionError("async_mode='pinned' was accepted")

    # load_step, exclude_from_loading, load_only
    _, got = state(9)
    assert CheckpointManager(root, load_step=2, exclude_from_loading=["extra"]).load(got) == 2
    assert int(got["data"]["pos"]) == 2 and float(got["extra"]["lr"]) == 9.0, got
    ro = CheckpointManager(root, load_only=True)
    assert ro.load(state(9)[1]) == 5
    assert ro.save(6, st, last_step=True) is False and names(root)[-1] == "step-5"

    # last_save_model_only + export_dtype; a later load takes the model only
    m = CheckpointManager(root, last_save_model_only=True, export_dtype="bfloat16")
    m.save(6, st, last_step=True)
    ck = libshard.Checkpoint(root, "step-6")
    dt = {n: code for n, code, *_ in ck.tensors()}
    ck.close()
    assert sorted(dt) == ["model.0.bias", "model.0.weight", "model.2.bias",
                          "model.2.weight", "model.seen"], dt
    assert all(dt[k] == BF16 for k in dt if k != "model.seen"), dt
    assert libshard._ck.dtype_name(dt["model.seen"]) == "i64", dt
    fresh, got = state(7)
    assert CheckpointManager(root).load(got) == 6
    same_model(trained, fresh, torch.bfloat16)
    assert int(got["data"]["pos"]) == 7, "the rest of the state was loaded"

    # last_save_in_hf: the model's own keys, mapped
    hf_root = os.path.join(base, "hfrun")
    key_map = lambda k: "model." + k
    m = CheckpointManager(hf_root, last_save_model_only=True, last_save_in_hf=True,
                          export_dtype="bfloat16", hf_key_map=key_map)
    m.save(3, st, last_step=True)
    path = os.path.join(hf_root + "-hf", "step-3", "model.safetensors")
    from safetensors.torch import load_file
    sf = load_file(path)
    assert set(sf) == {key_map(k) for k in trained.state_dict()}, sorted(sf)
    assert sf["model.0.weight"].dtype == torch.bfloat16 and sf["model.seen"].dtype == torch.int64
    assert torch.equal(sf["model.0.weight"], trained.state_dict()["0.weight"].bfloat16())
    assert names(hf_root) == ["step-3"], "the model-only checkpoint the export streamed from"

    # initial_load_path: safetensors, another root's checkpoint, DCP's directory
    fresh, got = state(8)
    a = CheckpointManager(os.path.join(base, "from-hf"), hf_key_map=key_map,
                          initial_load_path=os.path.dirname(path))
    assert a.load(got) == 0
    same_model(trained, fresh, torch.bfloat16)
    fresh, got = state(8)
    b = CheckpointManager(os.path.join(base, "from-ck"),
                          initial_load_path=os.path.join(root, "step-4"))
    assert b.load(got) == 0 and int(got["data"]["pos"]) == 8
    same_model(trained, fresh)
    fresh, got = state(8)
    c = CheckpointManager(os.path.join(base, "from-ck-all"), initial_load_model_only=False,
                          initial_load_path=os.path.join(root, "step-4"))
    assert c.load(got) == 4 and int(got["data"]["pos"]) == 4
    dcp_dir = os.path.join(base, "dcp")
    dcp.save(st, checkpoint_id=dcp_dir, no_dist=True)
    fresh, got = state(8)
    d_root = os.path.join(base, "from-dcp")
    d = CheckpointManager(d_root, initial_load_path=dcp_dir, async_mode="disabled")
    assert d.load(got) == 0
    same_model(trained, fresh)
    d.save(1, got)
    fresh, got = state(8)
    assert CheckpointManager(d_root, initial_load_path=dcp_dir).load(got) == 1, \
        "initial_load_path was used though the root has a step"


if __name__ == "__main__":
    common.main(main)
