/* declare.c - the calls that Save (embedded engine) and ClientSave (ckptd or embedded
 * client) share: declaring a box-list tensor, offering a box, adding a blob. Each type
 * passes its handle and an adapter to its core function; the parsing is here once.
 * The calls run without the GIL: through ckptd a declaration may wait on the socket. */
#include "ckpy.h"

#include <stdlib.h>

static PyObject *closed(void)
{
    PyErr_SetString(PyExc_ValueError, "the save is already committed, aborted or closed");
    return NULL;
}

PyObject *ckpy_call_tensor_boxes(PyObject *args, void *h, ckpy_tensor_boxes_fn fn)
{
    const char *name;
    int dtype;
    ckpy_u64s shape;
    PyObject *boxes, *writers;
    if (!PyArg_ParseTuple(args, "siO&OO", &name, &dtype, ckpy_u64_tuple, &shape, &boxes,
                          &writers))
        return NULL;
    if (!h)
        return closed();
    uint32_t n;
    ck_box *bx;
    uint64_t *wr;
    if (ckpy_box_list(boxes, writers, &n, &bx, &wr) < 0)
        return NULL;
    ck_err err = {0};
    int rc;
    Py_BEGIN_ALLOW_THREADS
    rc = fn(h, name, (ck_dtype)dtype, shape.n, shape.v, n, bx, wr, &err);
    Py_END_ALLOW_THREADS
    free(bx);
    free(wr);
    if (rc < 0)
        return ckpy_raise(rc, &err);
    Py_RETURN_NONE;
}

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
