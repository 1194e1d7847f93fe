/* root.c - module functions about a checkpoint root and the format's vocabulary. */
#include "ck/catalog.h"
#include "ck/steps.h"
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

/* dtype_convert(data, from, to) -> bytes: the elements of data (bytes of dtype code
 * from) converted by value into dtype code to, as a load into another dtype does. */
PyObject *ckpy_dtype_convert(PyObject *self, PyObject *args)
{
    Py_buffer in;
    int from, to;
    if (!PyArg_ParseTuple(args, "y*ii", &in, &from, &to))
        return NULL;
    size_t fs = ck_dtype_size(from), ts = ck_dtype_size(to);
    ck_err err = {0};
    int rc = ck_dtype_convertible(from, to, &err);
    if (rc == 0 && (size_t)in.len % fs != 0)
        rc = ck_err_set(&err, -EINVAL, "%zd bytes are not whole %s elements", in.len,
                        ck_dtype_name(from));
    PyObject *out = NULL;
    if (rc == 0) {
        size_t n = (size_t)in.len / fs;
        out = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)(n * ts));
        if (out) {
            rc = ck_dtype_convert(PyBytes_AS_STRING(out), to, in.buf, from, n, &err);
            if (rc < 0)
                Py_CLEAR(out);
        }
    }
    PyBuffer_Release(&in);
    if (rc < 0)
        return ckpy_raise(rc, &err);
    return out;
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

/* steps(root, prefix) -> [(step, name)]: a run's committed checkpoints (ck/steps.h). */
PyObject *ckpy_steps(PyObject *self, PyObject *args)
{
    const char *root, *prefix;
    if (!PyArg_ParseTuple(args, "ss", &root, &prefix))
        return NULL;
    ck_step_ckpt *v;
    size_t n;
    ck_err err = {0};
    int rc;
    Py_BEGIN_ALLOW_THREADS
    rc = ck_root_steps(root, prefix, &v, &n, &err);
    Py_END_ALLOW_THREADS
    if (rc < 0)
        return ckpy_raise(rc, &err);
    PyObject *list = PyList_New((Py_ssize_t)n);
    for (size_t i = 0; list && i < n; i++) {
        PyObject *row = Py_BuildValue("(Ks)", (unsigned long long)v[i].step, v[i].name);
        if (!row) {
            Py_CLEAR(list);
            break;
        }
        PyList_SET_ITEM(list, (Py_ssize_t)i, row);
    }
    free(v);
    return list;
}

/* newest_step(root, prefix) -> (name, step), or None when the run has none. */
PyObject *ckpy_newest_step(PyObject *self, PyObject *args)
{
    const char *root, *prefix;
    if (!PyArg_ParseTuple(args, "ss", &root, &prefix))
        return NULL;
    char name[CK_NAME_MAX];
    uint64_t step = 0;
    ck_err err = {0};
    int rc;
    Py_BEGIN_ALLOW_THREADS
    rc = ck_root_newest(root, prefix, name, &step, &err);
    Py_END_ALLOW_THREADS
    if (rc == -ENOENT)
        Py_RETURN_NONE;
    if (rc < 0)
        return ckpy_raise(rc, &err);
    return Py_BuildValue("(sK)", name, (unsigned long long)step);
}

/* The names a prune removed, gathered without the GIL. */
typedef struct removed_names {
    char (*name)[CK_NAME_MAX];
    size_t n, cap;
} removed_names;

static void note_removed(void *arg, const char *name)
{
    removed_names *r = arg;
    if (r->n == r->cap) {
        size_t cap = r->cap ? 2 * r->cap : 8;
        void *p = realloc(r->name, cap * sizeof *r->name);
        if (!p)
            return;     /* the removal happened; only its report is short */
        r->name = p;
        r->cap = cap;
    }
    snprintf(r->name[r->n++], CK_NAME_MAX, "%s", name);
}

/* prune(root, prefix, keep) -> [names removed], oldest first (ck_root_prune). */
PyObject *ckpy_prune(PyObject *self, PyObject *args)
{
    const char *root, *prefix;
    Py_ssize_t keep;
    if (!PyArg_ParseTuple(args, "ssn", &root, &prefix, &keep))
        return NULL;
    if (keep < 0) {
        PyErr_SetString(PyExc_ValueError, "prune: keep must not be negative");
        return NULL;
    }
    removed_names gone = {0};
    ck_err err = {0};
    int rc;
    Py_BEGIN_ALLOW_THREADS
    rc = ck_root_prune(root, prefix, (size_t)keep, NULL, note_removed, &gone, &err);
    Py_END_ALLOW_THREADS
    PyObject *list = rc < 0 ? ckpy_raise(rc, &err) : PyList_New((Py_ssize_t)gone.n);
    for (size_t i = 0; rc >= 0 && list && i < gone.n; i++) {
        PyObject *name = PyUnicode_DecodeFSDefault(gone.name[i]);
        if (!name) {
            Py_CLEAR(list);
            break;
        }
        PyList_SET_ITEM(list, (Py_ssize_t)i, name);
    }
    free(gone.name);
    return list;
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

/* file_bytes([nbytes]) -> the data file's bytes (ck_file_bytes): CkptWriter.reserve's
 * staging size, from the core's layout rather than its own. */
PyObject *ckpy_file_bytes(PyObject *self, PyObject *sizes)
{
    (void)self;
    PyObject *seq = PySequence_Fast(sizes, "file_bytes: a sequence of byte counts");
    if (!seq)
        return NULL;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
    uint64_t *v = PyMem_Malloc((size_t)(n ? n : 1) * sizeof *v);
    if (!v) {
        Py_DECREF(seq);
        return PyErr_NoMemory();
    }
    for (Py_ssize_t i = 0; i < n && !PyErr_Occurred(); i++)
        v[i] = PyLong_AsUnsignedLongLong(PySequence_Fast_GET_ITEM(seq, i));
    PyObject *out = PyErr_Occurred() ? NULL
                  : PyLong_FromUnsignedLongLong(ck_file_bytes(v, (size_t)n));
    PyMem_Free(v);
    Py_DECREF(seq);
    return out;
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
