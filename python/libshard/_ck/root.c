/* root.c - module functions about a checkpoint root and the format's vocabulary. */
#include "ck/catalog.h"
#include "ckpy.h"

static PyObject *str_list(char **v, size_t n)
{
    PyObject *list = PyList_New((Py_ssize_t)n);
    for (size_t i = 0; list && i < n; i++) {
        PyObject *s = PyUnicode_DecodeFSDefault(v[i]);
        if (!s) {
            Py_CLEAR(list);
            break;
        }
        PyList_SET_ITEM(list, (Py_ssize_t)i, s);
    }
    return list;
}

/* scan(root) -> (committed names, pending entries): the directories, which are the
 * truth (the catalog is derived state). */
PyObject *ckpy_scan(PyObject *self, PyObject *args)
{
    const char *root;
    if (!PyArg_ParseTuple(args, "s", &root))
        return NULL;
    ck_scan sc;
    ck_err err = {0};
    int rc;
    Py_BEGIN_ALLOW_THREADS
    rc = ck_root_scan(root, &sc, &err);
    Py_END_ALLOW_THREADS
    if (rc < 0)
        return ckpy_raise(rc, &err);
    PyObject *res = Py_BuildValue("(NN)", str_list(sc.committed, sc.n_committed),
                                  str_list(sc.pending, sc.n_pending));
    ck_scan_free(&sc);
    return res;
}

PyObject *ckpy_dtype_name(PyObject *self, PyObject *args)
{
    int code;
    if (!PyArg_ParseTuple(args, "i", &code))
        return NULL;
    const char *name = ck_dtype_name(code);
    if (!name)
        Py_RETURN_NONE;
    return PyUnicode_FromString(name);
}

/* dtypes() -> [(code, name, itemsize, torch name)]: the core's dtype table. */
PyObject *ckpy_dtypes(PyObject *self, PyObject *args)
{
    PyObject *list = PyList_New(0);
    for (int d = 1; list && d <= CK_DTYPE_MAX; d++) {
        const ck_dtype_info *i = ck_dtype_info_of(d);
        if (!i)
            continue;
        PyObject *row = Py_BuildValue("(isns)", (int)i->code, i->name, (Py_ssize_t)i->size,
                                      i->torch);
        if (!row || PyList_Append(list, row) < 0)
            Py_CLEAR(list);
        Py_XDECREF(row);
    }
    return list;
}

PyObject *ckpy_name_check(PyObject *self, PyObject *args)
{
    const char *what, *name;
    if (!PyArg_ParseTuple(args, "ss", &what, &name))
        return NULL;
    ck_err err = {0};
    int rc = ck_name_check(what, name, &err);
    if (rc < 0)
        return ckpy_raise(rc, &err);
    Py_RETURN_NONE;
}

PyObject *ckpy_key_encode(PyObject *self, PyObject *args)
{
    const char *key;
    Py_ssize_t len;
    if (!PyArg_ParseTuple(args, "s#", &key, &len))
        return NULL;
    char out[CK_NAME_MAX];
    int rc = ck_key_encode(key, (size_t)len, out, sizeof out);
    if (rc < 0) {
        ck_err err = {0};
        ck_err_set(&err, rc, "state-dict key '%.200s' (%zd bytes) cannot be a name on disk%s",
                   key, len, rc == -ENAMETOOLONG ? ": escaped, it exceeds 255 bytes" : "");
        return ckpy_raise(rc, &err);
    }
    return PyUnicode_FromString(out);
}

PyObject *ckpy_key_decode(PyObject *self, PyObject *args)
{
    const char *name;
    if (!PyArg_ParseTuple(args, "s", &name))
        return NULL;
    char out[CK_NAME_MAX];
    size_t len = 0;
    int rc = ck_key_decode(name, out, sizeof out, &len);
    if (rc < 0) {
        ck_err err = {0};
        ck_err_set(&err, rc, "name '%s' has a malformed escape", name);
        return ckpy_raise(rc, &err);
    }
    return PyUnicode_DecodeUTF8(out, (Py_ssize_t)len, "surrogateescape");
}

