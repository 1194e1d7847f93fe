"""ckpt-import-dcp: a directory written by DCP's FileSystemWriter, as a committed
libshard checkpoint.

    ckpt-import-dcp SRC ROOT NAME [--no-hash] [--json]

Only run it on checkpoints you trust: DCP's ``.metadata`` is a pickle and is read with
Python's unpickler, as ``torch.load(weights_only=False)`` would (the items themselves
are parsed without executing anything).

Every tensor item of a ``.distcp`` file is a complete, uncompressed ``torch.save`` zip:
its ``data.pkl`` gives the storage offset and strides, its ``data/0`` record holds the
raw bytes. The record's CRC-32 is checked (streamed), then the bytes are copied by the
core straight from the file range into the new checkpoint's data files (no item held
whole, hashed like any save), each item one box of a box-list tensor written by the
rank of its ``.distcp`` file. A strided item is made contiguous in memory first (one
item at a time). BYTE_IO items become blobs.

The source is checked before anything is written into ROOT (which is made when
missing, as the other tools make theirs): a directory holding a ``.metadata`` that is
DCP's Metadata, whose data files all exist inside it and hold every item's bytes.
Exit codes: 0 imported, 1 the source is bad (corrupt metadata, a missing, truncated or
corrupt file or item, named), 2 usage (SRC is no DCP checkpoint directory), I/O error,
or NAME exists.
"""
import argparse
import io
import json
import os
import pickle
import re
import sys
import zipfile
import zlib

from . import _ck, names

_CHUNK = 1 << 20
# torch's names of the format's dtypes (the core's table): the dtype globals a
# torch.save of one tensor may name.
_TORCH_DTYPES = frozenset(t for _c, _n, _s, t in _ck.dtypes())


class BadSource(Exception):
    """The DCP directory is corrupt or not what FileSystemWriter writes."""


class _Slice(io.RawIOBase):
    """A read-only, seekable window [off, off + length) of a file."""

    def __init__(self, f, off, length):
        self.f, self.off, self.length, self.pos = f, off, length, 0

    def readable(self):
        return True

    def seekable(self):
        return True

    def tell(self):
        return self.pos

    def seek(self, pos, whence=0):
        base = {0: 0, 1: self.pos, 2: self.length}[whence]
        self.pos = max(0, base + pos)
        return self.pos

    def readinto(self, b):
        n = max(0, min(len(b), self.length - self.pos))
        self.f.seek(self.off + self.pos)
        got = self.f.readinto(memoryview(b)[:n])
        self.pos += got
        return got


class _Rebuild:
    """What data.pkl says about its tensor, without building it."""

    def __init__(self, storage, storage_offset, size, stride, *rest):
        self.key, self.offset = storage, storage_offset
        self.size, self.stride = tuple(size), tuple(stride)


class _ItemPickle(pickle.Unpickler):
    # Only what torch.save writes for one plain tensor; anything else is refused, so
    # parsing an item runs no code from the file.
    def find_class(self, module, name):
        if (module, name) in (("torch._utils", "_rebuild_tensor_v2"),
                              ("torch._utils", "_rebuild_tensor_v3"),
                              ("torch._utils", "_rebuild_tensor")):
            return _Rebuild
        if module == "collections" and name == "OrderedDict":
            return dict
        if module in ("torch", "torch.storage") and name.endswith("Storage"):
            return name
        if module == "torch" and name in _TORCH_DTYPES:
            return name
        raise pickle.UnpicklingError(f"unexpected {module}.{name} in a tensor item")

    def persistent_load(self, pid):
        return pid[2]           # ('storage', storage type, key, location, numel)


