"""CkptReader: a torch.distributed.checkpoint StorageReader over a libshard checkpoint.

read_metadata builds DCP's Metadata from the manifest: every tensor (whatever it was
saved with: mesh placements, DCP's box lists, the C trainer, ckpt-synth) is one
TensorStorageMetadata whose single chunk is the whole tensor, and every blob is a
BytesStorageMetadata. DCP's planner then asks, per local shard of the loading rank,
for one box of the full tensor, and read_data reads all of the rank's boxes with the
core's reader (ck/load.h) as one batch: it intersects each box with the saved shards
and reads the needed byte ranges with io_uring at queue depth, straight into the
destination tensors on the CPU, and through page-locked buffers with the copies to the
GPU overlapped with the next reads. Loading onto any mesh and world size is therefore
the core's resharding.

What comes back is what was saved: the core checks the SHA-256 of every block it reads
(verify=False skips it, for raw speed, trusting the storage), and a destination of
another dtype than the saved tensor gets the values converted (torch's Tensor.to(), as
DCP's FileSystemReader casts), never the bits reinterpreted; a conversion torch leaves
undefined (complex into real, NaN or out of range into an integer) fails naming the
tensor.

Through ckptd (socket, else $CKPTD_SOCKET, a daemon of this root) the checkpoint is
opened from the copies its tiers hold nearest this node (a node's local tier, a peer's
replica, the durable root), and read_data first has the daemon bring the data files the
rank's boxes touch to this node (ck/client.h, ck_client_restore_*). name=None then asks
the daemon (RESOLVE) for the newest checkpoint its tiers can assemble whole, which may
be newer than any in the root itself.
"""
import dataclasses
import errno
import io
import json
import logging
import os

import torch
from torch.distributed.checkpoint.metadata import (
    BytesStorageMetadata, ChunkStorageMetadata, Metadata, StorageMeta,
    TensorProperties, TensorStorageMetadata)
from torch.distributed.checkpoint.planner import LoadItemType
from torch.distributed.checkpoint.storage import StorageReader
from torch.futures import Future

from . import _ck, committed, engine, names, newest
from .torchio import addr, dtype_code, torch_dtype

# Blobs the writer keeps for itself (not state-dict entries): names.encode never gives
# a key a name that begins with names.RESERVED_PREFIX, so no key can collide.
PLANNER_DATA_BLOB = names.RESERVED_PREFIX + "planner_data"
RESERVED_BLOBS = frozenset({PLANNER_DATA_BLOB})
log = logging.getLogger("libshard")


def split_checkpoint_id(checkpoint_id):
    """(root, name) of a checkpoint id: ROOT/NAME, or a root alone (name None: the
    newest committed checkpoint)."""
    path = os.fspath(checkpoint_id).rstrip("/") or "/"
    kind = _ck.path_kind(path)
    if kind == "checkpoint":
        return os.path.dirname(path) or ".", os.path.basename(path)
    if kind == "root":
        return path, None
    return os.path.dirname(path) or ".", os.path.basename(path)


def _run_prefix(name):
    """PREFIX of a step name PREFIX<digits>, or None."""
    stem = name.rstrip("0123456789")
    return stem if stem != name else None


def newest_through(client, root, prefixes=("step-",)):
    """The newest checkpoint that ckptd's tiers (this node's local tier, its peers', the
    durable root) can assemble whole, by RESOLVE: among the runs' step names PREFIX<digits>
    for each of prefixes and each prefix of a step name committed in root, the highest
    step; the root's own newest (any name, newest() of the package) when its step is
    higher still. None when neither has one. Why a newer step could not be taken (a
    part with no live copy) is logged."""
    runs = set(prefixes)
    try:
        cks = committed(root)
    except _ck.CkptError:              # no root yet: the tiers may still hold steps
        cks = []
    runs |= {p for _s, _t, n in cks if (p := _run_prefix(n)) is not None}
    best = failed = None
    for prefix in sorted(runs):
        try:
            name, why = client.resolve(prefix, True)
        except _ck.CkptError as e:
            # ENOENT: the tiers hold no step of this run; ENODATA: none of its steps
            # has a live copy of every file (said if no other run has one either).
            if e.errno in (errno.ENOENT, errno.ENODATA):
                failed = failed if e.errno == errno.ENOENT else e
                continue
            raise
        step = int(name[len(prefix):])
        if best is None or step > best[0]:
            best = (step, name, why)
    if cks and (best is None or cks[-1][0] > best[0]):
        return cks[-1][2]
    if best is None and failed is not None:
        raise failed
    if best is None:
        return None
    if best[2]:
        log.warning("libshard: %s", best[2])
    return best[1]


