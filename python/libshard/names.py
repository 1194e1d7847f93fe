"""Reversible encoding of state-dict keys into the format's names.

Names on disk are 1 to 255 bytes of ``[A-Za-z0-9._-]`` that do not start with ``.``
(docs/FORMAT.md). DCP's keys are dotted module paths (``layers.0.attn.wq.weight``,
``optim.state.layers.0.w.exp_avg``) and pass unchanged; any other byte of the key's
UTF-8, ``-`` itself and a leading ``.`` become ``-`` and two lowercase hex digits.
So the keys of ordinary models are their names on disk (the tools show them as they
are), and every key maps to exactly one name and back.

A name that this encoding did not produce (a checkpoint of the C trainer whose name
holds a ``-``) decodes to itself: decoding accepts only names that re-encode to
themselves.
"""

_PLAIN = frozenset(b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789._")
_HEX = "0123456789abcdef"
NAME_MAX = 255


def encode(key: str) -> str:
    """The on-disk name of a state-dict key; ValueError when it is too long."""
    out = []
    for i, b in enumerate(key.encode("utf-8")):
        if b in _PLAIN and not (i == 0 and b == 0x2E):
            out.append(chr(b))
        else:
            out.append("-" + _HEX[b >> 4] + _HEX[b & 15])
    name = "".join(out)
    if not name or len(name) > NAME_MAX:
        raise ValueError(
            f"state-dict key {key!r} encodes to a name of {len(name)} bytes; "
            f"the format allows 1 to {NAME_MAX}")
    return name


def decode(name: str) -> str:
    """The state-dict key of an on-disk name (the name itself when it is not one this
    encoding produced)."""
    if "-" not in name:
        return name
    raw = bytearray()
    i = 0
    while i < len(name):
        c = name[i]
        if c == "-":
            h = name[i + 1:i + 3]
            if len(h) != 2 or any(x not in _HEX for x in h):
                return name
            raw.append(int(h, 16))
            i += 3
        else:
            raw.append(ord(c))
            i += 1
    try:
        key = raw.decode("utf-8")
    except UnicodeDecodeError:
        return name
    return key if encode(key) == name else name
