/* convert.c - errors and argument conversions shared by the extension's objects. */
#include "ckpy.h"

#include <stdlib.h>

PyObject *ckpy_error;

PyObject *ckpy_raise(int rc, const ck_err *err)
{
    const char *msg = err && err->msg[0] ? err->msg : strerror(-rc);
    PyObject *args = Py_BuildValue("(is)", -rc, msg);
    if (args) {
        PyErr_SetObject(ckpy_error, args);
        Py_DECREF(args);
    }
    return NULL;
}

int ckpy_u64_tuple(PyObject *o, void *out)
{
    ckpy_u64s *u = out;
    PyObject *seq = PySequence_Fast(o, "expected a sequence of ints");
    if (!seq)
        return 0;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
    if (n > CK_MAX_NDIM) {
        Py_DECREF(seq);
        PyErr_Format(PyExc_ValueError, "%zd dims, at most %d", n, CK_MAX_NDIM);
        return 0;
    }
    u->n = (int)n;
    for (Py_ssize_t i = 0; i < n; i++) {
        unsigned long long x = PyLong_AsUnsignedLongLong(PySequence_Fast_GET_ITEM(seq, i));
        if (x == (unsigned long long)-1 && PyErr_Occurred()) {
            Py_DECREF(seq);
            return 0;
        }
        u->v[i] = x;
    }
    Py_DECREF(seq);
    return 1;
}

int ckpy_box(const ckpy_u64s *off, const ckpy_u64s *len, ck_box *out)
{
    if (off->n != len->n) {
        PyErr_Format(PyExc_ValueError, "box offsets have %d dims, lengths %d", off->n, len->n);
        return -1;
    }
    memset(out, 0, sizeof *out);
    out->ndim = off->n;
    for (int i = 0; i < off->n; i++) {
        out->off[i] = off->v[i];
        out->len[i] = len->v[i];
    }
    return 0;
}

int ckpy_mesh(const ckpy_u64s *sizes, ck_mesh *out)
{
    memset(out, 0, sizeof *out);
    if (sizes->n < 1 || sizes->n > CK_MAX_MESH_DIMS) {
        PyErr_Format(PyExc_ValueError, "a mesh has 1 to %d dims, not %d", CK_MAX_MESH_DIMS,
                     sizes->n);
        return -1;
    }
    out->ndim = sizes->n;
    for (int i = 0; i < sizes->n; i++) {
        if (sizes->v[i] < 1 || sizes->v[i] > CK_MAX_WORLD) {
            PyErr_Format(PyExc_ValueError, "mesh dim %d has size %llu", i,
                         (unsigned long long)sizes->v[i]);
            return -1;
        }
        out->size[i] = (uint32_t)sizes->v[i];
    }
    return 0;
}

PyObject *ckpy_tuple_u64(const uint64_t *v, int n)
{
    PyObject *t = PyTuple_New(n);
    if (!t)
        return NULL;
    for (int i = 0; i < n; i++) {
        PyObject *x = PyLong_FromUnsignedLongLong(v[i]);
        if (!x) {
            Py_DECREF(t);
            return NULL;
        }
        PyTuple_SET_ITEM(t, i, x);
    }
    return t;
}

int ckpy_addr(PyObject *o, void *out)
{
    void **p = out;
    *p = PyLong_AsVoidPtr(o);
    return !(*p == NULL && PyErr_Occurred());
}

int ckpy_box_list(PyObject *boxes, PyObject *writers, uint32_t *n, ck_box **out,
                  uint64_t **wr)
{
    *out = NULL;
    *wr = NULL;
    PyObject *bs = PySequence_Fast(boxes, "boxes: expected a sequence of (offsets, lengths)");
    if (!bs)
        return -1;
    PyObject *ws = PySequence_Fast(writers, "writers: expected a sequence of ranks");
    if (!ws) {
        Py_DECREF(bs);
        return -1;
    }
    Py_ssize_t nb = PySequence_Fast_GET_SIZE(bs);
    int rc = -1;
    if (nb != PySequence_Fast_GET_SIZE(ws) || nb > CK_MAX_BOXES) {
        PyErr_Format(PyExc_ValueError, "%zd boxes with %zd writers (at most %u boxes)", nb,
                     PySequence_Fast_GET_SIZE(ws), (unsigned)CK_MAX_BOXES);
        goto out;
    }
    *out = calloc(nb ? (size_t)nb : 1, sizeof **out);
    *wr = calloc(nb ? (size_t)nb : 1, sizeof **wr);
    if (!*out || !*wr) {
        PyErr_NoMemory();
        goto out;
    }
    for (Py_ssize_t i = 0; i < nb; i++) {
        ckpy_u64s off, len;
        if (!PyArg_ParseTuple(PySequence_Fast_GET_ITEM(bs, i), "O&O&", ckpy_u64_tuple, &off,
                              ckpy_u64_tuple, &len) ||
            ckpy_box(&off, &len, &(*out)[i]) < 0)
            goto out;
        (*wr)[i] = PyLong_AsUnsignedLongLong(PySequence_Fast_GET_ITEM(ws, i));
        if (PyErr_Occurred())
            goto out;
    }
    *n = (uint32_t)nb;
    rc = 0;
out:
    if (rc < 0) {
        free(*out);
        free(*wr);
        *out = NULL;
        *wr = NULL;
    }
    Py_DECREF(bs);
    Py_DECREF(ws);
    return rc;
}
