/* staging.c - staging memory, faulted in at once, on huge pages where the system
 * gives them (see ck/staging.h). */
#include "io/staging.h"

#include <fcntl.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23          /* Linux 5.14; older kernels answer EINVAL */
#endif

#define HUGE_PAGE (2u << 20)

/* Whether the kernel's THP setting in file honours MADV_HUGEPAGE: the selected word,
 * in brackets, is anything but never or deny. */
static bool thp_allowed(const char *file)
{
    char buf[160] = "";
    FILE *f = fopen(file, "r");
    if (!f)
        return false;
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = '\0';
    const char *sel = strchr(buf, '[');
    return sel && strncmp(sel, "[never]", 7) != 0 && strncmp(sel, "[deny]", 6) != 0;
}

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

/* Every page allocated and zeroed now, so that no save pays for it. */
static int populate(uint8_t *p, uint64_t size)
{
    if (madvise(p, size, MADV_POPULATE_WRITE) == 0)
        return 0;
    if (errno != EINVAL)
        return -errno;
    for (uint64_t o = 0; o < size; o += 4096)
        ((volatile uint8_t *)p)[o] = 0;
    return 0;
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
    if (r == 0) {
        s->pages = CK_PAGES_HUGETLB;
    } else if ((r = memfd ? map_memfd(s, size, false) : map_anon(s, size, false)) == 0) {
        s->pages = CK_PAGES_SMALL;
        const char *knob = memfd ? "/sys/kernel/mm/transparent_hugepage/shmem_enabled"
                                 : "/sys/kernel/mm/transparent_hugepage/enabled";
        if (!small && madvise(s->map, size, MADV_HUGEPAGE) == 0 && thp_allowed(knob))
            s->pages = CK_PAGES_THP;
    }
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
    return p == CK_PAGES_HUGETLB ? "hugetlb 2 MiB pages"
         : p == CK_PAGES_THP     ? "transparent huge pages"
                                 : "4 KiB pages";
}
