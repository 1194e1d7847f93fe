/* client.c - libshard._ck.Client and ClientSave: a rank's asynchronous saves through
 * ckptd or the embedded engine (ck/client.h).
 *
 * save_async copies the rank's boxes into the staging area and returns: that copy is
 * the stall. Sources the client cannot read (CUDA tensors) are copied by the caller
 * straight into the staging area (place, then box_at: writer.py's DMA on a side
 * stream), and save_async / save_lazy take the copies' CUDA event, waited for (GIL
 * released) before the part is handed over. Connected to ckptd, once every rank's
 * save_async returned and rank 0 asked for the commit, the checkpoint commits even if
 * every rank dies. A ClientSave holds a reference to its Client, so the client
 * object outlives its saves; and the client lists its open saves, as closing it
 * (Client.close, or interpreter exit through engine.close_all) frees the C client,
 * which every save points into: close frees the saves still open first (each waits
 * until its part no longer needs staging), and a save freed later finds it closed.
 * Without that, a writer collected after the exit's close_all crashed the process.
 *
 * A forked child inherits the objects but not the engine's threads, which stay in the
 * parent: closing its copy of the client, or freeing a save, would wait forever for
 * them. In a process other than the one that opened it, a client and its saves are
 * dropped without a word to the engine (the child's copies of their memory simply go
 * with it), and using them raises. engine.py makes the child its own clients.
 */
#include "ckpy.h"

#include <stdlib.h>
#include <unistd.h>

#include "ck/client.h"

typedef struct csave_obj csave_obj;

typedef struct {
    PyObject_HEAD
    ck_client *cl;
    ckpy_cuda *cu;              /* pin=: the driver that page-locks the staging */
    csave_obj *open;            /* the saves whose C save is not freed yet */
    pid_t pid;                  /* the process that opened cl (its engine's threads) */
} client_obj;

struct csave_obj {
    PyObject_HEAD
    client_obj *owner;
    ck_client_save *sv;
    void *event;                /* the CUDA event of the caller's copies, until handed over */
    csave_obj *prev, *next;     /* in owner->open while sv is set */
};

static void csave_free_handle(csave_obj *self);

/* 0 when cl is open in this process; else -1 with ValueError set. */
static int client_live(client_obj *self)
{
    if (self->cl && self->pid == getpid())
        return 0;
    PyErr_SetString(PyExc_ValueError, self->cl ? "the Client was opened by a parent process "
                    "(this one was forked from it): make a new one here" : "Client is closed");
    return -1;
}

static int client_init(client_obj *self, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"root", "socket", "embedded", "nodes", "pin", "part_timeout",
                             "dead_after", NULL};
    const char *root = NULL, *sock = NULL;
    int embedded = 0, pin = -1;
    unsigned int nodes = 0, part_timeout = 0, dead_after = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "z|zpIiII", kwlist, &root, &sock, &embedded,
                                     &nodes, &pin, &part_timeout, &dead_after))
        return -1;
    if (self->cl) {
        PyErr_SetString(PyExc_RuntimeError, "Client is already open");
        return -1;
    }
    ck_err err = {0};
    int rc = 0;
    Py_BEGIN_ALLOW_THREADS
    if (pin >= 0)
        rc = ckpy_cuda_open(pin, &self->cu, &err);
    if (rc == 0) {
        ck_client_opts opts = {.socket = sock, .embedded = embedded, .nodes = nodes,
                               .part_timeout = part_timeout, .dead_after = dead_after};
        if (self->cu) {
            opts.staging_mapped = ckpy_cuda_pin;
            opts.staging_unmapping = ckpy_cuda_unpin;
            opts.staging_arg = self->cu;
        }
        rc = ck_client_open(&self->cl, root, &opts, &err);
    }
    Py_END_ALLOW_THREADS
    self->pid = getpid();
    if (rc < 0) {
        self->cl = NULL;
        ckpy_cuda_close(self->cu);
        self->cu = NULL;
        ckpy_raise(rc, &err);
        return -1;
    }
    return 0;
}

