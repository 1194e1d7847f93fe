/* save.c - libshard._ck.Save: a whole save in one process (ck/save.h).
 *
 * For a process that holds every rank's data (ckpt-import-dcp): it begins with the
 * tensors a Decl declares, offers boxes (from memory, or straight from a file range,
 * streamed) and commits. Training ranks save through Client (client.c) instead.
 *
 * Memory offered with box() is the caller's and must stay alive until commit returns.
 */
#include "ckpy.h"

#include <fcntl.h>
#include <stdlib.h>
#include <unistd.h>

#include "ck/save.h"

typedef struct file_src {
    int fd;
    uint64_t base;
    struct file_src *next;
} file_src;

typedef struct {
    PyObject_HEAD
    ck_save *s;                 /* NULL once committed or aborted */
    file_src *files;            /* box_from_file sources, closed at the end */
} save_obj;

static void drop_files(save_obj *self)
{
    while (self->files) {
        file_src *f = self->files;
        self->files = f->next;
        close(f->fd);
        free(f);
    }
}

static void save_release(save_obj *self)
{
    if (self->s)
        ck_save_abort(self->s);
    self->s = NULL;
    drop_files(self);
}

static int save_init(save_obj *self, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"root", "name", "step", "decl", "hash", NULL};
    const char *root, *name;
    unsigned long long step;
    PyObject *dobj;
    int hash = 1;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "ssKO|p", kwlist, &root, &name, &step, &dobj,
                                     &hash))
        return -1;
    save_release(self);
    ck_decl *decl = ckpy_decl_of(dobj);
    if (!decl)
        return -1;
    ck_save_opts opts = {.no_hash = !hash, .fill_threadsafe = true};
    ck_err err = {0};
    int rc;
    Py_BEGIN_ALLOW_THREADS
    rc = ck_save_begin(&self->s, root, name, step, decl, &opts, &err);
    Py_END_ALLOW_THREADS
    if (rc < 0) {
        self->s = NULL;
        ckpy_raise(rc, &err);
        return -1;
    }
    return 0;
}

static void save_dealloc(save_obj *self)
{
    save_release(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static int live(save_obj *self)
{
    if (self->s)
        return 0;
    PyErr_SetString(PyExc_ValueError, "the save is already committed or aborted");
    return -1;
}

static int box_fn(void *h, const char *tensor, uint32_t box, const void *data, ck_err *err)
{
    return ck_save_box(h, tensor, box, data, err);
}

static int blob_fn(void *h, const char *name, const void *data, size_t len, ck_err *err)
{
    return ck_save_blob(h, name, data, len, err);
}

static PyObject *save_box(save_obj *self, PyObject *args)
{
    return ckpy_call_box(args, self->s, box_fn);
}

static PyObject *save_blob(save_obj *self, PyObject *args)
{
    return ckpy_call_blob(args, self->s, blob_fn);
}

static int file_fill(void *arg, uint64_t off, void *dst, size_t len)
{
    const file_src *f = arg;
    while (len) {
        ssize_t n = pread(f->fd, dst, len, (off_t)(f->base + off));
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0)
            return -errno;
        if (n == 0)
            return -ENODATA;    /* the file ends before the box's bytes: truncated */
        dst = (char *)dst + n;
        off += (uint64_t)n;
        len -= (size_t)n;
    }
    return 0;
}

/* box_from_file(tensor, box, path, offset): the box's row-major bytes are the file's
 * from offset on; read while the rank's file is written, never held whole. */
static PyObject *save_box_from_file(save_obj *self, PyObject *args)
{
    const char *name, *path;
    unsigned int idx;
    unsigned long long base;
    if (!PyArg_ParseTuple(args, "sIsK", &name, &idx, &path, &base) || live(self) < 0)
        return NULL;
    file_src *f = calloc(1, sizeof *f);
    if (!f)
        return PyErr_NoMemory();
    f->fd = open(path, O_RDONLY | O_CLOEXEC);
    if (f->fd < 0) {
        free(f);
        return PyErr_SetFromErrnoWithFilename(PyExc_OSError, path);
    }
    f->base = base;
    f->next = self->files;
    self->files = f;
    ck_err err = {0};
    int rc = ck_save_box_fill(self->s, name, idx, file_fill, f, &err);
    if (rc < 0)
        return ckpy_raise(rc, &err);
    Py_RETURN_NONE;
}

static PyObject *save_commit(save_obj *self, PyObject *unused)
{
    if (live(self) < 0)
        return NULL;
    ck_save *s = self->s;
    self->s = NULL;             /* commit frees it in every case */
    ck_save_stats st = {0};
    ck_err err = {0};
    int rc;
    Py_BEGIN_ALLOW_THREADS
    rc = ck_save_commit(s, &st, &err);
    Py_END_ALLOW_THREADS
    drop_files(self);
    if (rc < 0)
        return ckpy_raise(rc, &err);
    return Py_BuildValue("{s:K,s:K,s:d,s:d,s:O}", "tensor_bytes",
                         (unsigned long long)st.tensor_bytes, "file_bytes",
                         (unsigned long long)st.file_bytes, "write_seconds", st.write_seconds,
                         "total_seconds", st.total_seconds, "direct",
                         st.direct ? Py_True : Py_False);
}

/* abort(): frees the save and removes what it wrote. */
static PyObject *save_abort(save_obj *self, PyObject *unused)
{
    save_release(self);
    Py_RETURN_NONE;
}

static PyMethodDef save_methods[] = {
    {"box", (PyCFunction)save_box, METH_VARARGS, "box(tensor, index, address)"},
    {"box_from_file", (PyCFunction)save_box_from_file, METH_VARARGS,
     "box_from_file(tensor, index, path, offset)"},
    {"blob", (PyCFunction)save_blob, METH_VARARGS, "blob(name, bytes)"},
    {"commit", (PyCFunction)save_commit, METH_NOARGS, "commit() -> stats"},
    {"abort", (PyCFunction)save_abort, METH_NOARGS, "abort()"},
    {NULL, NULL, 0, NULL},
};

PyTypeObject ckpy_save_type = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "libshard._ck.Save",
    .tp_doc = "Save(root, name, step, decl, hash=True): a whole save in this process of the "
              "tensors a Decl declares.",
    .tp_basicsize = sizeof(save_obj),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)save_init,
    .tp_dealloc = (destructor)save_dealloc,
    .tp_methods = save_methods,
};
