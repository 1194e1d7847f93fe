/* io/rootfs.c, the one way the core reaches a path under a root (docs/FORMAT.md,
 * "Links and special files"), through openat2 and through its fallback walk alike:
 *   - a link anywhere in a path is -ELOOP, at the last component or before it, and
 *     nothing is created, renamed, removed or linked through one;
 *   - "..", absolute paths and empty components are refused (-EINVAL);
 *   - a FIFO is refused as data (CK_ENOTREG), for reading and for writing, at once;
 *   - the small-file readers (ck__read_small, ck__read_whole) read a file whole within
 *     their bound, -EFBIG past it by one byte, and refuse links, FIFOs and directories;
 *   - removing or inspecting a link touches the link, never its target;
 *   - ck__rel finds the part of a path below a root, or says it is not below it.
 * Everything the links point at lies outside the root and stays as it was. */
#include <sys/wait.h>

#include "io/rootfs.h"
#include "outside_testlib.h"

static int open_with(int dir, const char *rel, int flags, unsigned mode, bool walk)
{
    return walk ? ck__openat_walk(dir, rel, flags, mode) : ck__openat(dir, rel, flags, mode);
}

static void expect_open(int fd, int want, const char *what, bool walk)
{
    CHECK(want == 0 ? fd >= 0 : fd == want, "%s (%s): got %d (%s), want %d", what,
          walk ? "walk" : "openat2", fd, fd < 0 ? strerror(-fd) : "a descriptor", want);
    if (fd >= 0)
        close(fd);
}

