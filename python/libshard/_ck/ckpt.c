/* ckpt.c - libshard._ck.Checkpoint: a committed checkpoint opened for reading.
 *
 * Wraps ck_open (ck/ckpt.h) and the box reader (ck/load.h): reads check every block's
 * hash unless the object was made with verify=False, and write the dtype the caller
 * names (by code; 0: the tensor's own), converting values. Given a Client of ckptd, it
 * opens the copies the daemon's tiers hold nearest this node (ck_client_restore_open),
 * and fetch() brings the files of a load there (ck_client_restore_fetch). The core's
 * handles serve
 * one thread at a time, and reads run without the GIL, so each object serializes its
 * calls with a lock of its own. The reader of the last tensor read is kept: DCP asks
 * for the boxes of one tensor after another. The handle's hash threads stay in the
 * process that opened it: a forked child refuses to use it and drops it unclosed, as
 * it does a Client (docs/decisions/0135).
 */
#include "ckpy.h"

#include <pythread.h>
#include <stdlib.h>
#include <unistd.h>

#include "ck/load.h"

typedef struct {
    PyObject_HEAD
    ck_ckpt *ck;
    ck_reader *rd;              /* of tensor rd_name into rd_as, or NULL */
    char rd_name[CK_NAME_MAX];
    int rd_as;
    pid_t pid;                  /* the process that opened ck (its hash threads) */
    PyThread_type_lock lock;
    bool verify;
    PyObject *client;           /* the Client it was opened through, or NULL */
} ckpt_obj;

static int ckpt_init(ckpt_obj *self, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"root", "name", "verify", "client", NULL};
    const char *root, *name;
    int verify = 1;
    PyObject *client = Py_None;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "ss|pO", kwlist, &root, &name, &verify,
                                     &client))
        return -1;
    ck_client *cl = client == Py_None ? NULL : ckpy_client_of(client);
    if (client != Py_None && !cl)
        return -1;
    if (self->ck) {
        PyErr_SetString(PyExc_RuntimeError, "Checkpoint is already open");
        return -1;
    }
    if (!self->lock && !(self->lock = PyThread_allocate_lock())) {
        PyErr_NoMemory();
        return -1;
    }
    ck_err err = {0};
    int rc;
    Py_BEGIN_ALLOW_THREADS
    rc = cl ? ck_client_restore_open(cl, name, &self->ck, &err)
            : ck_open(root, name, &self->ck, &err);
    Py_END_ALLOW_THREADS
    if (rc < 0) {
        ckpy_raise(rc, &err);
        return -1;
    }
    self->verify = verify;
    ck_load_verify(self->ck, verify);
    self->pid = getpid();
    if (cl) {
        Py_INCREF(client);
        self->client = client;
    }
    return 0;
}

static void ckpt_release(ckpt_obj *self)
{
    if (self->pid == getpid()) {
        ck_reader_close(self->rd);
        ck_close(self->ck);
    }
    self->rd = NULL;
    self->ck = NULL;
}