class CkptReader(StorageReader):
    """``dcp.load(sd, storage_reader=CkptReader("/ckpt", "step-100"))``.

    name=None loads the newest committed checkpoint of root (through ckptd: the newest
    its tiers can assemble whole, see newest_through); every rank must resolve the same
    one (checked in prepare_global_plan: a commit between two ranks' look-ups fails the
    load with a message rather than mixing checkpoints).

    verify=False reads without checking the blocks' SHA-256 against the manifest: for
    raw speed, trusting the storage."""

    def __init__(self, root=None, name=None, *, batch_bytes=256 << 20, verify=True,
                 socket=None):
        super().__init__()
        self.root = os.fspath(root) if root is not None else None
        self.name = name
        self.batch_bytes = batch_bytes
        self.verify = verify
        self.socket = socket
        self._client = None
        self._ck = None
        self._opened = None
        self.loaded_step = None
        self.load_id = None

    def reset(self, checkpoint_id=None):
        if checkpoint_id is not None:
            self.root, self.name = split_checkpoint_id(checkpoint_id)
        self._close()

    @classmethod
    def validate_checkpoint_id(cls, checkpoint_id):
        root, name = split_checkpoint_id(checkpoint_id)
        if name is None:
            return True
        try:
            return _ck.name_state(root, name)[0] == "committed"
        except _ck.CkptError:          # no checkpoint name, or no root there
            return False

    def _close(self):
        if self._ck is not None:
            self._ck.close()
        if self._client is not None:
            self._client.close()
        self._ck = None
        self._client = None
        self._opened = None

    def _open(self):
        if self._ck is not None:
            return self._ck
        if self.root is None:
            raise ValueError("CkptReader: no checkpoint root (give root or checkpoint_id)")
        sock = engine.socket_of(self.socket)
        try:
            self._client = _ck.Client(self.root, sock) if sock else None
        except _ck.CkptError as e:
            if e.errno != errno.EXDEV:     # a daemon of another root: not this reader's
                raise
        name = self.name
        if name is None:
            name = newest_through(self._client, self.root) if self._client is not None \
                else newest(self.root)
        if name is None:
            raise FileNotFoundError(f"{self.root}: no committed checkpoint to load")
        self._ck = _ck.Checkpoint(self.root, name, verify=self.verify, client=self._client)
        self._opened = name
        self.loaded_step = self._ck.info()["step"]
        return self._ck

    def read_metadata(self, *args, **kwargs):
        ck = self._open()
        sd_md = {}
        for name, code, shape, _n in ck.tensors():
            key = names.decode(name)
            size = torch.Size(shape)
            props = TensorProperties(dtype=torch_dtype(code, f"tensor {name}"))
            chunk = ChunkStorageMetadata(offsets=torch.Size([0] * len(shape)), sizes=size)
            sd_md[key] = TensorStorageMetadata(properties=props, size=size, chunks=[chunk])
        planner_data = None
        for name in ck.blob_names():
            if name in RESERVED_BLOBS:
                continue
            sd_md[names.decode(name)] = BytesStorageMetadata()
        if PLANNER_DATA_BLOB in ck.blob_names():
            planner_data = {k: tuple(v) for k, v in
                            json.loads(ck.blob(PLANNER_DATA_BLOB)).items()}
        meta = Metadata(state_dict_metadata=sd_md, planner_data=planner_data,
                        storage_meta=StorageMeta(
                            checkpoint_id=os.path.join(self.root, self._opened),
                            load_id=self.load_id))
        return meta

    def set_up_storage_reader(self, metadata, is_coordinator, *args, **kwargs):
        self._open()

    def prepare_local_plan(self, plan):
        return dataclasses.replace(plan, storage_data=self._opened)

    def prepare_global_plan(self, plans):
        seen = {p.storage_data for p in plans}
        if len(seen) > 1:
            raise RuntimeError(
                f"CkptReader: ranks resolved different checkpoints {sorted(seen)} under "
                f"{self.root} (one was committed while they looked); name one explicitly")
        return plans

    def read_data(self, plan, planner):
        """Every box this rank asked for, as batches of the core's reader (ck_load_many:
        queue depth, O_DIRECT). Contiguous CPU targets are read in place, in one batch.
        The others (CUDA tensors, non-contiguous ones) are read into a host buffer
        (page-locked for CUDA) in batches of at most batch_bytes, and copied from there
        on a side stream while the next batch is read: two buffers take turns."""
        ck = self._open()
        in_place, through = [], []
        for req in plan.items:
            key = req.storage_index.fqn
            name = names.encode(key)
            if req.type == LoadItemType.BYTE_IO:
                planner.load_bytes(req, io.BytesIO(ck.blob(name)))
                continue
            base = req.storage_index.offset or torch.Size([0] * len(req.lengths))
            offsets = tuple(int(b) + int(o) for b, o in zip(base, req.storage_offsets))
            lengths = tuple(int(x) for x in req.lengths)
            target = planner.resolve_tensor(req).detach()
            if tuple(target.shape) != lengths:
                raise RuntimeError(f"tensor {key}: the planner's target has shape "
                                   f"{tuple(target.shape)}, the request {lengths}")
            if target.device.type == "cpu" and target.is_contiguous():
                in_place.append((req, name, offsets, lengths, target))
            else:
                through.append((req, name, offsets, lengths, target))
        if self._client is not None:        # the files of these boxes, near this node
            ck.fetch([(it[1], it[2], it[3]) for it in in_place + through])
        ck.read_many([(n, o, l, *addr(t), _code(t, n)) for _r, n, o, l, t in in_place])
        for req, *_rest, target in in_place:
            planner.commit_tensor(req, target)
        if through:
            self._read_through(ck, through, planner)
        fut = Future()
        fut.set_result(None)
        return fut

    def _read_through(self, ck, items, planner):
        cuda = next((t.device for *_x, t in items if t.device.type == "cuda"), None)
        biggest = max(_aligned(t.numel() * t.element_size()) for *_x, t in items)
        size = max(min(self.batch_bytes, sum(_aligned(t.numel() * t.element_size())
                                             for *_x, t in items)), biggest)
        bufs = [torch.empty(size, dtype=torch.uint8, pin_memory=cuda is not None)
                for _ in range(2 if len(items) > 1 else 1)]
        side = torch.cuda.Stream(cuda) if cuda is not None else None
        if side is not None:
            side.wait_stream(torch.cuda.current_stream(cuda))  # targets' last writers
        done = [None] * len(bufs)      # each buffer's copies, as an event
        batch, used, turn = [], 0, 0

        def flush():
            nonlocal batch, used, turn
            buf = bufs[turn]
            if done[turn] is not None:
                done[turn].synchronize()   # the copies out of this buffer have landed
            views = []
            at = 0
            for _req, name, offsets, lengths, target in batch:
                n = target.numel() * target.element_size()
                views.append(buf[at:at + n].view(target.dtype).view(target.shape))
                at += _aligned(n)
            ck.read_many([(name, o, l, v.data_ptr(), v.numel() * v.element_size(),
                           _code(v, name)) for (_r, name, o, l, _t), v in zip(batch, views)])
            if side is not None:
                with torch.cuda.stream(side):
                    for (_r, _n, _o, _l, target), v in zip(batch, views):
                        target.copy_(v, non_blocking=target.device.type == "cuda")
                done[turn] = torch.cuda.Event()
                done[turn].record(side)
            else:
                for (_r, _n, _o, _l, target), v in zip(batch, views):
                    target.copy_(v)
            for req, *_rest, target in batch:
                planner.commit_tensor(req, target)
            batch, used, turn = [], 0, (turn + 1) % len(bufs)

        for it in items:
            n = _aligned(it[4].numel() * it[4].element_size())
            if batch and used + n > size:
                flush()
            batch.append(it)
            used += n
        if batch:
            flush()
        if side is not None:
            # The training stream may use the targets as soon as load returns.
            torch.cuda.current_stream(cuda).wait_stream(side)
            for ev in done:
                if ev is not None:
                    ev.synchronize()   # the buffers may be freed


def _code(t, name):
    """The format's code of t's dtype: the core converts the saved values into it."""
    return dtype_code(t.dtype, f"tensor {name}")


def _aligned(n, a=4096):
    """n rounded up to a, so that every box in a buffer starts O_DIRECT-aligned."""
    return -(-n // a) * a
