/* Staging memory faulted in ahead, with huge pages and without.
 *
 * ck_staging_map, anonymous and as a sealed memfd, with huge pages allowed and with
 * the fallback forced (CK_STAGING_SMALL_PAGES): every page is resident when it
 * returns (mincore), the pages it reports are 4 KiB when asked, and the memory holds
 * what is written. Then a client opened with small_pages and one with the default:
 * ck_client_save_reserve makes the staging before any save and says once which pages
 * it got; saves through that staging commit the right bytes. */
#include <sys/mman.h>

#include "ck/staging.h"
#include "kc_testlib.h"

static void check_map(unsigned flags)
{
    ck_staging s = CK_STAGING_NONE;
    ck_err err = { 0 };
    const uint64_t want = (6u << 20) + 1;
    REQUIRE(ck_staging_map(&s, want, flags, &err) == 0, "flags %u: %s", flags, ck_err_msg(&err));
    CHECK(s.size >= want && s.size % (2u << 20) == 0, "flags %u: size %llu for %llu", flags,
          (unsigned long long)s.size, (unsigned long long)want);
    CHECK((s.fd >= 0) == !!(flags & CK_STAGING_MEMFD), "flags %u: fd %d", flags, s.fd);
    if (flags & CK_STAGING_SMALL_PAGES)
        CHECK(s.pages == CK_PAGES_SMALL, "flags %u: %s although 4 KiB pages were asked",
              flags, ck_staging_pages_name(s.pages));
    size_t pages = s.size / 4096;
    unsigned char *vec = malloc(pages);
    REQUIRE(vec && mincore(s.map, s.size, vec) == 0, "mincore: %s", strerror(errno));
    size_t absent = 0;
    for (size_t i = 0; i < pages; i++)
        absent += !(vec[i] & 1);
    CHECK(absent == 0, "flags %u (%s): %zu of %zu pages not faulted in", flags,
          ck_staging_pages_name(s.pages), absent, pages);
    free(vec);
    for (uint64_t o = 0; o < s.size; o += 8)
        *(uint64_t *)(s.map + o) = o * 0x9E3779B97F4A7C15ull;
    uint64_t bad = 0;
    for (uint64_t o = 0; o < s.size; o += 8)
        bad += *(uint64_t *)(s.map + o) != o * 0x9E3779B97F4A7C15ull;
    CHECK(bad == 0, "flags %u: %llu words read back wrong", flags, (unsigned long long)bad);
    printf("staging flags %u: %s\n", flags, ck_staging_pages_name(s.pages));
    ck_staging_unmap(&s);
    CHECK(s.map == NULL && s.fd == -1, "unmap left map %p fd %d", (void *)s.map, s.fd);
}

typedef struct logbook {
    char text[4096];
    int staging_lines;
} logbook;

static void note(void *arg, const char *msg)
{
    logbook *b = arg;
    if (strstr(msg, "checkpoint staging on ")) {
        b->staging_lines++;
        snprintf(b->text, sizeof b->text, "%s", msg);
    }
}

static const kc_tensor tensors[] = {
    { CK_F32, 2, { 700, 1031 }, "R" },
    { CK_F64, 1, { 5003 }, "R" },
};

static void client_round(bool small)
{
    char root[PATH_MAX];
    tl_tmpdir(root, sizeof root, small ? "kcstage-small" : "kcstage-huge");
    logbook book = { 0 };
    ck_client *cl;
    ck_err err = { 0 };
    ck_client_opts o = { .embedded = true, .small_pages = small, .writers = 2,
                         .hash_threads = 2, .log = note, .log_arg = &book };
    REQUIRE(ck_client_open(&cl, root, &o, &err) == 0, "open: %s", ck_err_msg(&err));
    ck_mesh mesh;
    REQUIRE(ck_mesh_parse("1", NULL, &mesh, NULL) == 0, "mesh");
    ck_client_save *sv;
    kc_part part = { 0 };
    REQUIRE(ck_client_begin(cl, &sv, "declared", 0, &mesh, 0, 1, &err) == 0, "begin: %s",
            ck_err_msg(&err));
    kc_declare(sv, &mesh, 0, tensors, 2, &part, false);
    REQUIRE(ck_client_save_reserve(sv, true, &err) == 0, "reserve: %s", ck_err_msg(&err));
    ck_client_save_free(sv);
    CHECK(book.staging_lines == 1, "%s: %d staging lines logged by the reservation, not 1",
          small ? "small" : "default", book.staging_lines);
    if (small)
        CHECK(strstr(book.text, "4 KiB pages (as asked)") != NULL, "forced fallback logged "
              "'%s'", book.text);
    printf("client %s: %s\n", small ? "small_pages" : "default", book.text);
    for (int i = 0; i < 3; i++) {
        char name[16];
        snprintf(name, sizeof name, "staged-%d", i);
        REQUIRE(ck_client_begin(cl, &sv, name, (uint64_t)i, &mesh, 0, 1, &err) == 0,
                "begin: %s", ck_err_msg(&err));
        kc_declare(sv, &mesh, 0, tensors, 2, &part, false);
        REQUIRE(ck_client_save_async(sv, &err) == 0 && ck_client_commit(sv, &err) == 0 &&
                ck_client_wait(sv, &err) == 0, "%s: %s", name, ck_err_msg(&err));
        ck_client_save_free(sv);
        CHECK(tl_verify_deep(root, name, KC_SEED) == 0, "%s does not hold the formula", name);
    }
    CHECK(book.staging_lines == 1, "the page size was logged %d times, not once",
          book.staging_lines);
    ck_client_close(cl);
    if (!tl_failures)
        tl_rmtree(root);
}

int main(void)
{
    kc_watchdog(50);
    for (unsigned f = 0; f < 4; f++)
        check_map(f);
    client_round(true);
    client_round(false);
    if (tl_failures)
        return 1;
    printf("ok: staging faulted in ahead, with huge pages allowed and forced off\n");
    return 0;
}
