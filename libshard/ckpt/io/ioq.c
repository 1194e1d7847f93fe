/* ioq.c - what every streaming caller of a ck_ioq does with a completion: continue
 * a short transfer, or name the failure. */
#include <stdio.h>
#include <string.h>

#include "ck/engine.h"
#include "ck/error.h"
#include "io/engine.h"

int ck__ioq_complete(ck_engine *e, ck_ioq *q, ck_io *io, int res, const char *what,
                     ck_err *err)
{
    if (res < 0)
        return ck_err_set(err, res, "%s: %s of %u bytes at offset %llu: %s", what,
                          io->write ? "write" : "read", io->len,
                          (unsigned long long)io->off, strerror(-res));
    if (res == 0 && io->len > 0)
        return io->write
            ? ck_err_set(err, -EIO, "%s: write at offset %llu made no progress", what,
                         (unsigned long long)io->off)
            : ck_err_set(err, -EBADMSG, "%s: file ends before offset %llu (truncated?)",
                         what, (unsigned long long)io->off);
    if ((unsigned)res >= io->len)
        return 1;
    /* Continue where the kernel stopped: the rest of a short transfer. */
    io->buf = (char *)io->buf + res;
    io->off += (unsigned)res;
    io->len -= (unsigned)res;
    io->buf_index = -1;
    int r = e->ops->ioq_submit(q, io, 1);
    if (r < 0)
        return ck_err_set(err, r, "%s: submitting I/O: %s", what, strerror(-r));
    return 0;
}

