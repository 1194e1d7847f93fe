"""A checkpoint's model as Hugging Face safetensors, for ``from_pretrained``.

    from libshard.export import export_hf

    export_hf("/ckpt", "step-1000", "hf/", dtype="bf16")   # model.safetensors
    config.save_pretrained("hf/")                          # the export writes weights only
    model = AutoModelForCausalLM.from_pretrained("hf/")

A DCP state dict saved from a training loop holds the optimizer's state beside the
model, under DCP's keys (``app.model.transformer.h.0...`` or ``model.…``); a model-only
export keeps the model's tensors and cuts that prefix off, so that the keys are the
model's own ``state_dict()`` keys. The export is the C library's streaming
consolidation (``ckpt-consolidate --model-only``): every tensor whole, whatever mesh
saved it, with bounded memory, files named only once complete.
"""
import json
import os

from . import _ck, newest


def _dtype_name(dtype):
    if dtype is None or isinstance(dtype, str):
        return dtype
    return str(dtype).rpartition(".")[2]     # torch.bfloat16 -> "bfloat16"


def export_hf(root, name, out_dir, *, prefix=None, key_map=None, dtype=None,
              max_shard_size=None):
    """Writes the model of checkpoint ``root/name`` (name None: the newest committed)
    into out_dir: ``model.safetensors``, or above max_shard_size
    ``model-0000i-of-0000N.safetensors`` and ``model.safetensors.index.json``.

    prefix: where the model lies in the state dict; None finds it (``app.model.`` or
    ``model.``, whichever the checkpoint has), ``""`` takes every tensor.
    key_map: renames the keys (after the prefix is cut): a dict of rules
    ``{"FROM": "TO" or None}`` (one ``*`` in FROM matches any text, which a ``*`` in TO
    repeats; None leaves the tensor out; exact keys win, then the first matching
    pattern; other keys stay), or a callable key -> new key or None.
    dtype: None keeps each tensor's; a float dtype (``torch.bfloat16``, ``"bf16"``,
    ``"float32"``...) converts every float tensor as ``Tensor.to()`` does.
    max_shard_size: bytes, or a string such as ``"2GB"`` (default 5GB).

    Returns {dir, tensors, files, bytes, sharded, seconds, prefix}. Raises
    libshard.CkptError naming the checkpoint, tensor or file."""
    root, out_dir = os.fspath(root), os.fspath(out_dir)
    if name is None:
        name = newest(root)
        if name is None:
            raise _ck.CkptError(2, f"{root}: no committed checkpoint to export")
    kw = {}
    if callable(key_map):
        kw["rename"] = key_map
    elif key_map is not None:
        kw["key_map"] = json.dumps(dict(key_map))
    return _ck.export_hf(root, name, out_dir, prefix=prefix, dtype=_dtype_name(dtype),
                         max_shard_size=max_shard_size, **kw)
