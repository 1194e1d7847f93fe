/* A run's checkpoints are PREFIX<digits> only, ordered by the number (ck/steps.h):
 *   - ck__step_of takes "step-10" and "step-007", refuses "step-", "step-x", "step-1a",
 *     "step-10-2x8", "best-model", "ft-3", and a number past 2^64 - 1;
 *   - ck_root_steps lists the committed step-9, step-10 and step-100 in that order (by
 *     name, "step-9" sorts last), never best-model, step-x, step-10-2x8 (ckpt-reshard's
 *     default name), ft-12 (another prefix), nor a directory step-11 that holds no
 *     checkpoint;
 *   - ck_root_newest is step-100 (ft-12 for the prefix "ft-"; -ENOENT, naming the root,
 *     for a prefix nobody uses);
 *   - ck_root_prune keeping 2 removes step-9 alone and reports it; every other name
 *     stays and deep-verifies; keeping 0 and a prefix that is a path are -EINVAL, and
 *     remove nothing. */
#include "ck/catalog.h"
#include "ck/steps.h"
#include "ckpt_testlib.h"
#include "format/steps.h"

static const uint64_t seed = 7;
static char root[PATH_MAX];

static void save_named(const char *name)
{
    static const uint64_t shapes[1][2] = { { 3, 5 } };
    static const ck_dtype dtypes[1] = { CK_F32 };
    static const char *const pl[1] = { "S(0)" };
    tl_save_formula(root, name, "2", NULL, shapes, dtypes, pl, 1, seed);
}

static void note_removed(void *arg, const char *name)
{
    char *log = arg;
    strncat(log, name, 255 - strlen(log));
    strncat(log, " ", 255 - strlen(log));
}

int main(void)
{
    uint64_t s = 0;
    CHECK(ck__step_of("step-10", "step-", &s) && s == 10, "step-10: %llu",
          (unsigned long long)s);
    CHECK(ck__step_of("step-007", "step-", &s) && s == 7, "step-007: %llu",
          (unsigned long long)s);
    CHECK(ck__step_of("18446744073709551615", "", &s) && s == UINT64_MAX, "2^64 - 1");
    const char *not_steps[] = { "step-", "step-x", "step-1a", "step-10-2x8", "best-model",
                                "ft-3", "step-18446744073709551616",
                                "step-000000000000000000001" };
    for (size_t i = 0; i < sizeof not_steps / sizeof *not_steps; i++)
        CHECK(!ck__step_of(not_steps[i], "step-", NULL), "%s taken for a step", not_steps[i]);

    tl_tmpdir(root, sizeof root, "steps");
    const char *names[] = { "step-10", "best-model", "step-9", "step-x", "step-100",
                            "step-10-2x8", "ft-12" };
    for (size_t i = 0; i < sizeof names / sizeof *names; i++)
        save_named(names[i]);
    char dir[PATH_MAX + 16];
    snprintf(dir, sizeof dir, "%s/step-11", root);
    REQUIRE(mkdir(dir, 0755) == 0, "mkdir %s", dir);

    ck_err err = { 0 };
    ck_step_ckpt *v;
    size_t n;
    REQUIRE(ck_root_steps(root, "step-", &v, &n, &err) == 0, "%s", ck_err_msg(&err));
    CHECK(n == 3 && !strcmp(v[0].name, "step-9") && !strcmp(v[1].name, "step-10") &&
          !strcmp(v[2].name, "step-100") && v[2].step == 100,
          "steps: %zu, first %s", n, n ? v[0].name : "-");
    free(v);

    char name[CK_NAME_MAX];
    REQUIRE(ck_root_newest(root, "step-", name, &s, &err) == 0, "%s", ck_err_msg(&err));
    CHECK(!strcmp(name, "step-100") && s == 100, "newest: %s", name);
    REQUIRE(ck_root_newest(root, "ft-", name, NULL, &err) == 0, "%s", ck_err_msg(&err));
    CHECK(!strcmp(name, "ft-12"), "newest ft-: %s", name);
    ck_err_clear(&err);
    int r = ck_root_newest(root, "run2-", name, NULL, &err);
    CHECK(r == -ENOENT && strstr(err.msg, root) && strstr(err.msg, "run2-"),
          "newest of an unused prefix: %d (%s)", r, ck_err_msg(&err));

    ck_err_clear(&err);
    r = ck_root_prune(root, "step-", 0, NULL, NULL, NULL, &err);
    CHECK(r == -EINVAL && strstr(err.msg, "keep at least 1"), "keep 0: %d (%s)", r,
          ck_err_msg(&err));
    ck_err_clear(&err);
    r = ck_root_prune(root, "../step-", 1, NULL, NULL, NULL, &err);
    CHECK(r == -EINVAL, "a prefix that is a path: %d (%s)", r, ck_err_msg(&err));

    char log[256] = "";
    ck_err_clear(&err);
    r = ck_root_prune(root, "step-", 2, NULL, note_removed, log, &err);
    CHECK(r == 1 && !strcmp(log, "step-9 "), "prune: %d, removed \"%s\" (%s)", r, log,
          ck_err_msg(&err));
    snprintf(dir, sizeof dir, "%s/step-9", root);
    CHECK(access(dir, F_OK) != 0, "step-9 is still there");
    for (size_t i = 0; i < sizeof names / sizeof *names; i++)
        if (strcmp(names[i], "step-9") != 0)
            CHECK(tl_verify_deep(root, names[i], seed) == 0, "%s damaged or removed",
                  names[i]);
    snprintf(dir, sizeof dir, "%s/step-11", root);
    CHECK(access(dir, F_OK) == 0, "the directory step-11 was touched");
    if (tl_failures == 0)
        tl_rmtree(root);
    return tl_failures ? 1 : 0;
}
