/* fuzz_safetensors.c - the safetensors header reader (export/safetensors.h) on any
 * file: the input is written as a file and opened with ck_st_open. */
#include <fcntl.h>
#include <stdio.h>
#include <unistd.h>

#include "export/safetensors.h"
#include "fz_mdb.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char path[1024];
    snprintf(path, sizeof path, "%s/model.safetensors", fz_scratch());
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0 || write(fd, data, size) != (ssize_t)size) {
        perror(path);
        return -1;
    }
    close(fd);
    ck_st_file f;
    ck_err err = { 0 };
    if (ck_st_open(path, &f, &err) == 0)
        ck_st_free(&f);
    return 0;
}
