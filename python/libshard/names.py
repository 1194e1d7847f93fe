"""State-dict keys against the format's tensor and blob names.

Format 1.1 names may hold percent escapes (docs/FORMAT.md): every byte of a key's
UTF-8 outside ``[A-Za-z0-9._-]``, and a leading ``.``, becomes ``%`` and two uppercase
hex digits (the core's ck_key_encode). DCP's keys are dotted module paths and pass
unchanged, so the tools show them as they are. A key whose name would exceed 255 bytes
is refused with a message naming it.

The writer keeps blobs of its own beside the state dict's (RESERVED_PREFIX, e.g. DCP's
planner data): a key that would begin with that prefix on disk has the prefix's '-'
escaped ("dcp%2Dx.planner_data"), which decodes to the same key, so no key can ever
name a reserved blob (decision 0149).
"""
import re

from . import _ck

_PLAIN = re.compile(r"[A-Za-z0-9_-][A-Za-z0-9._-]{0,254}")
RESERVED_PREFIX = "dcp-x."
_ESCAPED_PREFIX = "dcp%2Dx."


def encode(key: str) -> str:
    name = key if _PLAIN.fullmatch(key) else _ck.key_encode(key)
    if name.startswith(RESERVED_PREFIX):
        name = _ESCAPED_PREFIX + name[len(RESERVED_PREFIX):]
        if len(name) > 255:
            raise ValueError(f"state-dict key '{key[:200]}' cannot be a name on disk: "
                             "escaped, it exceeds 255 bytes")
    return name


def decode(name: str) -> str:
    return _ck.key_decode(name) if "%" in name else name
