/* save.c - libshard._ck.Save: one checkpoint save of the embedded engine (ck/save.h).
 *
 * Two uses. A process that holds every rank's data (ckpt-import-dcp) declares the
 * tensors, offers boxes (from memory, or straight from a file range) and commits. The
 * ranks of a DCP save, each a process, use the part records: rank 0 shares the pending
 * directory (share -> token), the others join it, each stages its file image (the one
 * copy: stage_rank), writes it durably (write_rank) and returns its part record
 * (part), and rank 0 adopts every record and commits.
 *
 * Memory offered with box() is the caller's and must stay alive until the box's rank is
 * staged or written; the image of stage_rank belongs to this object.
 */
#include "ckpy.h"

#include <fcntl.h>
#include <stdlib.h>
#include <sys/mman.h>
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
    void *image;                /* stage_rank's file image, mmap'd */
    size_t image_len;
    file_src *files;            /* box_from_file sources, closed at the end */
} save_obj;

static void drop_image(save_obj *self)
{
    if (self->image)
        munmap(self->image, self->image_len);
    self->image = NULL;
    self->image_len = 0;
}

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
    drop_image(self);
    drop_files(self);
}

static int save_init(save_obj *self, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"root", "name", "step", "world", "hash", NULL};
    const char *root, *name;
    unsigned long long step, world;
    int hash = 1;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "ssKK|p", kwlist, &root, &name, &step, &world,
                                     &hash))
        return -1;
    save_release(self);
    ckpy_u64s sizes = {.n = 1, .v = {world}};
    ck_mesh mesh;
    if (ckpy_mesh(&sizes, &mesh) < 0)
        return -1;
    ck_save_opts opts = {.no_hash = !hash, .fill_threadsafe = true};
    ck_err err = {0};
    int rc;
    Py_BEGIN_ALLOW_THREADS
    rc = ck_save_begin(&self->s, root, name, step, &mesh, &opts, &err);
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

static int tensor_boxes_fn(void *h, const char *name, ck_dtype dtype, int ndim,
                           const uint64_t *shape, uint32_t n, const ck_box *boxes,
                           const uint64_t *writers, ck_err *err)
{
    return ck_save_tensor_boxes(h, name, dtype, ndim, shape, n, boxes, writers, err);
}

static int box_fn(void *h, const char *tensor, uint32_t box, const void *data, ck_err *err)
{
    return ck_save_box(h, tensor, box, data, err);
}

static int blob_fn(void *h, const char *name, const void *data, size_t len, ck_err *err)
{
    return ck_save_blob(h, name, data, len, err);
}

