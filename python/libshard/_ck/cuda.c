/* cuda.c - the CUDA driver, loaded when a Client is asked to pin its staging for a GPU.
 *
 * A CUDA tensor's bytes reach the staging area by one DMA (queued here, on the side
 * stream writer.py gives, as the client places each box: client.c), which runs at the
 * link's speed only into page-locked memory. The
 * staging belongs to the client, so the client registers it: once, when it maps an area
 * (reserve time or the first save), and unregisters it before unmapping it (the
 * ck_client_opts staging hooks). The driver library libcuda.so.1 is opened at run time:
 * it is the one CUDA library every GPU machine has whatever runtime torch was built
 * with, and the wheel then builds, installs and imports with no CUDA at all (a client
 * without pin= never opens it). Registration through the driver (cuMemHostRegister,
 * portable) is seen by torch's runtime, which is layered on the same driver and
 * primary context.
 *
 * The hooks run on the client's threads (its reserver, or the caller's with the GIL
 * released), so each call makes the device's primary context current and pops it.
 */
#include "ckpy.h"

#include <dlfcn.h>
#include <stdlib.h>

typedef int CUresult;           /* 0: CUDA_SUCCESS */
typedef int CUdevice;
typedef struct CUctx_st *CUcontext;
typedef struct CUstream_st *CUstream;
typedef unsigned long long CUdeviceptr;

#define CU_MEMHOSTREGISTER_PORTABLE 0x01
#define CU_ERROR_HOST_MEMORY_ALREADY_REGISTERED 712

struct ckpy_cuda {
    void *lib;
    int device;
    CUcontext ctx;
    CUresult (*init)(unsigned);
    CUresult (*device_get)(CUdevice *, int);
    CUresult (*primary_retain)(CUcontext *, CUdevice);
    CUresult (*primary_release)(CUdevice);
    CUresult (*push)(CUcontext);
    CUresult (*pop)(CUcontext *);
    CUresult (*host_register)(void *, size_t, unsigned);
    CUresult (*host_unregister)(void *);
    CUresult (*copy_async)(void *, CUdeviceptr, size_t, CUstream);
    CUresult (*stream_sync)(CUstream);
    CUresult (*error_string)(CUresult, const char **);
};

static const char *cu_msg(const ckpy_cuda *cu, CUresult r)
{
    const char *s = NULL;
    if (cu->error_string && cu->error_string(r, &s) == 0 && s)
        return s;
    return "unknown CUDA error";
}

#define SYM(field, name)                                                   \
    if (!(*(void **)&cu->field = dlsym(cu->lib, name))) {                  \
        ck_err_set(err, -ENOSYS, "libcuda.so.1 has no %s", name);          \
        goto fail;                                                         \
    }

int ckpy_cuda_open(int device, ckpy_cuda **out, ck_err *err)
{
    ckpy_cuda *cu = calloc(1, sizeof *cu);
    if (!cu)
        return ck_err_set(err, -ENOMEM, "out of memory");
    cu->device = device;
    cu->lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!cu->lib) {
        ck_err_set(err, -ENOENT, "pinning staging for GPU %d: no CUDA driver (%s)", device,
                   dlerror());
        free(cu);
        return -ENOENT;
    }
    SYM(init, "cuInit");
    SYM(device_get, "cuDeviceGet");
    SYM(primary_retain, "cuDevicePrimaryCtxRetain");
    SYM(primary_release, "cuDevicePrimaryCtxRelease_v2");
    SYM(push, "cuCtxPushCurrent_v2");
    SYM(pop, "cuCtxPopCurrent_v2");
    SYM(host_register, "cuMemHostRegister_v2");
    SYM(host_unregister, "cuMemHostUnregister");
    SYM(copy_async, "cuMemcpyDtoHAsync_v2");
    SYM(stream_sync, "cuStreamSynchronize");
    SYM(error_string, "cuGetErrorString");
    CUdevice dev;
    CUresult r = cu->init(0);
    if (r == 0)
        r = cu->device_get(&dev, device);
    if (r == 0)
        r = cu->primary_retain(&cu->ctx, dev);
    if (r != 0) {
        ck_err_set(err, -ENODEV, "pinning staging for GPU %d: %s", device, cu_msg(cu, r));
        goto fail;
    }
    *out = cu;
    return 0;
fail:
    dlclose(cu->lib);
    free(cu);
    return err->code;
}

void ckpy_cuda_close(ckpy_cuda *cu)
{
    if (!cu)
        return;
    CUdevice dev;
    if (cu->ctx && cu->device_get(&dev, cu->device) == 0)
        cu->primary_release(dev);
    dlclose(cu->lib);
    free(cu);
}

static int with_ctx(ckpy_cuda *cu)
{
    return cu->push(cu->ctx) == 0 ? 0 : -EIO;
}

static void without_ctx(ckpy_cuda *cu)
{
    CUcontext c;
    cu->pop(&c);
}

int ckpy_cuda_pin(void *arg, void *base, size_t len)
{
    ckpy_cuda *cu = arg;
    if (with_ctx(cu) < 0)
        return -EIO;
    CUresult r = cu->host_register(base, len, CU_MEMHOSTREGISTER_PORTABLE);
    without_ctx(cu);
    /* Already registered (by the caller's own code): it stays so, and is not ours to
     * unregister. */
    return r == 0 ? 0 : r == CU_ERROR_HOST_MEMORY_ALREADY_REGISTERED ? -EEXIST : -EIO;
}

void ckpy_cuda_unpin(void *arg, void *base, size_t len)
{
    (void)len;
    ckpy_cuda *cu = arg;
    if (with_ctx(cu) < 0)
        return;
    cu->host_unregister(base);
    without_ctx(cu);
}

int ckpy_cuda_copy(ckpy_cuda *cu, void *dst, uint64_t src, size_t len, void *stream,
                   ck_err *err)
{
    if (with_ctx(cu) < 0)
        return ck_err_set(err, -EIO, "GPU %d: cannot make its context current", cu->device);
    CUresult r = cu->copy_async(dst, (CUdeviceptr)src, len, (CUstream)stream);
    without_ctx(cu);
    return r == 0 ? 0 : ck_err_set(err, -EIO, "GPU %d: a copy into staging: %s", cu->device,
                                   cu_msg(cu, r));
}

int ckpy_cuda_stream_wait(ckpy_cuda *cu, void *stream, ck_err *err)
{
    if (with_ctx(cu) < 0)
        return ck_err_set(err, -EIO, "GPU %d: cannot make its context current", cu->device);
    CUresult r = cu->stream_sync((CUstream)stream);
    without_ctx(cu);
    return r == 0 ? 0 : ck_err_set(err, -EIO, "GPU %d: the copies into staging: %s",
                                   cu->device, cu_msg(cu, r));
}
