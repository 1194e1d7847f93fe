/* declare.c - libshard._ck.Decl, a save's declaration (ck/decl.h), and the calls that
 * Save (a whole save) and ClientSave (a rank's part) share: offering a box, adding a
 * blob, each type passing its handle and an adapter to its core function.
 *
 * A Decl is built in one call from the whole table of box-list tensors (CkptWriter's,
 * the importer's) and sealed: its plan is made once, and every save of the same
 * structure takes the same Decl without a crossing per tensor. */
#include "ckpy.h"

#include <stdlib.h>

typedef struct {
    PyObject_HEAD
    ck_decl *d;
} decl_obj;

static PyObject *closed(void)
{
    PyErr_SetString(PyExc_ValueError, "the save is already committed, aborted or closed");
    return NULL;
}

/* One row of the table: (name, dtype code, shape, [(offsets, lengths)], [writer]). */
static int declare_row(ck_decl *d, PyObject *row, ck_err *err)
{
    const char *name;
    int dtype;
    ckpy_u64s shape;
    PyObject *boxes, *writers;
    if (!PyArg_ParseTuple(row, "siO&OO", &name, &dtype, ckpy_u64_tuple, &shape, &boxes,
                          &writers))
        return -1;
    uint32_t n;
    ck_box *bx;
    uint64_t *wr;
    if (ckpy_box_list(boxes, writers, &n, &bx, &wr) < 0)
        return -1;
    int rc = ck_decl_tensor_boxes(d, name, (ck_dtype)dtype, shape.n, shape.v, n, bx, wr, err);
    free(bx);
    free(wr);
    if (rc < 0) {
        ckpy_raise(rc, err);
        return -1;
    }
    return 0;
}

static int decl_init(decl_obj *self, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"world", "tensors", NULL};
    unsigned long long world;
    PyObject *table;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "KO", kwlist, &world, &table))
        return -1;
    if (self->d) {
        PyErr_SetString(PyExc_RuntimeError, "Decl is already declared");
        return -1;
    }
    ckpy_u64s sizes = {.n = 1, .v = {world}};
    ck_mesh mesh;
    if (ckpy_mesh(&sizes, &mesh) < 0)
        return -1;
    PyObject *seq = PySequence_Fast(table, "Decl: a sequence of tensors");
    if (!seq)
        return -1;
    ck_err err = {0};
    int rc = ck_decl_new(&self->d, &mesh, &err);
    if (rc < 0) {
        Py_DECREF(seq);
        ckpy_raise(rc, &err);
        return -1;
    }
    for (Py_ssize_t i = 0; i < PySequence_Fast_GET_SIZE(seq) && rc == 0; i++)
        rc = declare_row(self->d, PySequence_Fast_GET_ITEM(seq, i), &err);
    Py_DECREF(seq);
    if (rc == 0) {
        Py_BEGIN_ALLOW_THREADS
        rc = ck_decl_seal(self->d, &err);
        Py_END_ALLOW_THREADS
        if (rc < 0)
            ckpy_raise(rc, &err);
    }
    if (rc < 0) {
        ck_decl_free(self->d);
        self->d = NULL;
        return -1;
    }
    return 0;
}

static void decl_dealloc(decl_obj *self)
{
    ck_decl_free(self->d);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

ck_decl *ckpy_decl_of(PyObject *o)
{
    if (!PyObject_TypeCheck(o, &ckpy_decl_type) || !((decl_obj *)o)->d) {
        PyErr_SetString(PyExc_TypeError, "expected a libshard._ck.Decl");
        return NULL;
    }
    return ((decl_obj *)o)->d;
}

/* file_bytes(rank) and writes(rank): a part's image size and its number of sources. */
static PyObject *decl_file_bytes(decl_obj *self, PyObject *args)
{
    unsigned long long rank;
    if (!PyArg_ParseTuple(args, "K", &rank) || !ckpy_decl_of((PyObject *)self))
        return NULL;
    return PyLong_FromUnsignedLongLong(ck_decl_file_bytes(self->d, rank));
}

static PyObject *decl_writes(decl_obj *self, PyObject *args)
{
    unsigned long long rank;
    if (!PyArg_ParseTuple(args, "K", &rank) || !ckpy_decl_of((PyObject *)self))
        return NULL;
    return PyLong_FromUnsignedLong(ck_decl_writes(self->d, rank));
}

static PyMethodDef decl_methods[] = {
    {"file_bytes", (PyCFunction)decl_file_bytes, METH_VARARGS,
     "file_bytes(rank) -> the bytes of rank's data file (its staging image)."},
    {"writes", (PyCFunction)decl_writes, METH_VARARGS,
     "writes(rank) -> how many boxes rank writes: the sources of its submit."},
    {NULL, NULL, 0, NULL},
};

PyTypeObject ckpy_decl_type = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "libshard._ck.Decl",
    .tp_doc = "Decl(world, tensors): a save's box-list tensors over a 1-D mesh of world "
              "ranks, [(name, dtype code, shape, [(offsets, lengths)], [writer])], sealed "
              "(its plan made) at once.",
    .tp_basicsize = sizeof(decl_obj),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)decl_init,
    .tp_dealloc = (destructor)decl_dealloc,
    .tp_methods = decl_methods,
};

PyObject *ckpy_call_box(PyObject *args, void *h, ckpy_box_fn fn)
{
    const char *name;
    unsigned int idx;
    void *data;
    if (!PyArg_ParseTuple(args, "sIO&", &name, &idx, ckpy_addr, &data))
        return NULL;
    if (!h)
        return closed();
    ck_err err = {0};
    int rc;
    Py_BEGIN_ALLOW_THREADS
    rc = fn(h, name, idx, data, &err);
    Py_END_ALLOW_THREADS
    if (rc < 0)
        return ckpy_raise(rc, &err);
    Py_RETURN_NONE;
}

PyObject *ckpy_call_blob(PyObject *args, void *h, ckpy_blob_fn fn)
{
    const char *name;
    Py_buffer b;
    if (!PyArg_ParseTuple(args, "sy*", &name, &b))
        return NULL;
    if (!h) {
        PyBuffer_Release(&b);
        return closed();
    }
    ck_err err = {0};
    int rc;
    Py_BEGIN_ALLOW_THREADS
    rc = fn(h, name, b.buf, (size_t)b.len, &err);
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&b);
    if (rc < 0)
        return ckpy_raise(rc, &err);
    Py_RETURN_NONE;
}
