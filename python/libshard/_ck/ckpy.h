/* ckpy.h - what the files of the extension libshard._ck share.
 *
 * The extension is a thin layer over the public headers of the core (ck/ckpt.h,
 * ck/load.h, ck/client.h, ...) and of the export library: objects own core handles,
 * every call that may block on I/O or on ckptd runs with the GIL released, and every
 * failure raises libshard.CkptError carrying the core's message (ck_err) and its
 * errno. Tensor bytes cross by address: callers pass (data_ptr, nbytes) of memory they
 * keep alive for the call, so nothing is copied at the Python level.
 */
#ifndef CKPY_H
#define CKPY_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include "ck/ckpt.h"
#include "ck/client.h"
#include "ck/decl.h"

/* libshard.CkptError, a subclass of OSError: errno is the core's code negated. */
extern PyObject *ckpy_error;

/* Raises CkptError from a failed call (rc < 0) and its err; returns NULL. */
PyObject *ckpy_raise(int rc, const ck_err *err);

/* Converters for PyArg_Parse "O&". */
int ckpy_u64_tuple(PyObject *o, void *out);   /* out: ckpy_u64s */
typedef struct ckpy_u64s {
    int n;
    uint64_t v[CK_MAX_NDIM];
} ckpy_u64s;

/* A box from offsets and lengths of the same length (<= CK_MAX_NDIM). 0 or -1 with a
 * Python exception set. */
int ckpy_box(const ckpy_u64s *off, const ckpy_u64s *len, ck_box *out);
/* A mesh from a tuple of sizes. */
int ckpy_mesh(const ckpy_u64s *sizes, ck_mesh *out);
/* A tuple of ints from n u64s. */
PyObject *ckpy_tuple_u64(const uint64_t *v, int n);
/* (address, nbytes) of caller memory as a pointer. */
int ckpy_addr(PyObject *o, void *out);

/* A box list: boxes, a sequence of (offsets, lengths), and writers, a sequence of
 * ranks, of the same length, into malloc'd arrays (free both). 0 or -1 with a Python
 * exception set. */
int ckpy_box_list(PyObject *boxes, PyObject *writers, uint32_t *n, ck_box **out,
                  uint64_t **wr);

/* declare.c: the Decl type (ckpy_decl_of: its declaration, or NULL with TypeError set),
 * and box(tensor, index, address), blob(name, bytes) over a handle h (NULL: closed) and
 * its core call. */
ck_decl *ckpy_decl_of(PyObject *o);
typedef int (*ckpy_box_fn)(void *h, const char *tensor, uint32_t box, const void *data,
                           ck_err *err);
typedef int (*ckpy_blob_fn)(void *h, const char *name, const void *data, size_t len,
                            ck_err *err);
PyObject *ckpy_call_box(PyObject *args, void *h, ckpy_box_fn fn);
PyObject *ckpy_call_blob(PyObject *args, void *h, ckpy_blob_fn fn);

/* cuda.c: the CUDA driver, opened at run time for a client that pins its staging. */
typedef struct ckpy_cuda ckpy_cuda;
int ckpy_cuda_open(int device, ckpy_cuda **out, ck_err *err);
void ckpy_cuda_close(ckpy_cuda *cu);
/* The ck_client_opts staging hooks: page-lock an area while it is mapped. */
int ckpy_cuda_pin(void *arg, void *base, size_t len);
void ckpy_cuda_unpin(void *arg, void *base, size_t len);
/* Queues a copy of len bytes from device address src into host memory dst on stream (a
 * cudaStream_t, as torch.cuda.Stream.cuda_stream), and waits until everything queued on
 * stream is done. */
int ckpy_cuda_copy(ckpy_cuda *cu, void *dst, uint64_t src, size_t len, void *stream,
                   ck_err *err);
int ckpy_cuda_stream_wait(ckpy_cuda *cu, void *stream, ck_err *err);

extern PyTypeObject ckpy_ckpt_type;     /* ckpt.c:   libshard._ck.Checkpoint */
extern PyTypeObject ckpy_decl_type;     /* declare.c: libshard._ck.Decl */
extern PyTypeObject ckpy_client_type;   /* client.c: libshard._ck.Client */
extern PyTypeObject ckpy_save_type;     /* save.c:   libshard._ck.Save */
extern PyTypeObject ckpy_csave_type;    /* client.c: libshard._ck.ClientSave */

/* root.c */
PyObject *ckpy_scan(PyObject *self, PyObject *args);
PyObject *ckpy_recover(PyObject *self, PyObject *args);
PyObject *ckpy_root_make(PyObject *self, PyObject *args);
PyObject *ckpy_dtype_name(PyObject *self, PyObject *args);
PyObject *ckpy_dtypes(PyObject *self, PyObject *args);
PyObject *ckpy_dtype_convert(PyObject *self, PyObject *args);
PyObject *ckpy_name_check(PyObject *self, PyObject *args);
PyObject *ckpy_key_encode(PyObject *self, PyObject *args);
PyObject *ckpy_key_decode(PyObject *self, PyObject *args);
PyObject *ckpy_remove(PyObject *self, PyObject *args);
PyObject *ckpy_steps(PyObject *self, PyObject *args);
PyObject *ckpy_newest_step(PyObject *self, PyObject *args);
PyObject *ckpy_prune(PyObject *self, PyObject *args);
PyObject *ckpy_name_state(PyObject *self, PyObject *args);
PyObject *ckpy_file_bytes(PyObject *self, PyObject *sizes);
PyObject *ckpy_path_kind(PyObject *self, PyObject *args);
/* client.c */
PyObject *ckpy_job_id_new(PyObject *self, PyObject *args);
/* The client of a libshard._ck.Client, or NULL with TypeError set. */
ck_client *ckpy_client_of(PyObject *o);

/* export.c */
PyObject *ckpy_export_hf(PyObject *self, PyObject *args, PyObject *kw);


#endif