int main(void)
{
    char base[PATH_MAX], root[PATH_MAX], home[PATH_MAX], p[PATH_MAX + 64], t[PATH_MAX + 64];
    tl_tmpdir(base, sizeof base, "rootfs");
    snprintf(root, sizeof root, "%s/root", base);
    snprintf(home, sizeof home, "%s/home", base);
    ol_outside(home);
    REQUIRE(mkdir(root, 0755) == 0, "mkdir");
    snprintf(p, sizeof p, "%s/d", root);
    REQUIRE(mkdir(p, 0755) == 0, "mkdir");
    snprintf(p, sizeof p, "%s/d/f", root);
    ol_write(p, "data\n");
    snprintf(p, sizeof p, "%s/l", root);
    ol_link(home, p);                                   /* a directory link */
    snprintf(p, sizeof p, "%s/d/lf", root);
    snprintf(t, sizeof t, "%s/.bashrc", home);
    ol_link(t, p);                                      /* a file link */
    snprintf(p, sizeof p, "%s/d/p", root);
    REQUIRE(mkfifo(p, 0644) == 0, "mkfifo");
    char *before = ol_snapshot(home);
    ck_err err = { 0 };
    int rootfd = ck__root_open(root, &err);
    REQUIRE(rootfd >= 0, "%s", ck_err_msg(&err));

    for (int w = 0; w < 2; w++) {
        bool walk = w == 1;
        expect_open(open_with(rootfd, "d/f", O_RDONLY, 0, walk), 0, "a plain file", walk);
        expect_open(open_with(rootfd, "d", O_RDONLY | O_DIRECTORY, 0, walk), 0, "a directory",
                    walk);
        expect_open(open_with(rootfd, "l/.bashrc", O_RDONLY, 0, walk), -ELOOP,
                    "through a directory link", walk);
        expect_open(open_with(rootfd, "l", O_RDONLY | O_DIRECTORY, 0, walk), -ELOOP,
                    "a directory link itself", walk);
        expect_open(open_with(rootfd, "d/lf", O_RDONLY, 0, walk), -ELOOP, "a file link", walk);
        expect_open(open_with(rootfd, "d/lf", O_WRONLY | O_TRUNC, 0, walk), -ELOOP,
                    "a file link, to overwrite", walk);
        expect_open(open_with(rootfd, "d/lf", O_WRONLY | O_CREAT | O_EXCL, 0644, walk), -EEXIST,
                    "an exclusive create over a link", walk);
        expect_open(open_with(rootfd, "l/new", O_WRONLY | O_CREAT, 0644, walk), -ELOOP,
                    "a create through a directory link", walk);
        expect_open(open_with(rootfd, "d/new", O_WRONLY | O_CREAT | O_EXCL, 0644, walk), 0,
                    "an exclusive create", walk);
        snprintf(p, sizeof p, "%s/d/new", root);
        unlink(p);
        expect_open(open_with(rootfd, "d/p", O_RDONLY | O_NONBLOCK, 0, walk), 0,
                    "a FIFO, non-blocking", walk);
        const char *bad[] = { "../home/.bashrc", "/etc/passwd", "d/../d/f", "d//f", "", "d/",
                              "./d/f" };
        for (size_t i = 0; i < sizeof bad / sizeof *bad; i++)
            expect_open(open_with(rootfd, bad[i], O_RDONLY, 0, walk), -EINVAL, bad[i], walk);
    }
    /* A FIFO as data, read or written: refused at once (a blocking open never returns). */
    pid_t pid = fork();
    REQUIRE(pid >= 0, "fork");
    if (pid == 0) {
        alarm(10);
        int a = ck__openat_reg(rootfd, "d/p", O_RDONLY, 0);
        int b = ck__openat_reg(rootfd, "d/p", O_WRONLY, 0);
        char small[8];
        uint8_t *whole;
        size_t n;
        int c = ck__read_small(rootfd, "d/p", small, sizeof small, &n);
        int d = ck__read_whole(rootfd, "d/p", 8, &whole, &n);
        _exit(a == CK_ENOTREG && b == CK_ENOTREG && c == CK_ENOTREG && d == CK_ENOTREG ? 0 : 1);
    }
    int st;
    waitpid(pid, &st, 0);
    CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0, "a FIFO was not refused as data at once");
    expect_open(ck__openat_reg(rootfd, "d", O_RDONLY, 0), CK_ENOTREG, "a directory as data", 0);
    expect_open(ck__openat_reg(rootfd, "d/f", O_RDONLY, 0), 0, "a file as data", 0);
    expect_open(ck__openat_reg(rootfd, "d/lf", O_RDONLY, 0), -ELOOP, "a link as data", 0);

    /* "d/f" holds "data\n": read whole within 5 bytes, refused within 4. */
    char small[16];
    size_t n = 99;
    int r = ck__read_small(rootfd, "d/f", small, 5, &n);
    CHECK(r == 0 && n == 5 && !memcmp(small, "data\n", 5), "read_small of 5 bytes in 5: %d, %zu",
          r, n);
    CHECK(ck__read_small(rootfd, "d/f", small, sizeof small, &n) == 0 && n == 5,
          "read_small with room to spare");
    CHECK(ck__read_small(rootfd, "d/f", small, 4, &n) == -EFBIG, "read_small of 5 bytes in 4");
    CHECK(ck__read_small(rootfd, "d/lf", small, sizeof small, &n) == -ELOOP, "read_small of a link");
    CHECK(ck__read_small(rootfd, "d", small, sizeof small, &n) == CK_ENOTREG,
          "read_small of a directory");
    uint8_t *whole = NULL;
    r = ck__read_whole(rootfd, "d/f", 5, &whole, &n);
    CHECK(r == 0 && n == 5 && whole && !strcmp((char *)whole, "data\n"),
          "read_whole of 5 bytes in 5 (NUL after them): %d, %zu", r, n);
    free(whole);
    CHECK(ck__read_whole(rootfd, "d/f", 4, &whole, &n) == -EFBIG && !whole,
          "read_whole of 5 bytes in 4");
    CHECK(ck__read_whole(rootfd, "d/lf", 64, &whole, &n) == -ELOOP && !whole,
          "read_whole of a link");

    CHECK(ck__mkdirat(rootfd, "l/x", 0755) == -ELOOP, "mkdir through a link");
    CHECK(ck__unlinkat(rootfd, "l/.bashrc", 0) == -ELOOP, "unlink through a link");
    CHECK(ck__unlinkat(rootfd, "l/docs", AT_REMOVEDIR) == -ELOOP, "rmdir through a link");
    CHECK(ck__renameat(rootfd, "d/f", rootfd, "l/f", RENAME_NOREPLACE) == -ELOOP,
          "rename into a link");
    CHECK(ck__renameat(rootfd, "l/.bashrc", rootfd, "d/g", 0) == -ELOOP, "rename out of a link");
    CHECK(ck__linkat(rootfd, "d/lf", rootfd, "d/h") == -ELOOP, "hard link of a link");
    CHECK(ck__linkat(rootfd, "d/p", rootfd, "d/h") == CK_ENOTREG, "hard link of a FIFO");
    CHECK(ck__linkat(rootfd, "d/f", rootfd, "l/h") == -ELOOP, "hard link into a link");
    struct stat s;
    CHECK(ck__statat(rootfd, "d/lf", &s) == 0 && S_ISLNK(s.st_mode), "lstat of a link");
    CHECK(ck__statat(rootfd, "l/.bashrc", &s) == -ELOOP, "stat through a link");
    CHECK(ck__unlinkat(rootfd, "d/lf", 0) == 0, "removing a link itself");
    ol_same(home, before, "rootfs calls");
    snprintf(t, sizeof t, "%s/.bashrc", home);
    CHECK(access(t, F_OK) == 0, "the target of a removed link is gone");

    CHECK(!strcmp(ck__rel("/r", "/r/.pending/x") ?: "?", ".pending/x"), "rel");
    CHECK(!strcmp(ck__rel("/r/", "/r//x") ?: "?", "x"), "rel with a trailing /");
    CHECK(!strcmp(ck__rel("/r", "/r") ?: "?", ""), "rel of the root itself");
    CHECK(ck__rel("/r", "/rx/y") == NULL && ck__rel("/r", "/s/y") == NULL, "rel outside");
    CHECK(strstr(ck__why(-ELOOP), "never followed") && strstr(ck__why(CK_ENOTREG), "regular"),
          "words");
    close(rootfd);
    free(before);
    tl_rmtree(base);
    if (tl_failures)
        return 1;
    printf("ok: links, '..', absolute paths and FIFOs refused by openat2, by the walk and by "
           "the small-file readers; nothing outside the root touched\n");
    return 0;
}
