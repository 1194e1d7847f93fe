/* The writer's landed hook (io/writer.h, ck__writer_opts.landed; decision 0204) says of
 * each file only bytes that are on it: two files written at once, from memory, in
 * blocks whose writes land in any order (a deep queue of small I/Os); at every call the
 * file's first `bytes` bytes, read back then, are the source's, `bytes` only grows, is a
 * whole number of blocks or the file's size, and the last call of each file says its
 * size. What a replication that follows the writer reads is what was written. */
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ckpt_testlib.h"
#include "io/writer.h"

#define NFILES 2
#define BLOCK (256u << 10)

typedef struct seen {
    char path[NFILES][PATH_MAX];
    const uint8_t *src[NFILES];
    uint64_t size[NFILES];
    uint64_t last[NFILES];
    unsigned calls[NFILES];
    uint8_t *back;                 /* a read-back buffer as large as a file */
} seen;

static void landed(void *arg, uint32_t f, uint64_t bytes)
{
    seen *s = arg;
    REQUIRE(f < NFILES, "landed: file %u of %u", f, NFILES);
    CHECK(bytes > s->last[f], "file %u: landed %llu after %llu: it only grows", f,
          (unsigned long long)bytes, (unsigned long long)s->last[f]);
    CHECK(bytes <= s->size[f] && (bytes % BLOCK == 0 || bytes == s->size[f]),
          "file %u: landed %llu: whole blocks of %u, or the file's %llu", f,
          (unsigned long long)bytes, BLOCK, (unsigned long long)s->size[f]);
    int fd = open(s->path[f], O_RDONLY);
    REQUIRE(fd >= 0, "open %s", s->path[f]);
    ssize_t got = pread(fd, s->back, bytes, 0);
    close(fd);
    CHECK(got == (ssize_t)bytes && memcmp(s->back, s->src[f], bytes) == 0,
          "file %u: its first %llu bytes, said landed, are not the source's", f,
          (unsigned long long)bytes);
    s->last[f] = bytes;
    s->calls[f]++;
}

int main(void)
{
    char dir[PATH_MAX];
    tl_tmpdir(dir, sizeof dir, "writer-landed");
    /* The second file ends in a block that is not whole. */
    const uint64_t sizes[NFILES] = { 24u * BLOCK, 13u * BLOCK + 8192 };
    seen s = { 0 };
    ck__wfile wf[NFILES];
    ck__src src[NFILES];
    uint8_t *mem[NFILES];
    s.back = malloc(24u * BLOCK);
    REQUIRE(s.back, "out of memory");
    for (int f = 0; f < NFILES; f++) {
        REQUIRE(posix_memalign((void **)&mem[f], 4096, sizes[f]) == 0, "out of memory");
        for (uint64_t i = 0; i < sizes[f]; i++)
            mem[f][i] = (uint8_t)(i * 131 + f * 7 + (i >> 12));
        snprintf(s.path[f], sizeof s.path[f], "%s/file-%d.dat", dir, f);
        s.src[f] = mem[f];
        s.size[f] = sizes[f];
        src[f] = (ck__src){ .file_off = 0, .len = sizes[f], .mem = mem[f] };
        wf[f] = (ck__wfile){ .path = s.path[f], .size = sizes[f], .srcs = &src[f], .nsrcs = 1 };
    }
    ck__writer_opts o = { .block_size = BLOCK, .io_size = 64u << 10, .depth = 16,
                          .landed = landed, .landed_arg = &s };
    ck_err err = { 0 };
    int r = ck__write_files(&o, wf, NFILES, NULL, &err);
    CHECK(r == 0, "the write: %s", ck_err_msg(&err));
    for (int f = 0; f < NFILES; f++) {
        CHECK(s.last[f] == sizes[f], "file %d: the last landed said %llu of %llu bytes", f,
              (unsigned long long)s.last[f], (unsigned long long)sizes[f]);
        CHECK(s.calls[f] >= 2, "file %d: landed said it %u time(s): not as it grew", f,
              s.calls[f]);
        free(mem[f]);
    }
    free(s.back);
    tl_rmtree(dir);
    return tl_failures ? 1 : 0;
}
