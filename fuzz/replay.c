/* replay.c - runs a fuzz target's entry point on files, without libFuzzer, so that the
 * crashes fuzzing found (fuzz/regress/TARGET/) and the seed corpora run in the normal
 * test suite under gcc and under ASan + UBSan. Arguments are files or directories
 * (every file in them). */
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int run_file(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        perror(path);
        return -1;
    }
    uint8_t *buf = NULL;
    size_t len = 0, cap = 0;
    for (;;) {
        if (len == cap) {
            cap = cap ? 2 * cap : 4096;
            uint8_t *p = realloc(buf, cap);
            if (!p) {
                free(buf);
                fclose(f);
                return -1;
            }
            buf = p;
        }
        size_t n = fread(buf + len, 1, cap - len, f);
        if (n == 0)
            break;
        len += n;
    }
    fclose(f);
    int r = LLVMFuzzerTestOneInput(buf, len);
    free(buf);
    if (r != 0)
        fprintf(stderr, "%s: the target returned %d\n", path, r);
    return r;
}

int main(int argc, char **argv)
{
    unsigned n = 0, bad = 0;
    for (int i = 1; i < argc; i++) {
        struct stat st;
        if (stat(argv[i], &st) < 0) {
            perror(argv[i]);
            return 1;
        }
        if (!S_ISDIR(st.st_mode)) {
            bad += run_file(argv[i]) != 0;
            n++;
            continue;
        }
        DIR *d = opendir(argv[i]);
        struct dirent *e;
        while (d && (e = readdir(d))) {
            if (e->d_name[0] == '.')
                continue;
            char path[4096];
            snprintf(path, sizeof path, "%s/%s", argv[i], e->d_name);
            bad += run_file(path) != 0;
            n++;
        }
        if (d)
            closedir(d);
    }
    if (n == 0) {
        fprintf(stderr, "replay: no inputs\n");
        return 1;
    }
    printf("%s: %u inputs replayed, %u failed\n", argv[0], n, bad);
    return bad ? 1 : 0;
}
