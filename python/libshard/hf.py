"""The manager's Hugging Face side on the way in: a first load from an exported model
(torchtitan's ``initial_load_path`` pointing at safetensors), into the model's state
dict as the training job holds it (DTensor shards or plain tensors), under the keys of
the model's own ``state_dict()`` with ``key_map`` (model key -> file key, e.g. a
torchtitan ``to_hf`` rename) applied. The way out (``last_save_in_hf``) is the
streaming exporter of a committed checkpoint, ``libshard.export``.
"""
import os

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


def is_hf_export(path):
    """Whether path is safetensors: a .safetensors file, or a directory holding
    model.safetensors or a sharded index."""
    if os.path.isfile(path):
        return path.endswith(".safetensors")
    return os.path.isfile(os.path.join(path, MODEL_FILE)) or \
        os.path.isfile(os.path.join(path, MODEL_FILE + ".index.json"))


def load_model_hf(model_sd, path, *, key_map=None, process_group=None):
    """Loads every tensor of model_sd (DTensor shards or plain tensors, in place) from
    the safetensors at path (a directory of .safetensors files, as libshard.export or
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
