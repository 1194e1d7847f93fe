"""The manager's model-only Hugging Face side: the last save as safetensors
(torchtitan's ``last_save_in_hf``) and a first load from an exported model
(``initial_load_path`` pointing at safetensors).

Both work on the model's state dict as the training job holds it (DTensor shards or
plain tensors), under the keys of the model's own ``state_dict()``; ``key_map``
(model key -> file key, e.g. a torchtitan ``to_hf`` rename) is applied on the way out
and, for the same keys, on the way in. The streaming exporter of a committed
checkpoint (bounded memory, the C consolidator) is ``ckpt-consolidate`` and
``libshard.export``; this is the small path a training loop takes at its last step.
"""
import os
import tempfile

import torch
import torch.distributed as dist

MODEL_FILE = "model.safetensors"


def _mapped(keys, key_map):
    out = {}
    for k in keys:
        hk = key_map(k) if key_map is not None else k
        if hk in out:
            raise ValueError(f"key_map sends both {out[hk]!r} and {k!r} to {hk!r}")
        out[hk] = k
    return out


def _fsync_dir(path):
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def save_model_hf(model_sd, out_dir, *, dtype=None, key_map=None, rank=0):
    """Writes the full tensors of model_sd as out_dir/model.safetensors (metadata
    format "pt"), every floating-point tensor converted to dtype (None: kept; integer
    and bool tensors are never converted), under key_map(key). Collective over the
    ranks of model_sd's DTensors (each gathers its full tensor, one at a time); rank 0
    keeps them on the CPU and writes. out_dir appears whole or not at all (written
    beside it, fsynced, renamed), and an existing out_dir is never replaced
    (FileExistsError). Returns the file's path on rank 0, None on the others."""
    from safetensors.torch import save_file
    names = _mapped(model_sd, key_map)
    full = {}
    for hk, k in names.items():
        t = model_sd[k]
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"model state {k!r} is a {type(t).__name__}, not a tensor: "
                            "safetensors holds tensors only")
        t = t.full_tensor() if hasattr(t, "full_tensor") else t
        if rank == 0:
            want = dtype if dtype is not None and t.is_floating_point() else t.dtype
            full[hk] = t.detach().to("cpu", dtype=want, copy=True).contiguous()
    if rank != 0:
        return None
    parent = os.path.dirname(os.path.abspath(out_dir))
    os.makedirs(parent, exist_ok=True)
    if os.path.lexists(out_dir):
        raise FileExistsError(f"{out_dir} exists; an export is never replaced")
    tmp = tempfile.mkdtemp(prefix=f".{os.path.basename(out_dir)}.", dir=parent)
    try:
        path = os.path.join(tmp, MODEL_FILE)
        save_file(full, path, metadata={"format": "pt"})
        with open(path, "rb") as f:
            os.fsync(f.fileno())
        _fsync_dir(tmp)
        os.rename(tmp, out_dir)
    except BaseException:
        for f in os.listdir(tmp):
            os.unlink(os.path.join(tmp, f))
        os.rmdir(tmp)
        raise
    _fsync_dir(parent)
    return os.path.join(out_dir, MODEL_FILE)


def is_hf_export(path):
    """Whether path is safetensors: a .safetensors file, or a directory holding
    model.safetensors or a sharded index."""
    if os.path.isfile(path):
        return path.endswith(".safetensors")
    return os.path.isfile(os.path.join(path, MODEL_FILE)) or \
        os.path.isfile(os.path.join(path, MODEL_FILE + ".index.json"))


def load_model_hf(model_sd, path, *, key_map=None, process_group=None):
    """Loads every tensor of model_sd (DTensor shards or plain tensors, in place) from
    the safetensors at path (a directory of .safetensors files, as save_model_hf or
    transformers write them), the file key of each being key_map(key). Dtypes convert
    (bf16 into f32 and back); a missing key or another shape fails, naming it."""
    try:
        from torch.distributed.checkpoint import HuggingFaceStorageReader
    except ImportError as e:                        # pragma: no cover
        raise RuntimeError("loading safetensors needs torch >= 2.8 "
                           "(torch.distributed.checkpoint.HuggingFaceStorageReader)") from e
    import torch.distributed.checkpoint as dcp
    directory = os.path.dirname(path) if os.path.isfile(path) else path
    renamed = {hk: model_sd[k] for hk, k in _mapped(model_sd, key_map).items()}
    dcp.load(renamed, storage_reader=HuggingFaceStorageReader(directory),
             process_group=process_group, no_dist=not dist.is_initialized())
