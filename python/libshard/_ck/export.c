/* export.c - export_hf: a checkpoint's model as Hugging Face safetensors, through the
 * export library's streaming consolidation (export/safetensors.h), with the GIL
 * released while it reads and writes. */
#include "export/names.h"
#include "export/safetensors.h"
#include "ckpy.h"

/* A ck_rename_fn over a Python callable key -> str or None. The export calls it on
 * the thread that released the GIL, before any worker starts, so taking the GIL
 * back here is safe; an exception it raises stays set and export_hf raises it. */
static int call_rename(void *arg, const char *key, char *out, size_t len, ck_err *err)
{
    PyGILState_STATE g = PyGILState_Ensure();
    PyObject *r = PyObject_CallFunction((PyObject *)arg, "s", key);
    int rc = 1;
    Py_ssize_t n = 0;
    const char *s = r && r != Py_None && PyUnicode_Check(r) ? PyUnicode_AsUTF8AndSize(r, &n)
                                                             : NULL;
    if (!r || (r != Py_None && !PyUnicode_Check(r)) || (r != Py_None && !s)) {
        if (r && !PyErr_Occurred())
            PyErr_Format(PyExc_TypeError, "key_map(%R) returned %R, not a str or None", r, r);
        rc = ck_err_set(err, -EINVAL, "key_map failed on %s", key);
    } else if (r == Py_None) {
        rc = 0;
    } else if (n == 0 || (size_t)n >= len || strlen(s) != (size_t)n) {
        rc = ck_err_set(err, -EINVAL, "key_map renamed %s to an empty key, one longer than "
                        "%zu bytes, or one with a NUL", key, len - 1);
    } else {
        memcpy(out, s, (size_t)n + 1);
    }
    Py_XDECREF(r);
    PyGILState_Release(g);
    return rc;
}

/* int bytes, or a size string ("2GB", "500MiB"); 0 when None. */
static int size_arg(PyObject *o, uint64_t *out, ck_err *err)
{
    *out = 0;
    if (o == Py_None)
        return 0;
    if (PyUnicode_Check(o))
        return ck_size_parse(PyUnicode_AsUTF8(o), out, err);
    unsigned long long v = PyLong_AsUnsignedLongLong(o);
    if (PyErr_Occurred())
        return -1;
    *out = v;
    return 0;
}

/* export_hf(root, name, out_dir, prefix=None, key_map=None, rename=None, dtype=None,
 *           max_shard_size=None, mem_limit=None) -> dict */
PyObject *ckpy_export_hf(PyObject *self, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = { "root", "name", "out_dir", "prefix", "key_map", "rename", "dtype",
                              "max_shard_size", "mem_limit", NULL };
    const char *root, *name, *dir, *prefix = NULL, *map_json = NULL, *dtype = NULL;
    Py_ssize_t map_len = 0;
    PyObject *rename = Py_None, *max_size = Py_None, *mem = Py_None;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "sss|zz#OzOO", kwlist, &root, &name, &dir, &prefix,
                                     &map_json, &map_len, &rename, &dtype, &max_size, &mem))
        return NULL;
    if (rename != Py_None && !PyCallable_Check(rename))
        return PyErr_Format(PyExc_TypeError, "rename must be callable, not %R", rename);
    if (rename != Py_None && map_json)
        return PyErr_Format(PyExc_TypeError, "a key_map or a rename callable, not both");
    ck_consolidate_opts o = { .dir = dir };
    ck_err err = { 0 };
    int rc = 0;
    if (dtype && strcmp(dtype, "keep") != 0)
        rc = ck_dtype_parse(dtype, &o.dtype, &err);
    if (rc == 0)
        rc = size_arg(max_size, &o.max_shard_size, &err);
    if (rc == 0)
        rc = size_arg(mem, &o.mem_limit, &err);
    if (rc == -1 && PyErr_Occurred())
        return NULL;
    if (rc < 0)
        return ckpy_raise(rc, &err);
    ck_key_map *map = NULL;
    ck_ckpt *ck = NULL;
    char found[CK_NAME_MAX] = "";
    ck_consolidate_stats st = { 0 };
    Py_BEGIN_ALLOW_THREADS
    if (map_json)
        rc = ck_key_map_parse(map_json, (size_t)map_len, "key_map", &map, &err);
    if (rc == 0)
        rc = ck_open(root, name, &ck, &err);
    if (rc == 0 && !prefix && (rc = ck_export_model_prefix(ck, found, sizeof found, &err)) == 0)
        prefix = found;
    o.prefix = prefix;
    if (map) {
        o.rename = ck_key_map_rename;
        o.rename_arg = map;
    } else if (rename != Py_None) {
        o.rename = call_rename;
        o.rename_arg = rename;
    }
    if (rc == 0)
        rc = ck_consolidate(ck, &o, &st, &err);
    if (ck)
        ck_close(ck);
    ck_key_map_free(map);
    Py_END_ALLOW_THREADS
    if (rc < 0 && PyErr_Occurred())
        return NULL;            /* the key_map callable's own exception */
    if (rc < 0)
        return ckpy_raise(rc, &err);
    return Py_BuildValue("{s:s, s:K, s:K, s:K, s:O, s:d, s:s}", "dir", dir,
                         "tensors", (unsigned long long)st.tensors,
                         "files", (unsigned long long)st.files,
                         "bytes", (unsigned long long)st.bytes,
                         "sharded", st.sharded ? Py_True : Py_False,
                         "seconds", st.seconds, "prefix", prefix);
}
