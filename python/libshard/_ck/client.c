/* client.c - libshard._ck.Client and ClientSave: a rank's asynchronous saves through
 * ckptd or the embedded engine (ck/client.h).
 *
 * A save crosses from Python once: begin (with the Decl its structure keeps) and
 * submit, which takes every source of the rank at once, in the declaration's order:
 * host addresses, copied by the client into the staging area (that copy is the stall),
 * and device addresses, each copied by one DMA on the caller's side stream straight
 * into the page-locked staging (cuda.c), waited for (GIL released) before the part is
 * handed over. Connected to ckptd, once every rank's submit returned and rank 0 asked
 * for the commit, the checkpoint commits even if every rank dies. A ClientSave holds a reference to its Client, so the client
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
    uint64_t *dev;              /* per source: its device address, 0 for host memory */
    void *stream;               /* the side stream the device copies are queued on */
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

/* begin(name, step, rank, job, decl, hash=True, level=0) -> ClientSave: this rank's
 * part of the save of what decl (a Decl) declares. job: the bytes of job_id_new(), the
 * same on every rank of the save. level: the commit level to wait for (ck_level: 0 the
 * daemon's, 1 local, 2 replicated, 3 durable). */
static PyObject *client_begin(client_obj *self, PyObject *args)
{
    const char *name, *jb;
    Py_ssize_t jlen;
    unsigned long long step, rank;
    PyObject *dobj;
    int hash = 1, level = 0;
    if (!PyArg_ParseTuple(args, "sKKy#O|pi", &name, &step, &rank, &jb, &jlen, &dobj, &hash,
                          &level) || client_live(self) < 0)
        return NULL;
    if (level < CK_LEVEL_DEFAULT || level > CK_LEVEL_DURABLE) {
        PyErr_Format(PyExc_ValueError, "begin: commit level %d (0 to 3)", level);
        return NULL;
    }
    ck_decl *decl = ckpy_decl_of(dobj);
    if (!decl)
        return NULL;
    if (jlen != CK_JOB_ID_LEN) {
        PyErr_Format(PyExc_ValueError, "begin: a job id is %d bytes (job_id_new()), not %zd",
                     CK_JOB_ID_LEN, jlen);
        return NULL;
    }
    ck_job_id job;
    memcpy(job.bytes, jb, CK_JOB_ID_LEN);
    csave_obj *sv = PyObject_New(csave_obj, &ckpy_csave_type);
    if (!sv)
        return NULL;
    sv->sv = NULL;
    sv->dev = NULL;
    sv->stream = NULL;
    sv->prev = sv->next = NULL;
    Py_INCREF(self);
    sv->owner = self;
    ck_err err = {0};
    int rc;
    Py_BEGIN_ALLOW_THREADS
    rc = ck_client_begin(self->cl, &sv->sv, name, step, decl, rank, &job, &err);
    Py_END_ALLOW_THREADS
    if (rc < 0) {
        sv->sv = NULL;
        Py_DECREF(sv);
        return ckpy_raise(rc, &err);
    }
    if (!hash)
        ck_client_no_hash(sv->sv);
    ck_client_level(sv->sv, (ck_level)level);
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
     "begin(name, step, rank, job, decl, hash=True) -> ClientSave"},
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
    PyMem_Free(self->dev);
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

static int blob_fn(void *h, const char *name, const void *data, size_t len, ck_err *err)
{
    return ck_client_blob(h, name, data, len, err);
}

static PyObject *csave_blob(csave_obj *self, PyObject *args)
{
    return ckpy_call_blob(args, self->sv, blob_fn);
}

/* A device source's DMA into staging, and the wait for all of them (ck_submit). */
static int place_dev(void *arg, uint32_t i, const char *tensor, uint32_t box, void *dst,
                     size_t len, ck_err *err)
{
    (void)tensor, (void)box;
    csave_obj *self = arg;
    return ckpy_cuda_copy(self->owner->cu, dst, self->dev[i], len, self->stream, err);
}

static int devs_done(void *arg, ck_err *err)
{
    csave_obj *self = arg;
    return ckpy_cuda_stream_wait(self->owner->cu, self->stream, err);
}

/* The sources of a submit: addrs (ints) and, when given, devs (bytes: 1 for a device
 * address) into src; the device addresses into self->dev. */
static int sources(csave_obj *self, PyObject *addrs, PyObject *devs, ck_source **out,
                   uint32_t *n)
{
    PyObject *seq = PySequence_Fast(addrs, "submit: a sequence of addresses");
    if (!seq)
        return -1;
    Py_buffer db = {0};
    Py_ssize_t k = PySequence_Fast_GET_SIZE(seq);
    if (devs != Py_None && PyObject_GetBuffer(devs, &db, PyBUF_SIMPLE) < 0) {
        Py_DECREF(seq);
        return -1;
    }
    ck_source *src = NULL;
    if (db.buf && db.len != k)
        PyErr_Format(PyExc_ValueError, "submit: %zd device flags for %zd sources", db.len, k);
    else if (k > UINT32_MAX)
        PyErr_SetString(PyExc_ValueError, "submit: too many sources");
    else if (db.buf && !self->owner->cu)
        PyErr_SetString(PyExc_ValueError, "submit: device sources for a client without pin=");
    else if (!(src = PyMem_Calloc((size_t)(k ? k : 1), sizeof *src)))
        PyErr_NoMemory();
    PyMem_Free(self->dev);
    self->dev = NULL;
    if (src && db.buf && !(self->dev = PyMem_Calloc((size_t)(k ? k : 1), sizeof *self->dev)))
        PyErr_NoMemory();
    PyObject **items = PySequence_Fast_ITEMS(seq);
    for (Py_ssize_t i = 0; src && !PyErr_Occurred() && i < k; i++) {
        unsigned long long a = PyLong_AsUnsignedLongLong(items[i]);
        if (db.buf && ((const char *)db.buf)[i])
            self->dev[i] = a;
        else
            src[i].mem = (const void *)(uintptr_t)a;
    }
    if (db.obj)
        PyBuffer_Release(&db);
    Py_DECREF(seq);
    if (PyErr_Occurred()) {
        PyMem_Free(src);
        return -1;
    }
    *out = src;
    *n = (uint32_t)k;
    return 0;
}

