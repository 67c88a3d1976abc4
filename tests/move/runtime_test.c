/* The driver functions the shim hands out to what is not the application
 * (docs/MOVING.md, section 7), with tests/move/move_client.c:
 *   - the occupancy calculator takes a function handle: through the shim
 *     (virtual handles) it answers what the driver answers without the
 *     shim, where it used to be refused (NVIDIA's cuBLAS asks it when a
 *     handle is created);
 *   - a library named like the CUDA runtime (libcudart.so.99, a stand-in
 *     that looks its entry points up as libcudart does) gets the real
 *     driver: its current context is the real one, not the application's
 *     virtual one; a thread it made current, calling the application's
 *     functions (the vendor libraries' case), finds the application's
 *     context there; the EST's moves are refused from then on, with the
 *     reason. Negative controls: EASYSCALE_RUNTIME_HANDLES=virtual gives it
 *     the application's handles and the move goes through; the same
 *     library under another name is the application's;
 *   - a vendor library (named like cuDNN) sees the physical devices while
 *     the application sees virtual ones, and shares its context;
 *   - a framework on the runtime (tests/move/rt_client.c: PyTorch's
 *     pattern) runs cuBLAS and cuDNN on the runtime's context, stream and
 *     memory, as EST 3 of 4 on one GPU. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "tests/harness.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define TMO 120
#define DEVICES "SIMCUDA_DEVICES=a100:1G,a100:1G"

static char preload[4096];

static const char *client(void) { return es_build_path("tests/move/move_client"); }

static void run(char *const argv[], es_proc_result_t *r, const char *e1, const char *e2)
{
    char *env[] = { preload, DEVICES, "EASYSCALE_LOG=info", (char *)e1, (char *)e2, NULL };
    assert_int_equal(es_run(argv, env, TMO, r), 0);
    if (r->status != 0)
        fail_msg("%s %s: exit %d\n%s", argv[0], argv[1], r->status, r->out);
}

/* move_client runtime with the stand-in runtime built as name. */
static void runtime_run(const char *name, const char *e1, es_proc_result_t *r)
{
    char lib[128];
    snprintf(lib, sizeof(lib), "tests/move/rt/%s", name);
    char *argv[] = { (char *)client(), "runtime", (char *)es_build_path(lib), NULL };
    run(argv, r, e1, NULL);
}

static const char *val(es_proc_result_t *r, const char *key, char *buf, size_t len)
{
    const char *v = es_find_last(r->out, key, buf, len);
    if (!v)
        fail_msg("no \"%s\" line in:\n%s", key, r->out);
    return v;
}

static void test_occupancy_through_the_shim(void **state)
{
    (void)state;
    char *argv[] = { (char *)client(), "occupancy", NULL };
    es_proc_result_t shim, plain;
    char a[128], b[128];
    run(argv, &shim, NULL, NULL);
    char *env[] = { DEVICES, NULL };
    assert_int_equal(es_run(argv, env, TMO, &plain), 0);
    assert_int_equal(plain.status, 0);
    val(&shim, "occupancy ", a, sizeof(a));
    val(&plain, "occupancy ", b, sizeof(b));
    if (strcmp(a, b) != 0)
        fail_msg("through the shim \"%s\", without it \"%s\"", a, b);
    int blocks = 0, grid = 0, block = 0;
    size_t avail = 0;
    assert_int_equal(sscanf(a, "blocks %d avail %zu grid %d block %d", &blocks, &avail, &grid,
                            &block), 4);
    assert_true(blocks > 0 && avail > 0 && grid > 0 && block > 0);
    assert_null(strstr(shim.out, "not wrapped"));
    /* a library's globals: the handle translated (simcuda answers not found
     * for a valid library, invalid handle for a virtual one) */
    assert_string_equal(val(&shim, "library global ", a, sizeof(a)), "CUDA_ERROR_NOT_FOUND");
    assert_string_equal(val(&plain, "library global ", b, sizeof(b)), "CUDA_ERROR_NOT_FOUND");
    es_proc_result_free(&shim);
    es_proc_result_free(&plain);
}

static void test_runtime_gets_the_real_driver(void **state)
{
    (void)state;
    es_proc_result_t r;
    char v[64];
    runtime_run("libcudart.so.99", NULL, &r);
    if (strcmp(val(&r, "runtime ctx ", v, sizeof(v)), "real") != 0)
        fail_msg("the runtime got the application's context:\n%s", r.out);
    /* a thread the runtime made current adopts the application's context */
    assert_string_equal(val(&r, "runtime thread ", v, sizeof(v)), "same");
    if (strcmp(val(&r, "move to 1: ", v, sizeof(v)), "0") == 0)
        fail_msg("the EST moved with the runtime holding real handles:\n%s", r.out);
    assert_non_null(strstr(r.out, "the CUDA runtime (libcudart) of this process holds real"));
    assert_non_null(strstr(r.out, "handles same"));
    es_proc_result_free(&r);
}

