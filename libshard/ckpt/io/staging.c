/* staging.c - staging memory, faulted in at once, in parallel, on hugetlb pages where
 * the system has a pool (see io/staging.h). */
#include "io/staging.h"

#include <fcntl.h>
#include <pthread.h>
#include <stdbool.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23          /* Linux 5.14; older kernels answer EINVAL */
#endif

#define HUGE_PAGE (2u << 20)

/* A sealed memfd: the daemon that maps it is promised that its pages cannot be
 * truncated away under its writes. hugetlb reserves its pages at mmap, so an empty
 * pool fails here, not later with SIGBUS. */
static int map_memfd(ck__staging *s, uint64_t size, bool huge)
{
    int fd = memfd_create("ckpt-staging", MFD_CLOEXEC | MFD_ALLOW_SEALING |
                          (huge ? MFD_HUGETLB : 0u));
    if (fd < 0)
        return -errno;
    int r = ftruncate(fd, (off_t)size) < 0 ? -errno : 0;
    void *p = r ? MAP_FAILED : mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (!r && p == MAP_FAILED)
        r = -errno;
    if (!r && fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) < 0)
        r = -errno;
    if (r) {
        if (p != MAP_FAILED)
            munmap(p, size);
        close(fd);
        return r;
    }
    *s = (ck__staging){ .fd = fd, .map = p, .size = size };
    return 0;
}

static int map_anon(ck__staging *s, uint64_t size, bool huge)
{
    void *p = mmap(NULL, size, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | (huge ? MAP_HUGETLB : 0), -1, 0);
    if (p == MAP_FAILED)
        return -errno;
    *s = (ck__staging){ .fd = -1, .map = p, .size = size };
    return 0;
}

typedef struct part {
    uint8_t *p;
    uint64_t size;
    int r;
} part;

static void *populate_part(void *arg)
{
    part *q = arg;
    q->r = 0;
    if (madvise(q->p, q->size, MADV_POPULATE_WRITE) == 0)
        return NULL;
    if (errno != EINVAL) {
        q->r = -errno;
        return NULL;
    }
    for (uint64_t o = 0; o < q->size; o += 4096)
        ((volatile uint8_t *)q->p)[o] = 0;
    return NULL;
}

/* Every page allocated and zeroed now, so that no save pays for it: in parts of at
 * least STAGING_PART bytes on up to STAGING_THREADS threads at once, since one thread
 * zeroes pages at a fraction of the memory's bandwidth (256 MiB of shared memory: 0.10
 * s on one thread, 0.067 s on two, on the 2-core test machine; decision 0046). */
#define STAGING_PART (64u << 20)
#define STAGING_THREADS 8
static int populate(uint8_t *p, uint64_t size)
{
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    uint64_t n = size / STAGING_PART;
    if (n > (uint64_t)(cpus > 0 ? cpus : 1))
        n = (uint64_t)(cpus > 0 ? cpus : 1);
    if (n > STAGING_THREADS)
        n = STAGING_THREADS;
    if (n < 1)
        n = 1;
    uint64_t each = (size / n + HUGE_PAGE - 1) & ~(uint64_t)(HUGE_PAGE - 1);
    part parts[STAGING_THREADS];
    pthread_t th[STAGING_THREADS];
    bool started[STAGING_THREADS] = { false };
    for (uint64_t i = 0; i < n; i++) {
        uint64_t off = i * each;
        uint64_t len = off >= size ? 0 : size - off < each ? size - off : each;
        parts[i] = (part){ .p = p + off, .size = len };
        /* The last part is this thread's; one that cannot start is done here too. */
        if (i + 1 < n && pthread_create(&th[i], NULL, populate_part, &parts[i]) == 0)
            started[i] = true;
        else
            populate_part(&parts[i]);
    }
    int r = 0;
    for (uint64_t i = 0; i < n; i++) {
        if (started[i])
            pthread_join(th[i], NULL);
        if (r == 0)
            r = parts[i].r;
    }
    return r;
}

int ck__staging_map(ck__staging *s, uint64_t size, unsigned flags, ck_err *err)
{
    uint64_t want = size;
    size = (size + HUGE_PAGE - 1) & ~(uint64_t)(HUGE_PAGE - 1);
    if (!size)
        size = HUGE_PAGE;
    bool memfd = flags & CK_STAGING_MEMFD, small = flags & CK_STAGING_SMALL_PAGES;
    int r = -EOPNOTSUPP;
    if (!small)
        r = memfd ? map_memfd(s, size, true) : map_anon(s, size, true);
    if (r == 0)
        s->pages = CK_PAGES_HUGETLB;
    else if ((r = memfd ? map_memfd(s, size, false) : map_anon(s, size, false)) == 0)
        s->pages = CK_PAGES_SMALL;
    if (r == 0)
        r = populate(s->map, size);
    if (r < 0) {
        ck__staging_unmap(s);
        return ck_err_set(err, r, "staging memory of %llu bytes: %s", (unsigned long long)want,
                          strerror(-r));
    }
    return 0;
}

void ck__staging_unmap(ck__staging *s)
{
    if (s->map)
        munmap(s->map, s->size);
    if (s->fd >= 0)
        close(s->fd);
    *s = CK_STAGING_NONE;
}

const char *ck__staging_pages_name(ck__staging_pages p)
{
    return p == CK_PAGES_HUGETLB ? "hugetlb 2 MiB pages" : "4 KiB pages";
}
