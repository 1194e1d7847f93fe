/* fuzz_parsers.c - the command-line parsers of ck/types.h and export/safetensors.h:
 * meshes and their dim names, placements, sizes, dtypes. The first byte picks the
 * parser (and, for placements, the mesh and tensor ndim); the rest is the string,
 * cut at its first NUL, as argv would hold it. */
#include <stdlib.h>
#include <string.h>

#include "ck/types.h"
#include "export/safetensors.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    char *s = malloc(size);
    if (!s)
        return 0;
    memcpy(s, data + 1, size - 1);
    s[size - 1] = '\0';
    ck_err err = { 0 };
    ck_mesh m;
    ck_placement pl[CK_MAX_MESH_DIMS];
    ck_dtype dt;
    uint64_t v;
    char buf[256];
    switch (data[0] % 5) {
    case 0:
        if (ck_mesh_parse(s, NULL, &m, &err) == 0)
            ck_mesh_format(&m, buf, sizeof buf);
        break;
    case 1: {
        /* "shape;names": both strings of ck_mesh_parse */
        char *names = strchr(s, ';');
        if (names)
            *names++ = '\0';
        if (ck_mesh_parse(s, names, &m, &err) == 0)
            ck_mesh_format(&m, buf, sizeof buf);
        break;
    }
    case 2: {
        int mesh_ndim = 1 + (data[0] / 5) % CK_MAX_MESH_DIMS;
        int tensor_ndim = (data[0] / 20) % (CK_MAX_NDIM + 2) - 1;   /* -1: unchecked */
        if (ck_placements_parse(s, mesh_ndim, tensor_ndim, pl, &err) == 0)
            ck_placements_format(pl, mesh_ndim, buf, sizeof buf);
        break;
    }
    case 3:
        ck_size_parse(s, &v, &err);
        break;
    case 4:
        ck_dtype_parse(s, &dt, &err);
        ck_st_dtype_parse(s, &dt);
        break;
    }
    free(s);
    return 0;
}
