"""State-dict keys against the format's tensor and blob names.

Format 1.1 names may hold percent escapes (docs/FORMAT.md): every byte of a key's
UTF-8 outside ``[A-Za-z0-9._-]``, and a leading ``.``, becomes ``%`` and two uppercase
hex digits (the core's ck_key_encode). DCP's keys are dotted module paths and pass
unchanged, so the tools show them as they are. A key whose name would exceed 255 bytes
is refused with a message naming it.
"""
import re

from . import _ck

_PLAIN = re.compile(r"[A-Za-z0-9_-][A-Za-z0-9._-]{0,254}")


def encode(key: str) -> str:
    return key if _PLAIN.fullmatch(key) else _ck.key_encode(key)


def decode(name: str) -> str:
    return _ck.key_decode(name) if "%" in name else name