static void test_runtime_virtual_on_request(void **state)
{
    (void)state;
    es_proc_result_t r;
    char v[64];
    runtime_run("libcudart.so.99", "EASYSCALE_RUNTIME_HANDLES=virtual", &r);
    assert_string_equal(val(&r, "runtime ctx ", v, sizeof(v)), "same");
    assert_string_equal(val(&r, "move to 1: ", v, sizeof(v)), "0");
    es_proc_result_free(&r);
    /* the same code under another name is the application's */
    runtime_run("librtprobe.so", NULL, &r);
    assert_string_equal(val(&r, "runtime ctx ", v, sizeof(v)), "same");
    assert_string_equal(val(&r, "move to 1: ", v, sizeof(v)), "0");
    es_proc_result_free(&r);
    /* a value that is not one */
    char *argv[] = { (char *)client(), "runtime",
                     (char *)es_build_path("tests/move/rt/libcudart.so.99"), NULL };
    char *env[] = { preload, DEVICES, "EASYSCALE_RUNTIME_HANDLES=fake", NULL };
    assert_int_equal(es_run(argv, env, TMO, &r), 0);
    assert_int_equal(r.status, 2);
    assert_non_null(strstr(r.out, "EASYSCALE_RUNTIME_HANDLES"));
    es_proc_result_free(&r);
}

/* Four ESTs on one GPU: the EST of local rank 3 sees four devices and
 * its context on device 3; a vendor library sees the one GPU, the context
 * on device 0, and the application's context as that device's primary.
 * Negative control: the same code under a name that is not a vendor's
 * sees what the application sees. */
static void test_vendor_sees_physical_devices(void **state)
{
    (void)state;
    char *argv[] = { (char *)client(), "devices",
                     (char *)es_build_path("tests/move/rt/libcudnn_probe.so.99"), NULL };
    char *env[] = { preload, "SIMCUDA_DEVICES=a100:1G", "LOCAL_WORLD_SIZE=4", "LOCAL_RANK=3",
                    "EASYSCALE_LOG=warn", NULL };
    es_proc_result_t r;
    char v[128];
    assert_int_equal(es_run(argv, env, TMO, &r), 0);
    if (r.status != 0)
        fail_msg("exit %d\n%s", r.status, r.out);
    assert_string_equal(val(&r, "devices ", v, sizeof(v)), "count 4/1 dev 3/0 ctx same");
    assert_non_null(strstr(r.out, "handles same"));
    es_proc_result_free(&r);
    argv[2] = (char *)es_build_path("tests/move/rt/librtprobe.so");
    assert_int_equal(es_run(argv, env, TMO, &r), 0);
    assert_int_equal(r.status, 0);
    assert_string_equal(val(&r, "devices ", v, sizeof(v)), "count 4/4 dev 3/3 ctx same");
    es_proc_result_free(&r);
}

/* PyTorch's pattern: the runtime (real driver) makes the context, the
 * stream and the memory; cuBLAS and cuDNN (virtual handles) work on them,
 * EST 3 of 4 on one GPU. Without the adoption of the runtime's context
 * cublasCreate fails (no current context on the virtual side). */
static void test_framework_on_the_runtime(void **state)
{
    (void)state;
    char *argv[] = { (char *)es_build_path("tests/move/rt_client"),
                     (char *)es_build_path("tests/move/rt/libcudart.so.99"), NULL };
    char *env[] = { preload, "SIMCUDA_DEVICES=a100:1G", "LOCAL_WORLD_SIZE=4", "LOCAL_RANK=3",
                    "EASYSCALE_LOG=warn", NULL };
    es_proc_result_t r;
    assert_int_equal(es_run(argv, env, TMO, &r), 0);
    if (r.status != 0 || !strstr(r.out, "framework ok"))
        fail_msg("exit %d\n%s", r.status, r.out);
    assert_non_null(strstr(r.out, "runtime devices 1\n"));
    es_proc_result_free(&r);
    /* two GPUs: the runtime's device (3 % 2) is the EST's slot */
    env[1] = "SIMCUDA_DEVICES=a100:1G,a100:1G";
    env[4] = "EASYSCALE_LOG=info";
    assert_int_equal(es_run(argv, env, TMO, &r), 0);
    if (r.status != 0 || !strstr(r.out, "framework ok"))
        fail_msg("exit %d\n%s", r.status, r.out);
    assert_non_null(strstr(r.out, "runtime devices 2\n"));
    if (!strstr(r.out, "virtual device 1 selected: slot 1"))
        fail_msg("the runtime's device is not the EST's slot:\n%s", r.out);
    assert_null(strstr(r.out, "not on this EST's GPU"));
    es_proc_result_free(&r);
    /* a slot given (the controller's EASYSCALE_SLOT) that the framework
     * does not pick: said */
    char *env2[] = { preload, "SIMCUDA_DEVICES=a100:1G,a100:1G", "LOCAL_WORLD_SIZE=4",
                     "LOCAL_RANK=3", "EASYSCALE_SLOT=0", NULL };
    assert_int_equal(es_run(argv, env2, TMO, &r), 0);
    assert_int_equal(r.status, 0);
    if (!strstr(r.out, "made a context on GPU 1, not on this EST's GPU 0"))
        fail_msg("no word of the runtime's other GPU:\n%s", r.out);
    es_proc_result_free(&r);
}

int main(void)
{
    es_preload_env(es_build_path("lib/libeasyscale.so"), preload, sizeof(preload));
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_occupancy_through_the_shim),
        cmocka_unit_test(test_runtime_gets_the_real_driver),
        cmocka_unit_test(test_runtime_virtual_on_request),
        cmocka_unit_test(test_vendor_sees_physical_devices),
        cmocka_unit_test(test_framework_on_the_runtime),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