static void client_close_handle(client_obj *self)
{
    while (self->open)
        csave_free_handle(self->open);
    ck_client *cl = self->cl;
    ckpy_cuda *cu = self->cu;
    self->cl = NULL;
    self->cu = NULL;
    if ((cl || cu) && self->pid == getpid()) {
        Py_BEGIN_ALLOW_THREADS
        ck_client_close(cl);        /* unpins its areas before the driver goes */
        ckpy_cuda_close(cu);
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

ck_client *ckpy_client_of(PyObject *o)
{
    if (!PyObject_TypeCheck(o, &ckpy_client_type) || !((client_obj *)o)->cl) {
        PyErr_SetString(PyExc_TypeError, "expected an open libshard._ck.Client");
        return NULL;
    }
    return ((client_obj *)o)->cl;
}

/* resolve(what, newest=False) -> (name, why): the checkpoint to restore
 * (ck_client_resolve); why is "" when it is the newest saved. */
static PyObject *client_resolve(client_obj *self, PyObject *args)
{
    const char *what;
    int newest = 0;
    if (!PyArg_ParseTuple(args, "s|p", &what, &newest) || !ckpy_client_of((PyObject *)self))
        return NULL;
    char name[CK_NAME_MAX], why[CK_ERR_MSG_MAX];
    ck_err err = {0};
    int rc;
    Py_BEGIN_ALLOW_THREADS
    rc = ck_client_resolve(self->cl, what, newest, name, why, sizeof why, &err);
    Py_END_ALLOW_THREADS
    if (rc < 0)
        return ckpy_raise(rc, &err);
    return Py_BuildValue("(ss)", name, why);
}

PyObject *ckpy_job_id_new(PyObject *self, PyObject *args)
{
    (void)self, (void)args;
    ck_job_id job;
    ck_err err = {0};
    int rc = ck_job_id_new(&job, &err);
    if (rc < 0)
        return ckpy_raise(rc, &err);
    return PyBytes_FromStringAndSize((const char *)job.bytes, CK_JOB_ID_LEN);
}

/* begin(name, step, rank, world, job, hash=True) -> ClientSave, over a 1-D mesh of world
 * ranks: DCP's box lists name their writers by rank. job: the bytes of job_id_new(),
 * the same on every rank of the save. */
static PyObject *client_begin(client_obj *self, PyObject *args)
{
    const char *name, *jb;
    Py_ssize_t jlen;
    unsigned long long step, rank, world;
    int hash = 1;
    if (!PyArg_ParseTuple(args, "sKKKy#|p", &name, &step, &rank, &world, &jb, &jlen, &hash) ||
        client_live(self) < 0)
        return NULL;
    if (jlen != CK_JOB_ID_LEN) {
        PyErr_Format(PyExc_ValueError, "begin: a job id is %d bytes (job_id_new()), not %zd",
                     CK_JOB_ID_LEN, jlen);
        return NULL;
    }
    ck_job_id job;
    memcpy(job.bytes, jb, CK_JOB_ID_LEN);
    ckpy_u64s sizes = {.n = 1, .v = {world}};
    ck_mesh mesh;
    if (ckpy_mesh(&sizes, &mesh) < 0)
        return NULL;
    csave_obj *sv = PyObject_New(csave_obj, &ckpy_csave_type);
    if (!sv)
        return NULL;
    sv->sv = NULL;
    sv->event = NULL;
    sv->prev = sv->next = NULL;
    Py_INCREF(self);
    sv->owner = self;
    ck_err err = {0};
    int rc;
    Py_BEGIN_ALLOW_THREADS
    rc = ck_client_begin(self->cl, &sv->sv, name, step, &mesh, rank, world, &job, &err);
    Py_END_ALLOW_THREADS
    if (rc < 0) {
        sv->sv = NULL;
        Py_DECREF(sv);
        return ckpy_raise(rc, &err);
    }
    if (!hash)
        ck_client_no_hash(sv->sv);
    sv->next = self->open;
    if (self->open)
        self->open->prev = sv;
    self->open = sv;
    return (PyObject *)sv;
}

/* reserve(bytes, wait=False): staging areas of at least bytes, faulted in (and pinned
 * with pin=) ahead of the saves that need them. */
static PyObject *client_reserve(client_obj *self, PyObject *args)
{
    unsigned long long bytes;
    int wait = 0;
    if (!PyArg_ParseTuple(args, "K|p", &bytes, &wait) || client_live(self) < 0)
        return NULL;
    Py_BEGIN_ALLOW_THREADS
    ck_client_reserve(self->cl, bytes, wait);
    Py_END_ALLOW_THREADS
    Py_RETURN_NONE;
}

static PyMethodDef client_methods[] = {
    {"resolve", (PyCFunction)client_resolve, METH_VARARGS,
     "resolve(what, newest=False) -> (name, why): the checkpoint to restore through ckptd's "
     "tiers (what, or the newest what<step> that can be restored; why: why not the newest "
     "saved, or \"\")."},
    {"close", (PyCFunction)client_close, METH_NOARGS,
     "Waits until every part this client staged is durable, then closes."},
    {"reserve", (PyCFunction)client_reserve, METH_VARARGS,
     "reserve(bytes, wait=False): staging made (and pinned) ahead of the saves."},
    {"begin", (PyCFunction)client_begin, METH_VARARGS,
     "begin(name, step, rank, world, job, hash=True) -> ClientSave"},
    {NULL, NULL, 0, NULL},
};

static PyObject *client_pinned(client_obj *self, void *unused)
{
    return PyBool_FromLong(self->cu != NULL);
}

static PyGetSetDef client_getset[] = {
    {"connected", (getter)client_connected, NULL, "True when the engine is ckptd.", NULL},
    {"pinned", (getter)client_pinned, NULL, "True when the staging is page-locked for a GPU.",
     NULL},
    {"root", (getter)client_root, NULL, "The checkpoint root.", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

PyTypeObject ckpy_client_type = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "libshard._ck.Client",
    .tp_doc = "Client(root, socket=None, embedded=False, nodes=0, pin=-1, part_timeout=0, "
              "dead_after=0): ckptd, or the embedded engine (nodes: the job's processes, each "
              "with an engine); pin: page-lock the staging for that CUDA device.",
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
        client_obj *o = self->owner;
        if (self->prev)
            self->prev->next = self->next;
        else
            o->open = self->next;
        if (self->next)
            self->next->prev = self->prev;
        self->prev = self->next = NULL;
        if (o->pid == getpid()) {
            Py_BEGIN_ALLOW_THREADS
            ck_client_save_free(sv);
            Py_END_ALLOW_THREADS
        }
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
    if (!self->sv) {
        PyErr_SetString(PyExc_ValueError, "the save is closed");
        return -1;
    }
    return client_live(self->owner);
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

/* The blocking calls without arguments: commit, wait, fence, place. */
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

static int copies_landed(void *arg, ck_err *err)
{
    csave_obj *self = arg;
    void *ev = self->event;
    self->event = NULL;
    return ckpy_cuda_event_wait(self->owner->cu, ev, err);
}

/* save_async(event=0) and save_lazy(event=0): event is the CUDA event (an address, as
 * torch.cuda.Event.cuda_event) recorded after the caller's copies into staging; it is
 * waited for before the part is handed over. */
static PyObject *csave_hand_over(csave_obj *self, PyObject *args,
                                 int (*fn)(ck_client_save *, ck_err *))
{
    unsigned long long event = 0;
    if (!PyArg_ParseTuple(args, "|K", &event) || csave_live(self) < 0)
        return NULL;
    if (event && !self->owner->cu) {
        PyErr_SetString(PyExc_ValueError, "a CUDA event for a client without pin=");
        return NULL;
    }
    if (event) {
        self->event = (void *)(uintptr_t)event;
        ck_client_save_copies(self->sv, copies_landed, self);
    }
    return csave_call(self, fn);
}

static PyObject *csave_save_async(csave_obj *self, PyObject *args)
{
    return csave_hand_over(self, args, ck_client_save_async);
}

static PyObject *csave_save_sync(csave_obj *self, PyObject *unused)
{
    return csave_call(self, ck_client_save_sync);
}

static PyObject *csave_save_lazy(csave_obj *self, PyObject *args)
{
    return csave_hand_over(self, args, ck_client_save_lazy);
}

static PyObject *csave_fence(csave_obj *self, PyObject *unused)
{
    return csave_call(self, ck_client_save_fence);
}

static PyObject *csave_place(csave_obj *self, PyObject *unused)
{
    return csave_call(self, ck_client_save_place);
}

static PyObject *csave_commit(csave_obj *self, PyObject *unused)
{
    return csave_call(self, ck_client_commit);
}

static PyObject *csave_wait(csave_obj *self, PyObject *unused)
{
    return csave_call(self, ck_client_wait);
}

static PyObject *csave_reserve(csave_obj *self, PyObject *args)
{
    int wait = 0;
    if (!PyArg_ParseTuple(args, "|p", &wait) || csave_live(self) < 0)
        return NULL;
    ck_err err = {0};
    int rc;
    Py_BEGIN_ALLOW_THREADS
    rc = ck_client_save_reserve(self->sv, wait, &err);
    Py_END_ALLOW_THREADS
    if (rc < 0)
        return ckpy_raise(rc, &err);
    Py_RETURN_NONE;
}

/* box_at(tensor, box) -> address: where the box's bytes go in the staging area (after
 * place); None for a box this rank does not write. */
static PyObject *csave_box_at(csave_obj *self, PyObject *args)
{
    const char *name;
    unsigned int box;
    if (!PyArg_ParseTuple(args, "sI", &name, &box) || csave_live(self) < 0)
        return NULL;
    ck_err err = {0};
    void *p = ck_client_box_at(self->sv, name, box, &err);
    if (!p)
        return err.code == -ENOENT ? Py_NewRef(Py_None) : ckpy_raise(err.code, &err);
    return PyLong_FromVoidPtr(p);
}

/* staging() -> a writable memoryview of the placed part's staging area (its file image,
 * then its blobs), valid until the part is handed over. */
static PyObject *csave_staging(csave_obj *self, PyObject *unused)
{
    if (csave_live(self) < 0)
        return NULL;
    void *base;
    size_t len;
    ck_err err = {0};
    int rc = ck_client_save_staging(self->sv, &base, &len, &err);
    if (rc < 0)
        return ckpy_raise(rc, &err);
    return PyMemoryView_FromMemory(base, (Py_ssize_t)len, PyBUF_WRITE);
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
    {"reserve", (PyCFunction)csave_reserve, METH_VARARGS,
     "reserve(wait=False): staging for parts of this size, made ahead."},
    {"place", (PyCFunction)csave_place, METH_NOARGS,
     "Takes the part's staging area (admitted, laid out): box_at and staging work after it."},
    {"box_at", (PyCFunction)csave_box_at, METH_VARARGS,
     "box_at(tensor, index) -> the address of the box in staging, or None (not this rank's)."},
    {"staging", (PyCFunction)csave_staging, METH_NOARGS,
     "staging() -> memoryview of the placed part's staging area."},
    {"save_async", (PyCFunction)csave_save_async, METH_VARARGS,
     "save_async(event=0): copies the boxes given by address and the blobs into staging, "
     "waits for the CUDA event of the caller's own copies, hands the part to the engine."},
    {"save_sync", (PyCFunction)csave_save_sync, METH_NOARGS,
     "save_sync(): the part durable when it returns; embedded, the engine reads the boxes "
     "given by address itself, its copies overlapping its writes (no staging)."},
    {"save_lazy", (PyCFunction)csave_save_lazy, METH_VARARGS,
     "save_lazy(event=0): the same on the client's thread; returns at once (fence)."},
    {"fence", (PyCFunction)csave_fence, METH_NOARGS,
     "Waits until the sources are no longer read (a lazy save's copies are done)."},
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
