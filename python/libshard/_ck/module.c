/* module.c - the module libshard._ck: its exception, types and functions. */
#include "ckpy.h"

static PyMethodDef module_methods[] = {
    {"scan", ckpy_scan, METH_VARARGS,
     "scan(root) -> (committed checkpoint names, entries of unfinished saves)."},
    {"dtype_name", ckpy_dtype_name, METH_VARARGS,
     "dtype_name(code) -> 'f32', 'bf16', ... or None for a code this build lacks."},
    {"dtypes", ckpy_dtypes, METH_NOARGS,
     "dtypes() -> [(code, name, itemsize, torch name)]: the format's dtype table."},
    {"dtype_convert", ckpy_dtype_convert, METH_VARARGS,
     "dtype_convert(data, from_code, to_code) -> bytes: elements converted by value."},
    {"key_encode", ckpy_key_encode, METH_VARARGS,
     "key_encode(key: str) -> the tensor or blob name on disk (percent escapes)."},
    {"key_decode", ckpy_key_decode, METH_VARARGS, "key_decode(name) -> the key."},
    {"root_make", ckpy_root_make, METH_VARARGS,
     "root_make(root): makes the root if missing; raises CkptError unless it is a directory."},
    {"recover", ckpy_recover, METH_VARARGS,
     "recover(root) -> removed: dead writers' debris and heartbeats go (live ones stay)."},
    {"remove", ckpy_remove, METH_VARARGS,
     "remove(root, name): removes a committed checkpoint, crash-safe at every step."},
    {"steps", ckpy_steps, METH_VARARGS,
     "steps(root, prefix) -> [(step, name)]: the committed PREFIX<digits>, oldest first."},
    {"newest_step", ckpy_newest_step, METH_VARARGS,
     "newest_step(root, prefix) -> (name, step) of the highest PREFIX<digits>, or None."},
    {"prune", ckpy_prune, METH_VARARGS,
     "prune(root, prefix, keep) -> [names removed]: keeps the keep newest PREFIX<digits>."},
    {"file_bytes", ckpy_file_bytes, METH_O,
     "file_bytes([nbytes]) -> the bytes of a data file (and of its staging image) that "
     "holds shards of those sizes, each where the save plan puts it."},
    {"name_state", ckpy_name_state, METH_VARARGS,
     "name_state(root, name) -> (state, who): 'committed', 'busy' (who: the live process "
     "saving or removing it), 'debris' or 'free'."},
    {"path_kind", ckpy_path_kind, METH_VARARGS,
     "path_kind(path) -> 'checkpoint', 'root' or None."},
    {"name_check", ckpy_name_check, METH_VARARGS,
     "name_check(what, name): raises CkptError unless name is a valid name on disk."},
    {"job_id_new", ckpy_job_id_new, METH_NOARGS,
     "job_id_new() -> a new job id (bytes): made once per job, shared by its ranks."},
    {"export_hf", (PyCFunction)(void (*)(void))ckpy_export_hf, METH_VARARGS | METH_KEYWORDS,
     "export_hf(root, name, out_dir, prefix=None, key_map=None, rename=None, dtype=None, "
     "max_shard_size=None, mem_limit=None) -> {dir, tensors, files, bytes, sharded, seconds, "
     "prefix}: the model's tensors (under prefix, found when None) as safetensors; key_map "
     "is the JSON text of a key map, rename a callable key -> str or None."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT,
    .m_name = "libshard._ck",
    .m_doc = "The libshard checkpoint core (C) for Python: reading, async saves, part records.",
    .m_size = -1,
    .m_methods = module_methods,
};

static int add_type(PyObject *m, PyTypeObject *t, const char *name)
{
    if (PyType_Ready(t) < 0)
        return -1;
    Py_INCREF(t);
    if (PyModule_AddObject(m, name, (PyObject *)t) < 0) {
        Py_DECREF(t);
        return -1;
    }
    return 0;
}

PyMODINIT_FUNC PyInit__ck(void);
PyMODINIT_FUNC PyInit__ck(void)
{
    PyObject *m = PyModule_Create(&module_def);
    if (!m)
        return NULL;
    ckpy_error = PyErr_NewExceptionWithDoc(
        "libshard.CkptError",
        "A checkpoint operation failed; errno is the core's error code, the message "
        "names the checkpoint, tensor, file or rank.",
        PyExc_OSError, NULL);
    if (!ckpy_error || PyModule_AddObjectRef(m, "CkptError", ckpy_error) < 0 ||
        add_type(m, &ckpy_ckpt_type, "Checkpoint") < 0 ||
        add_type(m, &ckpy_decl_type, "Decl") < 0 ||
        add_type(m, &ckpy_save_type, "Save") < 0 ||
        add_type(m, &ckpy_client_type, "Client") < 0 ||
        add_type(m, &ckpy_csave_type, "ClientSave") < 0 ||
        PyModule_AddIntConstant(m, "FORMAT_MAJOR", CK_FORMAT_MAJOR) < 0 ||
        PyModule_AddIntConstant(m, "FORMAT_MINOR", CK_FORMAT_MINOR) < 0 ||
        PyModule_AddIntConstant(m, "BLOB_MAX", CK_BLOB_MAX) < 0 ||
        PyModule_AddStringConstant(m, "VERSION", CKPY_VERSION) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