def _tensor_record(f, path, md, what):
    """(offset in the file, nbytes, storage offset, size, stride) of a tensor item's
    raw bytes, and its CRC-32."""
    head = os.pread(f.fileno(), 4, md.offset)
    if head != b"PK\x03\x04":
        raise BadSource(f"{path}: item {what} at offset {md.offset} is not a torch.save zip")
    try:
        zf = zipfile.ZipFile(_Slice(f, md.offset, md.length))
        pkl = next(n for n in zf.namelist() if n.endswith("/data.pkl"))
        prefix = pkl[:-len("data.pkl")]
        reb = _ItemPickle(io.BytesIO(zf.read(pkl))).load()
        if not isinstance(reb, _Rebuild):
            raise BadSource(f"{path}: item {what} holds no tensor")
        info = zf.getinfo(f"{prefix}data/{reb.key}")
    except (zipfile.BadZipFile, StopIteration, KeyError, pickle.UnpicklingError,
            EOFError, ValueError) as e:
        raise BadSource(f"{path}: item {what} (offset {md.offset}, {md.length} bytes) is not "
                        f"a readable torch.save zip: {e}") from None
    if info.compress_type != zipfile.ZIP_STORED:
        raise BadSource(f"{path}: item {what} is compressed")
    local = os.pread(f.fileno(), 30, md.offset + info.header_offset)
    if len(local) != 30 or local[:4] != b"PK\x03\x04":
        raise BadSource(f"{path}: item {what}: bad local header of its data record")
    nlen = int.from_bytes(local[26:28], "little")
    xlen = int.from_bytes(local[28:30], "little")
    start = info.header_offset + 30 + nlen + xlen
    if start + info.file_size > md.length:
        raise BadSource(f"{path}: item {what}: its data record runs past the item")
    return md.offset + start, info.file_size, reb, info.CRC


def _check_crc(f, path, off, n, crc, what):
    got = 0
    done = 0
    while done < n:
        b = os.pread(f.fileno(), min(_CHUNK, n - done), off + done)
        if not b:
            raise BadSource(f"{path}: item {what} is truncated ({done} of {n} bytes)")
        got = zlib.crc32(b, got)
        done += len(b)
    if got != crc:
        raise BadSource(f"{path}: item {what}: CRC-32 of its {n} data bytes is {got:08x}, "
                        f"the zip records {crc:08x} (corrupt)")


def _check_object(path, fqn, data):
    """An object item is torch.save's zip of it: every record's CRC-32 must hold."""
    try:
        bad = zipfile.ZipFile(io.BytesIO(data)).testzip()
    except (zipfile.BadZipFile, EOFError, ValueError) as e:
        raise BadSource(f"{path}: object {fqn} is not a readable torch.save zip: {e}") from None
    if bad is not None:
        raise BadSource(f"{path}: object {fqn}: record {bad} fails its CRC-32 (corrupt)")


def _row_major(size):
    st, acc = [], 1
    for d in reversed(size):
        st.append(acc)
        acc *= d
    return tuple(reversed(st))


def _rank_of(rel):
    m = re.match(r"__(\d+)_\d+\.distcp$", os.path.basename(rel))
    if not m:
        raise BadSource(f"data file {rel} is not named __RANK_N.distcp")
    return int(m.group(1))


def _read_source(src_dir):
    """DCP's metadata of src_dir, once the directory is known to be a DCP checkpoint
    whose data files hold every item: nothing is written before. Raises OSError for
    what is no DCP checkpoint directory, BadSource for a bad one."""
    from torch.distributed.checkpoint.metadata import Metadata

    if not os.path.exists(src_dir):
        raise FileNotFoundError(f"{src_dir}: no such directory (a DCP checkpoint directory, "
                                f"with its .metadata, was expected)")
    if not os.path.isdir(src_dir):
        raise NotADirectoryError(f"{src_dir}: not a directory (a DCP checkpoint is a "
                                 f"directory holding .metadata and __R_N.distcp files)")
    mpath = os.path.join(src_dir, ".metadata")
    if not os.path.isfile(mpath):
        raise FileNotFoundError(f"{src_dir}: not a DCP checkpoint directory: it holds no "
                                f".metadata file")
    try:
        with open(mpath, "rb") as f:
            meta = pickle.load(f)       # trusted checkpoints only, as torch.load
    except OSError:
        raise
    except Exception as e:              # whatever a damaged pickle raises
        raise BadSource(f"{mpath}: not DCP metadata: {type(e).__name__}: {e}") from None
    if not isinstance(meta, Metadata) or not isinstance(meta.state_dict_metadata, dict):
        raise BadSource(f"{mpath}: holds a {type(meta).__name__}, not DCP's Metadata")
    sizes = {}
    for idx, info in (meta.storage_data or {}).items():
        rel = getattr(info, "relative_path", None)
        if not isinstance(rel, str) or os.path.isabs(rel) or \
                os.path.normpath(rel).split(os.sep)[0] in ("..", "."):
            raise BadSource(f"{mpath}: item {getattr(idx, 'fqn', idx)} names the data file "
                            f"{rel!r}, which is not a file of the directory")
        path = os.path.join(src_dir, rel)
        if rel not in sizes:
            if not os.path.isfile(path):
                raise BadSource(f"{path}: missing (item {idx.fqn} is in it)")
            sizes[rel] = os.path.getsize(path)
        if info.offset < 0 or info.length < 0 or info.offset + info.length > sizes[rel]:
            raise BadSource(f"{path}: truncated: {sizes[rel]} bytes, and item {idx.fqn} lies "
                            f"at {info.offset}+{info.length}")
    return meta