/* remove(root, name): the core's crash-safe removal of a committed checkpoint. */
PyObject *ckpy_remove(PyObject *self, PyObject *args)
{
    const char *root, *name;
    if (!PyArg_ParseTuple(args, "ss", &root, &name))
        return NULL;
    ck_err err = {0};
    int rc;
    Py_BEGIN_ALLOW_THREADS
    rc = ck_root_remove(root, name, NULL, &err);
    Py_END_ALLOW_THREADS
    if (rc < 0)
        return ckpy_raise(rc, &err);
    Py_RETURN_NONE;
}

/* root_make(root): the root made if missing; anything but a directory there is refused
 * (ck_root_make). */
PyObject *ckpy_root_make(PyObject *self, PyObject *args)
{
    const char *root;
    if (!PyArg_ParseTuple(args, "s", &root))
        return NULL;
    ck_err err = {0};
    int rc;
    Py_BEGIN_ALLOW_THREADS
    rc = ck_root_make(root, &err);
    Py_END_ALLOW_THREADS
    if (rc < 0)
        return ckpy_raise(rc, &err);
    Py_RETURN_NONE;
}

/* recover(root) -> removed: what dead writers left under .pending, and dead engines'
 * heartbeats, go; the catalog is reconciled (ck_root_recover: live writers' saves are
 * kept). */
PyObject *ckpy_recover(PyObject *self, PyObject *args)
{
    const char *root;
    if (!PyArg_ParseTuple(args, "s", &root))
        return NULL;
    ck_err err = {0};
    size_t removed = 0;
    int rc;
    Py_BEGIN_ALLOW_THREADS
    rc = ck_root_recover(root, &removed, NULL, NULL, &err);
    Py_END_ALLOW_THREADS
    if (rc < 0)
        return ckpy_raise(rc, &err);
    return PyLong_FromSize_t(removed);
}

/* name_state(root, name) -> (state, who): state is "committed", "busy" (a live process
 * saves or removes it; who names it), "debris" (a dead writer's leftovers only) or
 * "free". */
PyObject *ckpy_name_state(PyObject *self, PyObject *args)
{
    const char *root, *name;
    if (!PyArg_ParseTuple(args, "ss", &root, &name))
        return NULL;
    static const char *const states[] = {
        [CK_NAME_FREE] = "free", [CK_NAME_BUSY] = "busy", [CK_NAME_DEBRIS] = "debris",
        [CK_NAME_COMMITTED] = "committed",
    };
    char who[256];
    ck_err err = {0};
    int rc;
    Py_BEGIN_ALLOW_THREADS
    rc = ck_name_probe(root, name, who, sizeof who, &err);
    Py_END_ALLOW_THREADS
    if (rc < 0)
        return ckpy_raise(rc, &err);
    if (rc != CK_NAME_BUSY)
        return Py_BuildValue("(sO)", states[rc], Py_None);
    return Py_BuildValue("(ss)", states[rc], who);
}

/* path_kind(path) -> "checkpoint", "root" or None. */
PyObject *ckpy_path_kind(PyObject *self, PyObject *args)
{
    PyObject *p;
    if (!PyArg_ParseTuple(args, "O&", PyUnicode_FSConverter, &p))
        return NULL;
    ck_path_kind k;
    Py_BEGIN_ALLOW_THREADS
    k = ck_path_kind_of(PyBytes_AS_STRING(p));
    Py_END_ALLOW_THREADS
    Py_DECREF(p);
    if (k == CK_PATH_CHECKPOINT)
        return PyUnicode_FromString("checkpoint");
    if (k == CK_PATH_ROOT)
        return PyUnicode_FromString("root");
    Py_RETURN_NONE;
}
