"""The format's dtype table as torchio reads it from the extension (_ck.dtypes()):
codes 1..N with no hole; every dtype of the table has its torch dtype, named as the
table says and of the same element size, and round-trips code -> torch dtype -> code;
a torch dtype the format lacks (complex32, which torchio once listed; quint8) is
refused, naming the dtype and the tensor. (test_dcp_dtypes_and_names saves and loads a
tensor of each through DCP.)"""
import torch

import common
from libshard import _ck
from libshard.torchio import dtype_code, torch_dtype


def main():
    rows = _ck.dtypes()
    codes = [code for code, *_ in rows]
    assert codes == list(range(1, len(rows) + 1)), codes
    assert len({name for _c, name, *_ in rows}) == len(rows), rows
    for code, name, size, tname in rows:
        t = torch_dtype(code, name)
        assert t is getattr(torch, tname), (name, t, tname)
        assert t.itemsize == size, (name, t.itemsize, size)
        assert dtype_code(t, name) == code, (name, dtype_code(t, name), code)
        assert _ck.dtype_name(code) == name, (code, _ck.dtype_name(code), name)
    for lacking in (torch.complex32, torch.quint8):
        try:
            dtype_code(lacking, "tensor x")
        except ValueError as e:
            assert str(lacking) in str(e) and "tensor x" in str(e), e
        else:
            raise AssertionError(f"{lacking} was given a format code")
    try:
        torch_dtype(len(rows) + 1, "tensor y")
    except ValueError as e:
        assert "tensor y" in str(e) and str(len(rows) + 1) in str(e), e
    else:
        raise AssertionError("a code past the table was given a torch dtype")
    print(f"{len(rows)} dtypes round-trip through their torch names")


if __name__ == "__main__":
    common.main(main)
