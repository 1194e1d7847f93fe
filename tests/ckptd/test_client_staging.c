/* Staging memory faulted in ahead, with huge pages and without.
 *
 * ck__staging_map, anonymous and as a sealed memfd, with huge pages allowed and with
 * the fallback forced (CK_STAGING_SMALL_PAGES): every page is resident when it
 * returns (mincore), the pages it reports are 4 KiB when asked, and the memory holds
 * what is written. Then a client opened with small_pages and one with the default:
 * ck_client_reserve makes the staging before any save and says once which pages
 * it got; saves through that staging commit the right bytes. The client's staging
 * hooks (what a GPU rank registers for DMA) see every area once when it is mapped and
 * once before it is unmapped, with the same base and length, none of them in a save
 * that reuses its area; an area the hook refused is not reported unmapped. */
#include <pthread.h>
#include <sys/mman.h>

#include "io/staging.h"
#include "kc_testlib.h"

static void check_map(unsigned flags)
{
    ck__staging s = CK_STAGING_NONE;
    ck_err err = { 0 };
    const uint64_t want = (6u << 20) + 1;
    REQUIRE(ck__staging_map(&s, want, flags, &err) == 0, "flags %u: %s", flags, ck_err_msg(&err));
    CHECK(s.size >= want && s.size % (2u << 20) == 0, "flags %u: size %llu for %llu", flags,
          (unsigned long long)s.size, (unsigned long long)want);
    CHECK((s.fd >= 0) == !!(flags & CK_STAGING_MEMFD), "flags %u: fd %d", flags, s.fd);
    if (flags & CK_STAGING_SMALL_PAGES)
        CHECK(s.pages == CK_PAGES_SMALL, "flags %u: %s although 4 KiB pages were asked",
              flags, ck__staging_pages_name(s.pages));
    size_t pages = s.size / 4096;
    unsigned char *vec = malloc(pages);
    REQUIRE(vec && mincore(s.map, s.size, vec) == 0, "mincore: %s", strerror(errno));
    size_t absent = 0;
    for (size_t i = 0; i < pages; i++)
        absent += !(vec[i] & 1);
    CHECK(absent == 0, "flags %u (%s): %zu of %zu pages not faulted in", flags,
          ck__staging_pages_name(s.pages), absent, pages);
    free(vec);
    for (uint64_t o = 0; o < s.size; o += 8)
        *(uint64_t *)(s.map + o) = o * 0x9E3779B97F4A7C15ull;
    uint64_t bad = 0;
    for (uint64_t o = 0; o < s.size; o += 8)
        bad += *(uint64_t *)(s.map + o) != o * 0x9E3779B97F4A7C15ull;
    CHECK(bad == 0, "flags %u: %llu words read back wrong", flags, (unsigned long long)bad);
    printf("staging flags %u: %s\n", flags, ck__staging_pages_name(s.pages));
    ck__staging_unmap(&s);
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

/* What the staging hooks saw; the reserver thread maps too, hence the lock. */
typedef struct hookbook {
    pthread_mutex_t mu;
    void *base[8];
    size_t len[8];
    int mapped, unmapped, live, mismatched;
    bool refuse;                /* staging_mapped answers -EIO */
} hookbook;

static int on_mapped(void *arg, void *base, size_t len)
{
    hookbook *h = arg;
    pthread_mutex_lock(&h->mu);
    if (h->mapped < 8) {
        h->base[h->mapped] = base;
        h->len[h->mapped] = len;
    }
    h->mapped++;
    h->live++;
    pthread_mutex_unlock(&h->mu);
    return h->refuse ? -EIO : 0;
}

static void on_unmapping(void *arg, void *base, size_t len)
{
    hookbook *h = arg;
    pthread_mutex_lock(&h->mu);
    bool known = false;
    for (int i = 0; i < h->mapped && i < 8; i++)
        known |= h->base[i] == base && h->len[i] == len;
    h->mismatched += !known;
    h->unmapped++;
    h->live--;
    pthread_mutex_unlock(&h->mu);
}

static const kc_tensor tensors[] = {
    { CK_F32, 2, { 700, 1031 }, "R" },
    { CK_F64, 1, { 5003 }, "R" },
};

static void client_round(bool small, hookbook *hooks)
{
    char root[PATH_MAX];
    tl_tmpdir(root, sizeof root, small ? "kcstage-small" : "kcstage-huge");
    logbook book = { 0 };
    ck_client *cl;
    ck_err err = { 0 };
    ck_client_opts o = { .embedded = true, .small_pages = small, .writers = 2,
                         .hash_threads = 2, .log = note, .log_arg = &book,
                         .staging_mapped = on_mapped, .staging_unmapping = on_unmapping,
                         .staging_arg = hooks };
    REQUIRE(ck_client_open(&cl, root, &o, &err) == 0, "open: %s", ck_err_msg(&err));
    ck_mesh mesh;
    REQUIRE(ck_mesh_parse("1", NULL, &mesh, NULL) == 0, "mesh");
    ck_client_save *sv;
    kc_part part = { 0 };
    ck_decl *d = kc_decl(&mesh, tensors, 2);
    REQUIRE(ck_decl_seal(d, &err) == 0, "seal: %s", ck_err_msg(&err));
    ck_client_reserve(cl, ck_decl_file_bytes(d, 0), true);
    ck_decl_free(d);
    CHECK(book.staging_lines == 1, "%s: %d staging lines logged by the reservation, not 1",
          small ? "small" : "default", book.staging_lines);
    if (small)
        CHECK(strstr(book.text, "4 KiB pages (as asked)") != NULL, "forced fallback logged "
              "'%s'", book.text);
    printf("client %s: %s\n", small ? "small_pages" : "default", book.text);
    pthread_mutex_lock(&hooks->mu);
    int after_reserve = hooks->mapped;
    pthread_mutex_unlock(&hooks->mu);
    CHECK(after_reserve >= 1, "the reservation mapped staging but the hook saw nothing");
    for (int i = 0; i < 3; i++) {
        char name[16];
        snprintf(name, sizeof name, "staged-%d", i);
        REQUIRE(kc_begin(cl, &sv, name, (uint64_t)i, &mesh, 0, tensors, 2, &kc_job, &err) == 0,
                "begin: %s", ck_err_msg(&err));
        kc_declare(sv, &mesh, 0, tensors, 2, &part, false);
        REQUIRE(ck_client_submit(sv, &kc_copy, &err) == 0 && ck_client_commit(sv, &err) == 0 &&
                ck_client_wait(sv, CK_CLIENT_COMMITTED, &err) == 0, "%s: %s", name, ck_err_msg(&err));
        ck_client_save_free(sv);
        CHECK(tl_verify_deep(root, name, KC_SEED) == 0, "%s does not hold the formula", name);
    }
    CHECK(book.staging_lines == 1, "the page size was logged %d times, not once",
          book.staging_lines);
    ck_client_close(cl);
    /* The first save may grow into the second slot (double buffering); later saves of
     * the same size map nothing. */
    CHECK(hooks->mapped >= after_reserve && hooks->mapped <= 2, "%d areas mapped for 3 saves "
          "of one size (after the reservation: %d)", hooks->mapped, after_reserve);
    CHECK(hooks->unmapped == (hooks->refuse ? 0 : hooks->mapped) && hooks->mismatched == 0,
          "%s: %d mapped, %d unmapped, %d unmapped areas never seen mapped",
          hooks->refuse ? "refused" : "accepted", hooks->mapped, hooks->unmapped,
          hooks->mismatched);
    printf("staging hooks (%s): %d areas mapped, %d unmapped\n",
           hooks->refuse ? "refusing" : "accepting", hooks->mapped, hooks->unmapped);
    if (!tl_failures)
        tl_rmtree(root);
}

int main(void)
{
    kc_watchdog(50);
    for (unsigned f = 0; f < 4; f++)
        check_map(f);
    hookbook h1 = { .mu = PTHREAD_MUTEX_INITIALIZER }, h2 = h1, h3 = h1;
    h3.refuse = true;
    client_round(true, &h1);
    client_round(false, &h2);
    client_round(true, &h3);
    if (tl_failures)
        return 1;
    printf("ok: staging faulted in ahead, with huge pages allowed and forced off\n");
    return 0;
}
