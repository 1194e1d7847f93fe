"""The core's conversion between dtypes (_ck.dtype_convert, the one a load into another
dtype uses) gives torch's own Tensor.to() for every pair of dtypes of the table and
every value torch defines the result of: specials (signed zeros, infinities, NaN,
subnormals, the f8 formats' overflow edges, integer limits) and random values at every
scale. Where torch leaves the result undefined or wraps (NaN, infinity or a value out
of range into an integer) and complex into a real dtype (torch drops the imaginary
part), the core refuses, naming the element; it never returns other bits."""
import math
import random

import torch

import common
from libshard import _ck, CkptError
from libshard.torchio import torch_dtype

FLOAT_SPECIALS = [0.0, -0.0, 1.0, -1.0, 0.5, -2.5, 3.75, 100.25, -1000.5, 127.5, -128.7,
                  255.9, 256.0, 448.0, 460.0, 479.0, 480.0, 500.0, 57344.0, 61440.0,
                  65504.0, 65519.0, 65520.0, 70000.0, 1e-3, 1e-8, 6e-8, 1e-40, 3.0e38,
                  2.0 ** 31, -2.0 ** 31, 2.0 ** 32, 2.0 ** 63, -2.0 ** 63, 2.0 ** 64, 1e300,
                  float("inf"), float("-inf"), float("nan")]
INT_SPECIALS = [0, 1, -1, 7, 127, -128, 128, 255, 256, -129, 32767, -32768, 65535, 65536,
                2 ** 24 + 1, 2 ** 31 - 1, -2 ** 31, 2 ** 32 - 1, 2 ** 53 + 1, 2 ** 62,
                -2 ** 63, 2 ** 63 - 1, 2 ** 64 - 1]


def info(dt):
    return torch.finfo(dt) if dt.is_floating_point else None


def source_values(dt, rng):
    """Values held exactly by dt, as a tensor of dt."""
    if dt == torch.bool:
        return torch.tensor([True, False, True], dtype=dt)
    if dt.is_complex:
        vals = [complex(rng.gauss(0, 10), rng.gauss(0, 10)) for _ in range(20)]
        vals += [0j, complex(1.5, -2.25), complex(float("inf"), 1)]
        return torch.tensor(vals, dtype=dt)
    if dt.is_floating_point:
        vals = list(FLOAT_SPECIALS)
        for scale in (1e-6, 1e-2, 1, 30, 1e3, 1e5, 1e9, 1e20):
            vals += [rng.gauss(0, scale) for _ in range(12)]
        # Made in f64 and rounded into dt by torch: only the rounded values matter.
        return torch.tensor(vals, dtype=torch.float64).to(dt)
    ii = torch.iinfo(dt)
    vals = [v for v in INT_SPECIALS if ii.min <= v <= ii.max]
    vals += [rng.randint(ii.min, ii.max) for _ in range(40)]
    if dt == torch.uint64:   # torch makes no uint64 tensor of values past int64's
        return torch.tensor([v - 2 ** 64 if v >= 2 ** 63 else v for v in vals],
                            dtype=torch.int64).view(torch.uint64)
    return torch.tensor(vals, dtype=dt)


def as_python(t):
    """Exact Python values of a 1-D tensor (uint64 read through int64's bits)."""
    if t.dtype == torch.uint64:
        return [v + 2 ** 64 if v < 0 else v for v in t.view(torch.int64).tolist()]
    if t.dtype in (torch.uint16, torch.uint32):
        return t.to(torch.int64).tolist()
    if t.dtype.is_floating_point and t.dtype.itemsize == 1:
        return t.to(torch.float32).tolist()
    return t.tolist()


def fits(value, dt):
    """Whether torch defines value.to(dt): an integer type must hold the value
    truncated toward zero."""
    if dt == torch.bool or dt.is_floating_point or dt.is_complex:
        return True
    if isinstance(value, float):
        if not math.isfinite(value):
            return False
        value = math.trunc(value)
    ii = torch.iinfo(dt)
    return ii.min <= value <= ii.max


def same(a, b):
    """Element equality that holds NaN equal to NaN (its bits may differ) and tells
    -0.0 from 0.0."""
    if isinstance(a, complex):
        return same(a.real, b.real) and same(a.imag, b.imag)
    if isinstance(a, float) and math.isnan(a):
        return isinstance(b, float) and math.isnan(b)
    if isinstance(a, float) and a == 0 and b == 0:
        return math.copysign(1, a) == math.copysign(1, b)
    return a == b


def main():
    rng = random.Random(7)
    rows = _ck.dtypes()
    pairs = converted = refused = 0
    for fcode, fname, _fs, _ft in rows:
        fdt = torch_dtype(fcode, fname)
        src = source_values(fdt, rng)
        svals = as_python(src)
        for tcode, tname, _ts, _tt in rows:
            tdt = torch_dtype(tcode, tname)
            pairs += 1
            if fdt.is_complex and not tdt.is_complex:
                try:
                    _ck.dtype_convert(src.numpy().tobytes(), fcode, tcode)
                except CkptError as e:
                    assert "imaginary" in str(e) and fname in str(e) and tname in str(e), e
                    refused += 1
                    continue
                raise AssertionError(f"{fname} -> {tname} was not refused")
            for i in range(len(src)):
                one = src[i:i + 1]
                raw = one.view(torch.uint8).numpy().tobytes()
                if not fits(svals[i], tdt):
                    try:
                        _ck.dtype_convert(raw, fcode, tcode)
                    except CkptError as e:
                        assert tname in str(e) and "element 0" in str(e), e
                        refused += 1
                        continue
                    raise AssertionError(f"{fname} {svals[i]!r} -> {tname}: not refused")
                ours = _ck.dtype_convert(raw, fcode, tcode)
                got = as_python(torch.frombuffer(bytearray(ours), dtype=tdt))[0]
                want = as_python(one.to(tdt))[0]
                assert same(want, got), \
                    f"{fname} {svals[i]!r} -> {tname}: torch {want!r}, ours {got!r}"
                converted += 1
            # A whole buffer converts in one call, as a load does, through the same
            # rules (the everyday pairs take the vectorized loops).
            ok = [i for i in range(len(src)) if fits(svals[i], tdt)]
            part = src[ok]
            ours = _ck.dtype_convert(part.view(torch.uint8).numpy().tobytes(), fcode, tcode)
            got = as_python(torch.frombuffer(bytearray(ours), dtype=tdt)) if ours else []
            want = as_python(part.to(tdt))
            assert len(got) == len(want) and all(same(w, g) for w, g in zip(want, got)), \
                f"{fname} -> {tname}: buffer differs from torch"
    assert pairs == len(rows) ** 2
    print(f"{pairs} dtype pairs: {converted} values equal to torch's .to(), "
          f"{refused} refused where torch leaves the result undefined")


if __name__ == "__main__":
    common.main(main)