static void ckpt_dealloc(ckpt_obj *self)
{
    ckpt_release(self);
    Py_CLEAR(self->client);
    if (self->lock)
        PyThread_free_lock(self->lock);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static int ckpt_open_check(ckpt_obj *self)
{
    if (self->ck && self->pid == getpid())
        return 0;
    PyErr_SetString(PyExc_ValueError, self->ck ? "the Checkpoint was opened by a parent "
                    "process (this one was forked from it): open it again here"
                    : "Checkpoint is closed");
    return -1;
}

static PyObject *ckpt_close(ckpt_obj *self, PyObject *unused)
{
    PyThread_acquire_lock(self->lock, WAIT_LOCK);
    ckpt_release(self);
    PyThread_release_lock(self->lock);
    Py_RETURN_NONE;
}

static PyObject *mesh_tuple(const ck_mesh *m)
{
    uint64_t v[CK_MAX_MESH_DIMS];
    for (int i = 0; i < m->ndim; i++)
        v[i] = m->size[i];
    return ckpy_tuple_u64(v, m->ndim);
}

static PyObject *ckpt_info(ckpt_obj *self, PyObject *unused)
{
    if (ckpt_open_check(self) < 0)
        return NULL;
    const ck_info *in = ck_get_info(self->ck);
    PyObject *mesh = mesh_tuple(&in->mesh);
    if (!mesh)
        return NULL;
    return Py_BuildValue(
        "{s:s,s:(HH),s:K,s:K,s:N,s:I,s:O,s:K,s:K,s:I,s:I,s:K,s:K,s:s}",
        "name", in->name, "version", in->major, in->minor,
        "step", (unsigned long long)in->step, "time_ns", (unsigned long long)in->time_ns,
        "mesh", mesh, "block_size", in->block_size, "hashed", in->hashed ? Py_True : Py_False,
        "n_tensors", (unsigned long long)in->n_tensors,
        "n_shards", (unsigned long long)in->n_shards, "n_files", in->n_files,
        "n_blobs", in->n_blobs, "data_bytes", (unsigned long long)in->data_bytes,
        "tensor_bytes", (unsigned long long)in->tensor_bytes, "dir", ck_dir(self->ck));
}

static int tensor_item(const ck_tensor *t, void *arg)
{
    PyObject *list = arg;
    PyObject *shape = ckpy_tuple_u64(t->shape, t->ndim);
    if (!shape)
        return -ENOMEM;
    PyObject *item = Py_BuildValue("(siNI)", t->name, (int)t->dtype, shape, t->n_shards);
    if (!item)
        return -ENOMEM;
    int rc = PyList_Append(list, item);
    Py_DECREF(item);
    return rc < 0 ? -ENOMEM : 0;
}

/* A list filled by one of the core's walks (tensors, blobs); a callback that fails
 * leaves its Python exception set and stops the walk. */
static PyObject *collect(ckpt_obj *self, int (*walk)(ck_ckpt *, PyObject *, ck_err *))
{
    if (ckpt_open_check(self) < 0)
        return NULL;
    PyObject *list = PyList_New(0);
    if (!list)
        return NULL;
    ck_err err = {0};
    int rc = walk(self->ck, list, &err);
    if (rc < 0) {
        Py_DECREF(list);
        return PyErr_Occurred() ? NULL : ckpy_raise(rc, &err);
    }
    return list;
}

static int walk_tensors(ck_ckpt *ck, PyObject *list, ck_err *err)
{
    return ck_tensors_each(ck, tensor_item, list, err);
}

/* [(name, dtype code, shape, n_shards)] in name order. */
static PyObject *ckpt_tensors(ckpt_obj *self, PyObject *unused)
{
    return collect(self, walk_tensors);
}

/* [(offsets, lengths)] of a tensor's saved boxes, in shard order. */
static PyObject *ckpt_boxes(ckpt_obj *self, PyObject *args)
{
    const char *name;
    if (!PyArg_ParseTuple(args, "s", &name) || ckpt_open_check(self) < 0)
        return NULL;
    ck_err err = {0};
    ck_tensor t;
    ck_shard *sh = NULL;
    uint32_t n = 0;
    int rc;
    Py_BEGIN_ALLOW_THREADS
    PyThread_acquire_lock(self->lock, WAIT_LOCK);
    rc = self->ck ? ck_tensor_get(self->ck, name, &t, &err)
                  : ck_err_set(&err, -EBADF, "checkpoint closed");
    if (rc == 0)
        rc = ck_shards_get(self->ck, &t, &sh, &n, &err);
    PyThread_release_lock(self->lock);
    Py_END_ALLOW_THREADS
    if (rc < 0)
        return ckpy_raise(rc, &err);
    PyObject *list = PyList_New(n);
    for (uint32_t i = 0; list && i < n; i++) {
        PyObject *item = Py_BuildValue("(NN)", ckpy_tuple_u64(sh[i].box.off, sh[i].box.ndim),
                                       ckpy_tuple_u64(sh[i].box.len, sh[i].box.ndim));
        if (!item) {
            Py_CLEAR(list);
            break;
        }
        PyList_SET_ITEM(list, i, item);
    }
    free(sh);
    return list;
}

static int blob_name(const char *name, const void *data, size_t len, void *arg)
{
    PyObject *s = PyUnicode_FromString(name);
    if (!s)
        return -ENOMEM;
    int rc = PyList_Append(arg, s);
    Py_DECREF(s);
    return rc < 0 ? -ENOMEM : 0;
}

static int walk_blobs(ck_ckpt *ck, PyObject *list, ck_err *err)
{
    return ck_blobs_each(ck, blob_name, list, err);
}

static PyObject *ckpt_blob_names(ckpt_obj *self, PyObject *unused)
{
    return collect(self, walk_blobs);
}

static PyObject *ckpt_blob(ckpt_obj *self, PyObject *args)
{
    const char *name;
    if (!PyArg_ParseTuple(args, "s", &name) || ckpt_open_check(self) < 0)
        return NULL;
    ck_err err = {0};
    void *data = NULL;
    size_t len = 0;
    int rc;
    Py_BEGIN_ALLOW_THREADS
    PyThread_acquire_lock(self->lock, WAIT_LOCK);
    rc = self->ck ? ck_blob_get(self->ck, name, &data, &len, &err)
                  : ck_err_set(&err, -EBADF, "checkpoint closed");
    PyThread_release_lock(self->lock);
    Py_END_ALLOW_THREADS
    if (rc < 0)
        return ckpy_raise(rc, &err);
    PyObject *b = PyBytes_FromStringAndSize(data, (Py_ssize_t)len);
    free(data);
    return b;
}

/* read(tensor, offsets, lengths, address, nbytes[, dtype]): the row-major elements
 * of the box [offsets, offsets + lengths) of tensor into the caller's memory, as dtype
 * (a code; 0: the tensor's own). */
static PyObject *ckpt_read(ckpt_obj *self, PyObject *args)
{
    const char *name;
    ckpy_u64s off, len;
    void *dst;
    unsigned long long nbytes;
    int as = 0;
    if (!PyArg_ParseTuple(args, "sO&O&O&K|i", &name, ckpy_u64_tuple, &off, ckpy_u64_tuple,
                          &len, ckpy_addr, &dst, &nbytes, &as))
        return NULL;
    ck_box box;
    if (ckpy_box(&off, &len, &box) < 0 || ckpt_open_check(self) < 0)
        return NULL;
    ck_err err = {0};
    int rc = 0;
    Py_BEGIN_ALLOW_THREADS
    PyThread_acquire_lock(self->lock, WAIT_LOCK);
    if (!self->ck) {
        rc = ck_err_set(&err, -EBADF, "checkpoint closed");
    } else if (!self->rd || strcmp(self->rd_name, name) != 0 || self->rd_as != as) {
        if (self->rd)
            ck_reader_close(self->rd);
        self->rd = NULL;
        rc = ck_reader_open(self->ck, name, (ck_dtype)as, &self->rd, &err);
        if (rc == 0) {
            snprintf(self->rd_name, sizeof self->rd_name, "%s", name);
            self->rd_as = as;
        }
    }
    if (rc == 0) {
        const ck_tensor *t = ck_reader_tensor(self->rd);
        uint64_t want = ck_box_numel(&box) * ck_dtype_size(as ? as : (int)t->dtype);
        if (box.ndim != t->ndim)
            rc = ck_err_set(&err, -EINVAL, "tensor %s has %d dims, the box %d", name, t->ndim,
                            box.ndim);
        else if (want != nbytes)
            rc = ck_err_set(&err, -EINVAL, "tensor %s: the box holds %llu bytes, the "
                            "destination %llu", name, (unsigned long long)want, nbytes);
        else
            rc = ck_reader_read(self->rd, &box, 0, want, dst, &err);
    }
    PyThread_release_lock(self->lock);
    Py_END_ALLOW_THREADS
    if (rc < 0)
        return ckpy_raise(rc, &err);
    Py_RETURN_NONE;
}

/* The load items of seq: (tensor, offsets, lengths, address, nbytes[, dtype]) each, or
 * with boxes_only (tensor, offsets, lengths). Malloc'd, the tensor names borrowed from
 * *fast (the caller releases it after the items); NULL with an exception set. */
static ck_load_item *parse_items(PyObject *seq, bool boxes_only, PyObject **fast, Py_ssize_t *n)
{
    *fast = PySequence_Fast(seq, "a sequence of (tensor, offsets, lengths, ...)");
    if (!*fast)
        return NULL;
    *n = PySequence_Fast_GET_SIZE(*fast);
    ck_load_item *items = calloc(*n ? (size_t)*n : 1, sizeof *items);
    if (!items) {
        Py_CLEAR(*fast);
        return (ck_load_item *)PyErr_NoMemory();
    }
    for (Py_ssize_t i = 0; i < *n; i++) {
        PyObject *it = PySequence_Fast_GET_ITEM(*fast, i);
        ckpy_u64s off, len;
        unsigned long long nbytes = 0;
        int as = 0;
        int ok = boxes_only
               ? PyArg_ParseTuple(it, "sO&O&", &items[i].tensor, ckpy_u64_tuple, &off,
                                  ckpy_u64_tuple, &len)
               : PyArg_ParseTuple(it, "sO&O&O&K|i", &items[i].tensor, ckpy_u64_tuple, &off,
                                  ckpy_u64_tuple, &len, ckpy_addr, &items[i].dst, &nbytes, &as);
        if (!ok || ckpy_box(&off, &len, &items[i].box) < 0) {
            free(items);
            Py_CLEAR(*fast);
            return NULL;
        }
        items[i].len = nbytes;
        items[i].dtype = (ck_dtype)as;
    }
    return items;
}

/* Parses seq (parse_items) and runs fn on the items, the handle's lock held and the GIL
 * released; the exception of its failure, or None. */
static PyObject *on_items(ckpt_obj *self, PyObject *seq, bool boxes_only,
                          int (*fn)(ckpt_obj *self, void *arg, ck_load_item *items, size_t n,
                                    ck_err *err), void *arg)
{
    PyObject *fast;
    Py_ssize_t n;
    ck_load_item *items = parse_items(seq, boxes_only, &fast, &n);
    if (!items)
        return NULL;
    ck_err err = {0};
    int rc;
    Py_BEGIN_ALLOW_THREADS
    PyThread_acquire_lock(self->lock, WAIT_LOCK);
    rc = self->ck ? fn(self, arg, items, (size_t)n, &err)
                  : ck_err_set(&err, -EBADF, "checkpoint closed");
    PyThread_release_lock(self->lock);
    Py_END_ALLOW_THREADS
    free(items);
    Py_DECREF(fast);
    if (rc < 0)
        return ckpy_raise(rc, &err);
    Py_RETURN_NONE;
}

static int load_many(ckpt_obj *self, void *arg, ck_load_item *items, size_t n, ck_err *err)
{
    (void)arg;
    return ck_load_many(self->ck, items, n, err);
}

/* read_many(items): items is a sequence of (tensor, offsets, lengths, address, nbytes[,
 * dtype]); the memory is the caller's, kept alive for the call. */
static PyObject *ckpt_read_many(ckpt_obj *self, PyObject *args)
{
    PyObject *seq;
    if (!PyArg_ParseTuple(args, "O", &seq) || ckpt_open_check(self) < 0)
        return NULL;
    return on_items(self, seq, false, load_many, NULL);
}

static int restore_fetch(ckpt_obj *self, void *cl, ck_load_item *items, size_t n, ck_err *err)
{
    if (self->rd)                  /* a reader of the handle that goes */
        ck_reader_close(self->rd);
    self->rd = NULL;
    int rc = ck_client_restore_fetch(cl, &self->ck, items, n, err);
    ck_load_verify(self->ck, self->verify);
    return rc;
}

/* fetch(items): items is a sequence of (tensor, offsets, lengths), the boxes a load will
 * read; through the Client the checkpoint was opened with, the files they touch are
 * brought to this node and the checkpoint reopened through the copies that hold them
 * (ck_client_restore_fetch). Without one, nothing to do. */
static PyObject *ckpt_fetch(ckpt_obj *self, PyObject *args)
{
    PyObject *seq;
    if (!PyArg_ParseTuple(args, "O", &seq) || ckpt_open_check(self) < 0)
        return NULL;
    if (!self->client)
        Py_RETURN_NONE;
    ck_client *cl = ckpy_client_of(self->client);
    return cl ? on_items(self, seq, true, restore_fetch, cl) : NULL;
}

static PyMethodDef ckpt_methods[] = {
    {"fetch", (PyCFunction)ckpt_fetch, METH_VARARGS,
     "fetch(items): through the Client it was opened with, brings the data files the "
     "boxes (tensor, offsets, lengths) touch to this node's tier."},
    {"close", (PyCFunction)ckpt_close, METH_NOARGS, "Closes the checkpoint."},
    {"info", (PyCFunction)ckpt_info, METH_NOARGS, "The checkpoint record, as a dict."},
    {"tensors", (PyCFunction)ckpt_tensors, METH_NOARGS,
     "[(name, dtype code, shape, n_shards)] in name order."},
    {"boxes", (PyCFunction)ckpt_boxes, METH_VARARGS,
     "boxes(tensor) -> [(offsets, lengths)] of its saved shards."},
    {"blob_names", (PyCFunction)ckpt_blob_names, METH_NOARGS, "Blob names in name order."},
    {"blob", (PyCFunction)ckpt_blob, METH_VARARGS, "blob(name) -> bytes."},
    {"read", (PyCFunction)ckpt_read, METH_VARARGS,
     "read(tensor, offsets, lengths, address, nbytes[, dtype]): a box's row-major "
     "elements into memory, as dtype (a code; 0: the tensor's own)."},
    {"read_many", (PyCFunction)ckpt_read_many, METH_VARARGS,
     "read_many([(tensor, offsets, lengths, address, nbytes[, dtype]), ...]): every box, "
     "as one batch at queue depth (ck_load_many)."},
    {NULL, NULL, 0, NULL},
};

PyTypeObject ckpy_ckpt_type = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "libshard._ck.Checkpoint",
    .tp_doc = "Checkpoint(root, name, verify=True): a committed checkpoint, read-only; "
              "verify=False reads without checking block hashes (raw speed, trusting "
              "the storage).",
    .tp_basicsize = sizeof(ckpt_obj),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)ckpt_init,
    .tp_dealloc = (destructor)ckpt_dealloc,
    .tp_methods = ckpt_methods,
};
