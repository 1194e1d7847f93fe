/* io/engine.h - what the core does with an engine (private to the core): open a data
 * file, fsync a path, run a queue's I/Os to the end. The engine interface itself, which
 * the tests' engines wrap, is ck/engine.h. */
#ifndef CK_IO_ENGINE_H
#define CK_IO_ENGINE_H

#include <stdbool.h>

#include "ck/engine.h"
#include "ck/error.h"

/* Opens a data file (path beneath dir) that must be a regular file: anything else (a
 * FIFO, a device, a socket) is refused without blocking, as -EMEDIUMTYPE, which no
 * other failure of an open returns. */
int ck__engine_open_file(ck_engine *e, int dir, const char *path, int flags, unsigned mode);
/* The same, for O_DIRECT I/O when the file system allows it, else buffered. *direct
 * says which. `flags` are O_RDONLY / O_WRONLY|O_CREAT|O_EXCL and the like. */
int ck__engine_open_data(ck_engine *e, int dir, const char *path, int flags, unsigned mode,
                         bool *direct);

/* Opens path (a directory or file, beneath dir) read-only and fsyncs it. */
int ck__engine_fsync_path(ck_engine *e, int dir, const char *path);

/* What a caller does with the completion of io (res as reaped): 1 when io is done;
 * 0 when it moved fewer bytes than asked and its rest was submitted again (io is
 * updated in place: the same user, still in flight); a negative code, with the
 * message naming `what`, the offset and the length, when it failed. A read that meets
 * end-of-file is -EBADMSG (the file is shorter than the manifest says). */
int ck__ioq_complete(ck_engine *e, ck_ioq *q, ck_io *io, int res, const char *what,
                     ck_err *err);


#endif