def import_dcp(src_dir, root, name, *, hash=True, step=None):
    """Imports src_dir into ROOT/NAME (ROOT made when missing); returns a summary dict.
    Raises BadSource for a corrupt source, OSError/libshard.CkptError otherwise; a
    source that is no DCP checkpoint or is damaged is refused before anything is
    written."""
    import torch
    from torch.distributed.checkpoint.metadata import (BytesStorageMetadata,
                                                       MetadataIndex, TensorStorageMetadata)
    from .torchio import dtype_code

    meta = _read_source(src_dir)
    mpath = os.path.join(src_dir, ".metadata")
    storage = meta.storage_data or {}
    entries = []                        # (disk name, fqn, md)
    world = 1
    for idx, info in storage.items():
        world = max(world, _rank_of(info.relative_path) + 1)
        if getattr(info, "transform_descriptors", None):
            raise BadSource(f"{mpath}: item {idx.fqn} uses storage transforms "
                            f"{info.transform_descriptors}, which the importer does not read")
    if step is None:
        m = re.search(r"(\d+)$", name)
        step = int(m.group(1)) if m else 0
    try:
        os.mkdir(root)
    except FileExistsError:
        pass
    files = {}
    keep = []
    summary = {"tensors": 0, "boxes": 0, "blobs": 0, "bytes": 0, "strided": 0}
    save = None
    try:
        declared = []
        for fqn in sorted(meta.state_dict_metadata):
            md = meta.state_dict_metadata[fqn]
            if not isinstance(md, TensorStorageMetadata):
                continue
            disk = names.encode(fqn)
            boxes, writers, infos = [], [], []
            for ch in md.chunks:
                idx = MetadataIndex(fqn, ch.offsets)
                info = storage.get(idx)
                if info is None:
                    raise BadSource(f"{mpath}: tensor {fqn}: no item for chunk at {tuple(ch.offsets)}")
                boxes.append((tuple(ch.offsets), tuple(ch.sizes)))
                writers.append(_rank_of(info.relative_path))
                infos.append(info)
            code = dtype_code(md.properties.dtype, f"tensor {fqn}")
            declared.append((disk, fqn, md, boxes, infos, code, writers))
        save = _ck.Save(root, name, step, _ck.Decl(world, [
            (disk, code, tuple(md.size), boxes, writers)
            for disk, _f, md, boxes, _i, code, writers in declared]), hash)
        for disk, fqn, md, boxes, infos, _c, _w in declared:
            dtype = md.properties.dtype
            isz = torch.empty((), dtype=dtype).element_size()
            for i, ((off, size), info) in enumerate(zip(boxes, infos)):
                path = os.path.join(src_dir, info.relative_path)
                f = files.get(path) or files.setdefault(path, open(path, "rb"))
                what = f"{fqn} {list(off)}+{list(size)}"
                foff, nbytes, reb, crc = _tensor_record(f, path, info, what)
                _check_crc(f, path, foff, nbytes, crc, what)
                numel = 1
                for d in size:
                    numel *= d
                if reb.size != tuple(size):
                    raise BadSource(f"{path}: item {what} holds a tensor of shape {reb.size}")
                if reb.stride == _row_major(size) or numel <= 1:
                    if (reb.offset + numel) * isz > nbytes:
                        raise BadSource(f"{path}: item {what}: its record holds {nbytes} bytes, "
                                        f"the tensor needs {(reb.offset + numel) * isz}")
                    save.box_from_file(disk, i, path, foff + reb.offset * isz)
                else:
                    raw = bytearray(os.pread(f.fileno(), nbytes, foff))
                    st = torch.frombuffer(raw, dtype=dtype) if raw else torch.empty(0, dtype=dtype)
                    t = st.as_strided(size, reb.stride, reb.offset).contiguous()
                    keep.append(t)
                    save.box(disk, i, t.data_ptr())
                    summary["strided"] += 1
                summary["boxes"] += 1
                summary["bytes"] += numel * isz
            summary["tensors"] += 1
        for fqn in sorted(meta.state_dict_metadata):
            if not isinstance(meta.state_dict_metadata[fqn], BytesStorageMetadata):
                continue
            info = storage.get(MetadataIndex(fqn))
            if info is None:
                raise BadSource(f"{mpath}: object {fqn} has no item")
            path = os.path.join(src_dir, info.relative_path)
            f = files.get(path) or files.setdefault(path, open(path, "rb"))
            data = os.pread(f.fileno(), info.length, info.offset)
            if len(data) != info.length:
                raise BadSource(f"{path}: object {fqn} is truncated")
            _check_object(path, fqn, data)
            save.blob(names.encode(fqn), data)
            summary["blobs"] += 1
        if meta.planner_data:
            from .reader import PLANNER_DATA_BLOB
            save.blob(PLANNER_DATA_BLOB, json.dumps(
                {k: list(v) for k, v in meta.planner_data.items()}).encode())
        stats = save.commit()
    except BaseException:
        if save is not None:
            save.abort()
        raise
    finally:
        for f in files.values():
            f.close()
    summary.update(name=name, root=root, world=world, seconds=stats["total_seconds"])
    return summary


