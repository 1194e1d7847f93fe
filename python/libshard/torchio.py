"""torch dtypes and tensors against the format's dtype codes (docs/FORMAT.md).

Tensor bytes cross into the C core by address (``data_ptr``, ``nbytes``) of a
contiguous CPU tensor that the caller keeps alive for the call: no Python-level copy.
"""
import torch

from . import _ck

# The format's codes (libshard/include/ck/types.h); never renumbered.
_BY_NAME = {
    "f32": torch.float32, "bf16": torch.bfloat16, "f16": torch.float16,
    "f64": torch.float64, "i64": torch.int64, "i32": torch.int32, "i16": torch.int16,
    "i8": torch.int8, "u8": torch.uint8, "bool": torch.bool,
    "f8e4m3": torch.float8_e4m3fn, "f8e5m2": torch.float8_e5m2,
    "c64": torch.complex64, "c128": torch.complex128, "c32": torch.complex32,
    "u16": torch.uint16, "u32": torch.uint32, "u64": torch.uint64,
}

_TORCH_OF_CODE = {}
_CODE_OF_TORCH = {}
for _code in range(1, 64):
    _name = _ck.dtype_name(_code)
    if _name in _BY_NAME:
        _TORCH_OF_CODE[_code] = _BY_NAME[_name]
        _CODE_OF_TORCH[_BY_NAME[_name]] = _code


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
