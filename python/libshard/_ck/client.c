/* client.c - libshard._ck.Client and ClientSave: a rank's asynchronous saves through
 * ckptd or the embedded engine (ck/client.h).
 *
 * save_async copies the rank's boxes into the staging memfd and returns: that copy is
 * the stall. Connected to ckptd, once every rank's save_async returned and rank 0 asked
 * for the commit, the checkpoint commits even if every rank dies. A ClientSave holds a
 * reference to its Client, so the client outlives its saves.
 */
#include "ckpy.h"

#include <stdlib.h>

#include "ck/client.h"

typedef struct {
    PyObject_HEAD
    ck_client *cl;
} client_obj;

typedef struct {
    PyObject_HEAD
    client_obj *owner;
    ck_client_save *sv;
} csave_obj;

static int client_init(client_obj *self, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"root", "socket", "embedded", NULL};
    const char *root = NULL, *sock = NULL;
    int embedded = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "z|zp", kwlist, &root, &sock, &embedded))
        return -1;
    if (self->cl) {
        PyErr_SetString(PyExc_RuntimeError, "Client is already open");
        return -1;
    }
    ck_client_opts opts = {.socket = sock, .embedded = embedded};
    ck_err err = {0};
    int rc;
    Py_BEGIN_ALLOW_THREADS
    rc = ck_client_open(&self->cl, root, &opts, &err);
    Py_END_ALLOW_THREADS
    if (rc < 0) {
        self->cl = NULL;
        ckpy_raise(rc, &err);
        return -1;
    }
    return 0;
}

static void client_close_handle(client_obj *self)
{
    ck_client *cl = self->cl;
    self->cl = NULL;
    if (cl) {
        Py_BEGIN_ALLOW_THREADS
        ck_client_close(cl);
        Py_END_ALLOW_THREADS
    }
}