def main(argv=None):
    ap = argparse.ArgumentParser(
        prog="ckpt-import-dcp",
        description="Import a directory written by torch.distributed.checkpoint's "
                    "FileSystemWriter as a committed checkpoint ROOT/NAME. Trusted "
                    "checkpoints only: DCP's .metadata is a pickle.",
        epilog="Exit codes: 0 imported, 1 the source is bad (corrupt metadata, a missing, "
               "truncated or corrupt file or item, named), 2 usage error (SRC is no DCP "
               "checkpoint directory), I/O error, or NAME already exists. ROOT is made "
               "when missing.")
    ap.add_argument("src", help="the DCP checkpoint directory (holds .metadata)")
    ap.add_argument("root", help="the checkpoint root to import into (made when missing)")
    ap.add_argument("name", help="the new checkpoint's name")
    ap.add_argument("--no-hash", action="store_true", help="skip SHA-256 block hashes")
    ap.add_argument("--step", type=int, help="step to record (default: NAME's trailing digits)")
    ap.add_argument("--json", action="store_true", help="print the summary as JSON")
    args = ap.parse_args(argv)
    try:
        s = import_dcp(args.src, args.root, args.name, hash=not args.no_hash, step=args.step)
    except BadSource as e:
        print(f"ckpt-import-dcp: {e}", file=sys.stderr)
        return 1
    except (OSError, ValueError) as e:
        print(f"ckpt-import-dcp: {e}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps(s))
    else:
        print(f"ckpt-import-dcp: committed {os.path.join(args.root, args.name)}: "
              f"{s['tensors']} tensors in {s['boxes']} boxes ({s['strided']} strided), "
              f"{s['blobs']} blobs, {s['bytes']} bytes from {s['world']} ranks, "
              f"{s['seconds']:.3f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
