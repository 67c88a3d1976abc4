/* The reduced determinism matrix (what CI runs as part of `make test`):
 * scripts/determinism-matrix --reduced on four simulated A100s and two
 * T4s with examples/train.py and 4 ESTs. Every check of a level must give
 * its level's checksum (4 ESTs on 4, on 1 GPU, the GPUs in reverse order;
 * scale events 4 -> 2 -> 1 -> 4 GPUs, an EST migrating every few steps,
 * the 4 time-sliced on one GPU; d2 on A100s and on a mix with T4s), every
 * negative control must differ (the job without libeasyscale.so, with
 * NCCL's own collectives, shrunk to 2 workers), and nothing is skipped.
 * Each verdict is read from verify's JSON
 * and checked here, not only its exit status.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tests/harness.h"

/* The matrix's time limit, within scripts/run-tests' 300 s for the whole
 * program (es_run refuses more): about 2 minutes on a busy 2-core machine. */
#define MATRIX_TIMEOUT 280

/* The value of "key" in the JSON object that starts at p (a string, or a
 * bare word), into buf. */
static const char *field(const char *p, const char *key, char *buf, size_t len)
{
    char pat[64];
    snprintf(pat, sizeof(pat), "\"%s\":", key);
    const char *end = strstr(p, "}"), *k = strstr(p, pat);
    buf[0] = '\0';
    if (!k || (end && k > end))
        return buf;
    k += strlen(pat);
    size_t n = 0;
    if (*k == '"') {
        k++;
        while (*k && *k != '"' && n + 1 < len)
            buf[n++] = *k++;
    } else {
        while (*k && *k != ',' && *k != '}' && n + 1 < len)
            buf[n++] = *k++;
    }
    buf[n] = '\0';
    return buf;
}

static void test_reduced_matrix(void **state)
{
    (void)state;
    char cmd[2048];
    es_proc_result_t r;
    snprintf(cmd, sizeof(cmd),
             "SIMCUDA_DEVICES=a100:8G,a100:8G,a100:8G,a100:8G,t4:8G,t4:8G '%s' --reduced --steps 20 "
             "--json", es_root_path("scripts/determinism-matrix"));
    assert_int_equal(es_run_sh(cmd, NULL, MATRIX_TIMEOUT, &r), 0);
    const char *json = strstr(r.out, "{\"pass\":");
    if (!json)
        fail_msg("no JSON from verify (exit %d):\n%s", r.status, r.out);
    int checks = 0, controls = 0, levels2 = 0, moved = 0;
    for (const char *p = strstr(json, "{\"name\":"); p; p = strstr(p + 1, "{\"name\":")) {
        char name[64], kind[16], level[8], state[16], verdict[64], why[256];
        field(p, "name", name, sizeof(name));
        field(p, "kind", kind, sizeof(kind));
        field(p, "level", level, sizeof(level));
        field(p, "state", state, sizeof(state));
        field(p, "verdict", verdict, sizeof(verdict));
        field(p, "why", why, sizeof(why));
        if (strcmp(state, "skipped") == 0) /* ESTs move: nothing may be skipped */
            fail_msg("%s skipped: %s\n%s", name, why, r.out);
        moved += strcmp(name, "d1-scale") == 0 || strcmp(name, "d1-migrate") == 0 ||
                 strcmp(name, "d1-tslice") == 0;
        if (strcmp(kind, "check") == 0) {
            checks++;
            levels2 += strcmp(level, "d2") == 0;
            if (strcmp(verdict, "reference") != 0 && strcmp(verdict, "match") != 0)
                fail_msg("check %s: %s %s\n%s", name, verdict, why, r.out);
        } else {
            controls++;
            if (strcmp(verdict, "differs (expected)") != 0)
                fail_msg("control %s: %s %s\n%s", name, verdict, why, r.out);
        }
    }
    /* the reduced matrix of 4 A100s + 2 T4s: 4on4, 4on1, order, scale events,
     * migrations, time-slicing, d2 x 2 at least; off, nccl, elastic */
    if (checks < 8 || levels2 < 2 || controls != 3 || moved != 3)
        fail_msg("%d checks (%d d2), %d controls:\n%s", checks, levels2, controls, r.out);
    assert_non_null(strstr(json, "{\"pass\":true"));
    assert_int_equal(r.status, 0);
    es_proc_result_free(&r);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_reduced_matrix),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
