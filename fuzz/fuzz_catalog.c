/* fuzz_catalog.c - the root catalog's reader on any records (docs/FORMAT.md, "The
 * catalog"). The input's records (fz_mdb.h) become ROOT/catalog.mdb of a scratch root,
 * listed as it is (ck_catalog_list) and as ckpt-inspect ROOT lists it (ck_catalog_view). */
#include <stdio.h>
#include <stdlib.h>

#include "ck/catalog.h"
#include "ck/ckpt.h"
#include "fz_mdb.h"
#include "format/layout.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static const char *const dbs[] = { "checkpoints" };

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (fz_mdb_build(CK_CATALOG, dbs, 1, data, size) < 0)
        return 0;
    ck_cat_entry *e;
    size_t n;
    ck_err err = { 0 };
    if (ck_catalog_list(fz_scratch(), &e, &n, &err) == 0)
        free(e);
    ck_cat_view v;
    if (ck_catalog_view(fz_scratch(), &v, &err) == 0)
        ck_cat_view_free(&v);
    return 0;
}