static void client_dealloc(client_obj *self)
{
    client_close_handle(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyObject *client_close(client_obj *self, PyObject *unused)
{
    client_close_handle(self);
    Py_RETURN_NONE;
}

static PyObject *client_connected(client_obj *self, void *unused)
{
    return PyBool_FromLong(self->cl && ck_client_connected(self->cl));
}

static PyObject *client_root(client_obj *self, void *unused)
{
    if (!self->cl)
        Py_RETURN_NONE;
    return PyUnicode_FromString(ck_client_root(self->cl));
}

/* begin(name, step, rank, world, hash=True) -> ClientSave, over a 1-D mesh of world
 * ranks: DCP's box lists name their writers by rank. */
static PyObject *client_begin(client_obj *self, PyObject *args)
{
    const char *name;
    unsigned long long step, rank, world;
    int hash = 1;
    if (!PyArg_ParseTuple(args, "sKKK|p", &name, &step, &rank, &world, &hash))
        return NULL;
    if (!self->cl) {
        PyErr_SetString(PyExc_ValueError, "Client is closed");
        return NULL;
    }
    ckpy_u64s sizes = {.n = 1, .v = {world}};
    ck_mesh mesh;
    if (ckpy_mesh(&sizes, &mesh) < 0)
        return NULL;
    csave_obj *sv = PyObject_New(csave_obj, &ckpy_csave_type);
    if (!sv)
        return NULL;
    sv->sv = NULL;
    Py_INCREF(self);
    sv->owner = self;
    ck_err err = {0};
    int rc;
    Py_BEGIN_ALLOW_THREADS
    rc = ck_client_begin(self->cl, &sv->sv, name, step, &mesh, rank, world, &err);
    Py_END_ALLOW_THREADS
    if (rc < 0) {
        sv->sv = NULL;
        Py_DECREF(sv);
        return ckpy_raise(rc, &err);
    }
    if (!hash)
        ck_client_no_hash(sv->sv);
    return (PyObject *)sv;
}

static PyMethodDef client_methods[] = {
    {"close", (PyCFunction)client_close, METH_NOARGS,
     "Waits until every part this client staged is durable, then closes."},
    {"begin", (PyCFunction)client_begin, METH_VARARGS,
     "begin(name, step, rank, world, hash=True) -> ClientSave"},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef client_getset[] = {
    {"connected", (getter)client_connected, NULL, "True when the engine is ckptd.", NULL},
    {"root", (getter)client_root, NULL, "The checkpoint root.", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

PyTypeObject ckpy_client_type = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "libshard._ck.Client",
    .tp_doc = "Client(root, socket=None, embedded=False): ckptd, or the embedded engine.",
    .tp_basicsize = sizeof(client_obj),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)client_init,
    .tp_dealloc = (destructor)client_dealloc,
    .tp_methods = client_methods,
    .tp_getset = client_getset,
};

/* ---- ClientSave ---- */

static void csave_free_handle(csave_obj *self)
{
    ck_client_save *sv = self->sv;
    self->sv = NULL;
    if (sv) {
        Py_BEGIN_ALLOW_THREADS
        ck_client_save_free(sv);
        Py_END_ALLOW_THREADS
    }
}

static void csave_dealloc(csave_obj *self)
{
    csave_free_handle(self);
    Py_XDECREF(self->owner);
    PyObject_Free(self);
}

static int csave_live(csave_obj *self)
{
    if (self->sv)
        return 0;
    PyErr_SetString(PyExc_ValueError, "the save is closed");
    return -1;
}

static int tensor_boxes_fn(void *h, const char *name, ck_dtype dtype, int ndim,
                           const uint64_t *shape, uint32_t n, const ck_box *boxes,
                           const uint64_t *writers, ck_err *err)
{
    return ck_client_tensor_boxes(h, name, dtype, ndim, shape, n, boxes, writers, err);
}

static int box_fn(void *h, const char *tensor, uint32_t box, const void *data, ck_err *err)
{
    return ck_client_box(h, tensor, box, data, err);
}

static int blob_fn(void *h, const char *name, const void *data, size_t len, ck_err *err)
{
    return ck_client_blob(h, name, data, len, err);
}

static PyObject *csave_tensor_boxes(csave_obj *self, PyObject *args)
{
    return ckpy_call_tensor_boxes(args, self->sv, tensor_boxes_fn);
}

static PyObject *csave_box(csave_obj *self, PyObject *args)
{
    return ckpy_call_box(args, self->sv, box_fn);
}

static PyObject *csave_blob(csave_obj *self, PyObject *args)
{
    return ckpy_call_blob(args, self->sv, blob_fn);
}

/* The blocking calls without arguments: save_async, commit, wait. */
static PyObject *csave_call(csave_obj *self, int (*fn)(ck_client_save *, ck_err *))
{
    if (csave_live(self) < 0)
        return NULL;
    ck_err err = {0};
    int rc;
    Py_BEGIN_ALLOW_THREADS
    rc = fn(self->sv, &err);
    Py_END_ALLOW_THREADS
    if (rc < 0)
        return ckpy_raise(rc, &err);
    Py_RETURN_NONE;
}

static PyObject *csave_save_async(csave_obj *self, PyObject *unused)
{
    return csave_call(self, ck_client_save_async);
}

static PyObject *csave_commit(csave_obj *self, PyObject *unused)
{
    return csave_call(self, ck_client_commit);
}

static PyObject *csave_wait(csave_obj *self, PyObject *unused)
{
    return csave_call(self, ck_client_wait);
}

/* poll() -> state (0 building, 1 staged, 2 durable, 3 committed); raises on failure. */
static PyObject *csave_poll(csave_obj *self, PyObject *unused)
{
    if (csave_live(self) < 0)
        return NULL;
    ck_client_state st;
    ck_err err = {0};
    int rc = ck_client_poll(self->sv, &st, &err);
    if (rc < 0)
        return ckpy_raise(rc, &err);
    if (st == CK_CLIENT_FAILED)
        return ckpy_raise(err.code ? err.code : -EIO, &err);
    return PyLong_FromLong((long)st);
}

static PyObject *csave_close(csave_obj *self, PyObject *unused)
{
    csave_free_handle(self);
    Py_RETURN_NONE;
}

static PyMethodDef csave_methods[] = {
    {"tensor_boxes", (PyCFunction)csave_tensor_boxes, METH_VARARGS,
     "tensor_boxes(name, dtype code, shape, [(offsets, lengths)], [writer rank])"},
    {"box", (PyCFunction)csave_box, METH_VARARGS, "box(tensor, index, address)"},
    {"blob", (PyCFunction)csave_blob, METH_VARARGS, "blob(name, bytes)"},
    {"save_async", (PyCFunction)csave_save_async, METH_NOARGS,
     "Copies this rank's boxes and blobs into staging and hands them to the engine."},
    {"commit", (PyCFunction)csave_commit, METH_NOARGS,
     "Rank 0: commit once every rank's part is durable."},
    {"poll", (PyCFunction)csave_poll, METH_NOARGS, "poll() -> state, without blocking."},
    {"wait", (PyCFunction)csave_wait, METH_NOARGS, "Blocks until committed, or raises."},
    {"close", (PyCFunction)csave_close, METH_NOARGS,
     "Waits until the part no longer needs its staging, then frees the save."},
    {NULL, NULL, 0, NULL},
};

PyTypeObject ckpy_csave_type = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "libshard._ck.ClientSave",
    .tp_doc = "One rank's part of a save through a Client (Client.begin).",
    .tp_basicsize = sizeof(csave_obj),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_dealloc = (destructor)csave_dealloc,
    .tp_methods = csave_methods,
};