static PyObject *save_tensor_boxes(save_obj *self, PyObject *args)
{
    return ckpy_call_tensor_boxes(args, self->s, tensor_boxes_fn);
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

static PyObject *save_writes(save_obj *self, PyObject *args)
{
    const char *name;
    unsigned long long rank;
    if (!PyArg_ParseTuple(args, "sK", &name, &rank) || live(self) < 0)
        return NULL;
    return PyBool_FromLong(ck_save_writes(self->s, name, rank));
}

static PyObject *save_share(save_obj *self, PyObject *unused)
{
    if (live(self) < 0)
        return NULL;
    char token[CK_TOKEN_MAX];
    ck_err err = {0};
    int rc;
    Py_BEGIN_ALLOW_THREADS
    rc = ck_save_share(self->s, token, &err);
    Py_END_ALLOW_THREADS
    if (rc < 0)
        return ckpy_raise(rc, &err);
    return PyUnicode_FromString(token);
}

static PyObject *save_join(save_obj *self, PyObject *args)
{
    const char *token;
    unsigned long long rank;
    if (!PyArg_ParseTuple(args, "sK", &token, &rank) || live(self) < 0)
        return NULL;
    ck_err err = {0};
    int rc;
    Py_BEGIN_ALLOW_THREADS
    rc = ck_save_join(self->s, token, rank, &err);
    Py_END_ALLOW_THREADS
    if (rc < 0)
        return ckpy_raise(rc, &err);
    Py_RETURN_NONE;
}

/* stage_rank(rank): copies the boxes offered for rank into its file image, the only
 * copy of the data; the offered memory is free again when it returns. */
static PyObject *save_stage_rank(save_obj *self, PyObject *args)
{
    unsigned long long rank;
    if (!PyArg_ParseTuple(args, "K", &rank) || live(self) < 0)
        return NULL;
    drop_image(self);
    size_t len = ck_save_rank_bytes(self->s, rank);
    ck_err err = {0};
    int rc = 0;
    Py_BEGIN_ALLOW_THREADS
    if (len) {
        void *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (p == MAP_FAILED)
            rc = ck_err_set(&err, -errno, "rank %llu: mapping a %zu-byte file image",
                            rank, len);
        else {
            self->image = p;
            self->image_len = len;
        }
    }
    if (rc == 0 && len)
        rc = ck_save_copy_rank(self->s, rank, self->image, &err);
    Py_END_ALLOW_THREADS
    if (rc < 0)
        return ckpy_raise(rc, &err);
    Py_RETURN_NONE;
}

static PyObject *save_write_rank(save_obj *self, PyObject *args)
{
    unsigned long long rank;
    if (!PyArg_ParseTuple(args, "K", &rank) || live(self) < 0)
        return NULL;
    ck_err err = {0};
    int rc;
    Py_BEGIN_ALLOW_THREADS
    rc = ck_save_write_rank(self->s, rank, &err);
    Py_END_ALLOW_THREADS
    drop_image(self);
    if (rc < 0)
        return ckpy_raise(rc, &err);
    Py_RETURN_NONE;
}

/* part(rank, failure=None) -> bytes: this rank's part record; failure is the message
 * of what failed this rank's write, if anything did. */
static PyObject *save_part(save_obj *self, PyObject *args)
{
    unsigned long long rank;
    const char *failure = NULL;
    if (!PyArg_ParseTuple(args, "K|z", &rank, &failure) || live(self) < 0)
        return NULL;
    ck_err outcome = {0};
    if (failure)
        ck_err_set(&outcome, -EIO, "%s", failure);
    void *rec = NULL;
    size_t len = 0;
    ck_err err = {0};
    int rc = ck_save_part(self->s, rank, &outcome, &rec, &len, &err);
    if (rc < 0)
        return ckpy_raise(rc, &err);
    PyObject *b = PyBytes_FromStringAndSize(rec, (Py_ssize_t)len);
    free(rec);
    return b;
}

static PyObject *save_adopt(save_obj *self, PyObject *args)
{
    Py_buffer b;
    if (!PyArg_ParseTuple(args, "y*", &b))
        return NULL;
    ck_err err = {0};
    int rc = live(self) < 0 ? -EINVAL : ck_save_adopt(self->s, b.buf, (size_t)b.len, &err);
    PyBuffer_Release(&b);
    if (rc < 0)
        return PyErr_Occurred() ? NULL : ckpy_raise(rc, &err);
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
    drop_image(self);
    drop_files(self);
    if (rc < 0)
        return ckpy_raise(rc, &err);
    return Py_BuildValue("{s:K,s:K,s:d,s:d,s:O}", "tensor_bytes",
                         (unsigned long long)st.tensor_bytes, "file_bytes",
                         (unsigned long long)st.file_bytes, "write_seconds", st.write_seconds,
                         "total_seconds", st.total_seconds, "direct",
                         st.direct ? Py_True : Py_False);
}

/* abort(): frees the save; a shared one leaves its directory as .pending debris. */
static PyObject *save_abort(save_obj *self, PyObject *unused)
{
    save_release(self);
    Py_RETURN_NONE;
}

static PyMethodDef save_methods[] = {
    {"tensor_boxes", (PyCFunction)save_tensor_boxes, METH_VARARGS,
     "tensor_boxes(name, dtype code, shape, [(offsets, lengths)], [writer rank])"},
    {"box", (PyCFunction)save_box, METH_VARARGS, "box(tensor, index, address)"},
    {"box_from_file", (PyCFunction)save_box_from_file, METH_VARARGS,
     "box_from_file(tensor, index, path, offset)"},
    {"blob", (PyCFunction)save_blob, METH_VARARGS, "blob(name, bytes)"},
    {"writes", (PyCFunction)save_writes, METH_VARARGS, "writes(tensor, rank) -> bool"},
    {"share", (PyCFunction)save_share, METH_NOARGS, "share() -> token (rank 0)"},
    {"join", (PyCFunction)save_join, METH_VARARGS, "join(token, rank)"},
    {"stage_rank", (PyCFunction)save_stage_rank, METH_VARARGS, "stage_rank(rank)"},
    {"write_rank", (PyCFunction)save_write_rank, METH_VARARGS, "write_rank(rank)"},
    {"part", (PyCFunction)save_part, METH_VARARGS, "part(rank, failure=None) -> bytes"},
    {"adopt", (PyCFunction)save_adopt, METH_VARARGS, "adopt(part record)"},
    {"commit", (PyCFunction)save_commit, METH_NOARGS, "commit() -> stats"},
    {"abort", (PyCFunction)save_abort, METH_NOARGS, "abort()"},
    {NULL, NULL, 0, NULL},
};

PyTypeObject ckpy_save_type = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "libshard._ck.Save",
    .tp_doc = "Save(root, name, step, world, hash=True): a save of the embedded engine.",
    .tp_basicsize = sizeof(save_obj),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)save_init,
    .tp_dealloc = (destructor)save_dealloc,
    .tp_methods = save_methods,
};