/* submit(addrs, mode=0, devs=None, stream=0, commit=False): the part's every source in
 * one call, one per box this rank writes (Decl.writes), in the declaration's order;
 * devs marks device addresses (copied on stream, a cudaStream_t); mode 0 returns once
 * the copy is done, 1 at once (the copy on the client's thread: wait(1) fences it), 2
 * once the part is durable; commit (rank 0) then asks for the commit. */
static PyObject *csave_submit(csave_obj *self, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"addrs", "mode", "devs", "stream", "commit", NULL};
    PyObject *addrs, *devs = Py_None;
    int mode = 0, commit = 0;
    unsigned long long stream = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "O|iOKp", kwlist, &addrs, &mode, &devs, &stream,
                                     &commit) || csave_live(self) < 0)
        return NULL;
    if (mode < CK_SUBMIT_COPY || mode > CK_SUBMIT_SYNC) {
        PyErr_Format(PyExc_ValueError, "submit: mode %d (0 copy, 1 lazy, 2 sync)", mode);
        return NULL;
    }
    ck_source *src;
    uint32_t n;
    if (sources(self, addrs, devs, &src, &n) < 0)
        return NULL;
    self->stream = (void *)(uintptr_t)stream;
    ck_submit how = { .mode = (ck_submit_mode)mode, .src = src, .nsrc = n, .arg = self };
    if (self->dev) {
        how.place = place_dev;
        how.copies_done = devs_done;
    }
    ck_err err = {0};
    int rc;
    Py_BEGIN_ALLOW_THREADS
    rc = ck_client_submit(self->sv, &how, &err);
    if (rc == 0 && commit)
        rc = ck_client_commit(self->sv, &err);
    Py_END_ALLOW_THREADS
    PyMem_Free(src);
    if (rc < 0)
        return ckpy_raise(rc, &err);
    Py_RETURN_NONE;
}

static PyObject *csave_commit(csave_obj *self, PyObject *unused)
{
    if (csave_live(self) < 0)
        return NULL;
    ck_err err = {0};
    int rc;
    Py_BEGIN_ALLOW_THREADS
    rc = ck_client_commit(self->sv, &err);
    Py_END_ALLOW_THREADS
    if (rc < 0)
        return ckpy_raise(rc, &err);
    Py_RETURN_NONE;
}

/* wait(state=3): blocks until the part is staged (1: its sources are no longer read),
 * durable (2) or the save committed (3); raises the save's error. */
static PyObject *csave_wait(csave_obj *self, PyObject *args)
{
    int state = CK_CLIENT_COMMITTED;
    if (!PyArg_ParseTuple(args, "|i", &state) || csave_live(self) < 0)
        return NULL;
    ck_err err = {0};
    int rc;
    Py_BEGIN_ALLOW_THREADS
    rc = ck_client_wait(self->sv, (ck_client_state)state, &err);
    Py_END_ALLOW_THREADS
    if (rc < 0)
        return ckpy_raise(rc, &err);
    Py_RETURN_NONE;
}

/* level() -> (level, note): once committed, the level the checkpoint reached (1 local,
 * 2 replicated, 3 durable; 0 before) and why it is lower than asked ("" if not). */
static PyObject *csave_level(csave_obj *self, PyObject *unused)
{
    if (csave_live(self) < 0)
        return NULL;
    char why[CK_ERR_MSG_MAX];
    ck_level l = ck_client_level_reached(self->sv, why, sizeof why);
    return Py_BuildValue("(is)", (int)l, why);
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
    {"blob", (PyCFunction)csave_blob, METH_VARARGS, "blob(name, bytes)"},
    {"submit", (PyCFunction)(void (*)(void))csave_submit, METH_VARARGS | METH_KEYWORDS,
     "submit(addrs, mode=0, devs=None, stream=0, commit=False): hands the part over; addrs "
     "one per box this rank writes (Decl.writes), in order; devs marks device addresses, "
     "copied on stream; mode 0 copy, 1 lazy (wait(1) fences), 2 sync; commit: rank 0's."},
    {"commit", (PyCFunction)csave_commit, METH_NOARGS,
     "Rank 0: commit once every rank's part is durable."},
    {"poll", (PyCFunction)csave_poll, METH_NOARGS, "poll() -> state, without blocking."},
    {"level", (PyCFunction)csave_level, METH_NOARGS,
     "level() -> (level, note): the commit level reached, and why not the one asked."},
    {"wait", (PyCFunction)csave_wait, METH_VARARGS,
     "wait(state=3): until staged (1: the fence), durable (2) or committed (3); or raises."},
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
