/* world/mesh.c - the N-D device mesh and its per-dim communicators. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "comm/comm.h"
#include "world/mesh.h"
#include "world/world.h"

int sh_mesh_new(sh_world *w, int ndim, const int *shape, const char *const *names,
                sh_mesh **out, ck_err *err)
{
    *out = NULL;
    if (ndim < 1 || ndim > CK_MAX_MESH_DIMS)
        return ck_err_set(err, -EINVAL, "a mesh has 1 to %d dims, not %d", CK_MAX_MESH_DIMS,
                          ndim);
    sh_mesh *m = calloc(1, sizeof *m);
    if (!m)
        return ck_err_set(err, -ENOMEM, "mesh: out of memory");
    m->world = w;
    m->desc.ndim = ndim;
    long world = 1;
    for (int d = 0; d < ndim; d++) {
        if (shape[d] < 1 || shape[d] > (int)CK_MAX_WORLD) {
            free(m);
            return ck_err_set(err, -EINVAL, "mesh dim %d has size %d", d, shape[d]);
        }
        m->desc.size[d] = (uint32_t)shape[d];
        world *= shape[d];
        if (names && names[d]) {
            if (strlen(names[d]) >= CK_MESH_NAME_MAX) {
                free(m);
                return ck_err_set(err, -EINVAL, "mesh dim name '%s' is too long", names[d]);
            }
            snprintf(m->desc.name[d], CK_MESH_NAME_MAX, "%s", names[d]);
        }
    }
    if (world != w->size) {
        char desc[64];
        ck_mesh_format(&m->desc, desc, sizeof desc);
        free(m);
        return ck_err_set(err, -EINVAL,
                          "mesh %s needs %ld ranks but the world has %d (rank %d): "
                          "launch with %ld processes or change the mesh", desc, world,
                          w->size, w->rank, world);
    }
    ck_mesh_coord(&m->desc, (uint64_t)w->rank, m->coord);
    for (int d = 0; d < ndim; d++) {
        /* The ranks that differ from this one only in dim d share the color made of
         * every other coordinate: the row-major rank with coordinate d set to 0. */
        uint32_t c[CK_MAX_MESH_DIMS];
        memcpy(c, m->coord, sizeof c);
        c[d] = 0;
        char name[64];
        if (m->desc.name[d][0])
            snprintf(name, sizeof name, "mesh dim '%s'", m->desc.name[d]);
        else
            snprintf(name, sizeof name, "mesh dim %d", d);
        int rc = sh_comm_split(w->comm, (int)ck_mesh_rank(&m->desc, c), (int)m->coord[d],
                               name, &m->comm[d], err);
        if (rc) {
            sh_mesh_free(m);
            return rc;
        }
    }
    *out = m;
    return 0;
}

void sh_mesh_free(sh_mesh *m)
{
    if (!m)
        return;
    for (int d = 0; d < m->desc.ndim; d++)
        sh_comm_free(m->comm[d]);
    free(m);
}

int sh_mesh_ndim(const sh_mesh *m) { return m->desc.ndim; }
int sh_mesh_size(const sh_mesh *m, int dim) { return (int)m->desc.size[dim]; }
int sh_mesh_coord(const sh_mesh *m, int dim) { return (int)m->coord[dim]; }
sh_comm *sh_mesh_comm(sh_mesh *m, int dim) { return m->comm[dim]; }
const ck_mesh *sh_mesh_desc(const sh_mesh *m) { return &m->desc; }

int sh_mesh_dim(const sh_mesh *m, const char *name)
{
    for (int d = 0; d < m->desc.ndim; d++)
        if (strcmp(m->desc.name[d], name) == 0)
            return d;
    return -1;
}
