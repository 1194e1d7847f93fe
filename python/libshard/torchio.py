"""torch dtypes and tensors against the format's dtype codes (docs/FORMAT.md).

Tensor bytes cross into the C core by address (``data_ptr``, ``nbytes``) of a
contiguous CPU tensor that the caller keeps alive for the call: no Python-level copy.
"""
import torch

from . import _ck

# The format's dtype table (the core's, through the extension): a dtype this torch
# lacks, or whose element size disagrees, is left out, so that it fails by name.
_TORCH_OF_CODE = {}
for _code, _name, _size, _torch in _ck.dtypes():
    _t = getattr(torch, _torch, None)
    if isinstance(_t, torch.dtype) and _t.itemsize == _size:
        _TORCH_OF_CODE[_code] = _t
_CODE_OF_TORCH = {t: code for code, t in _TORCH_OF_CODE.items()}


def torch_dtype(code: int, what: str) -> torch.dtype:
    try:
        return _TORCH_OF_CODE[code]
    except KeyError:
        raise ValueError(f"{what}: dtype code {code} ({_ck.dtype_name(code)}) has no "
                         "torch dtype here") from None


def dtype_code(dtype: torch.dtype, what: str) -> int:
    try:
        return _CODE_OF_TORCH[dtype]
    except KeyError:
        raise ValueError(f"{what}: dtype {dtype} is not in the checkpoint format "
                         f"(supported: {sorted(str(d) for d in _CODE_OF_TORCH)})") from None


def addr(t: torch.Tensor):
    """(address, nbytes) of a contiguous CPU tensor's bytes."""
    if t.device.type != "cpu" or not t.is_contiguous():
        raise ValueError("expected a contiguous CPU tensor")
    return t.data_ptr(), t.numel() * t.element_size()
