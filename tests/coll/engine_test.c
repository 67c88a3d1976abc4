/* Tests of the virtual collectives (coll/, intercept/nccl.c,
 * kernels/reduce*) and their settings.
 *
 * Unit: the settings (EASYSCALE_COLLECTIVES, _COLL_TRANSPORT,
 * _COLL_TIMEOUT, _COLL_CHUNK, _SLOT parsed strictly); the element
 * arithmetic of kernels/reduce_kernels.h (what the kernel, its twin and the
 * host transport compute) against tests/coll/refarith.h, an independent
 * writing of the documented rule: every half, bfloat16 and fp8 code
 * decoded, every rounding boundary of those formats encoded, and every
 * datatype x operation step on random and special operands; the NaN rule
 * of the 16-bit conversions both kernel headers share (lib/half.h) against
 * simcuda's references, and the collectives' canonical NaN results.
 *
 * Unit: the host transport's set-up (coll/transport/host.o, its driver
 * table filled by the test): a refused registration of the staging fails
 * it (copies from pageable staging could carry stale data).
 *
 * Integration (whole processes under libeasyscale.so, simcuda):
 *  - tests/coll/coll_client "types": every datatype and operation through
 *    all-reduce, reduce and reduce-scatter, bit for bit against the
 *    reference folded in rank order on the host, with 4 ranks on 4, 2 and 1
 *    GPUs and 8 ranks on 3, through the three transports (host, device,
 *    nccl: the NCCL carriers, in a chain of whole hops where ranks are
 *    interleaved over the GPUs, pipelined where each GPU holds one block)
 *    and several staging chunk sizes: the same digest everywhere (same bits
 *    whichever transport and whoever computes a shard). The device and
 *    nccl transports mostly run with EASYSCALE_MOVE=off (auto takes nccl,
 *    also with moves on); a run that asked for one of them
 *    fails on the engine's fallback warning; and one rank alone on the
 *    nccl and host transports (the nccl one's out-of-place all-reduce
 *    left its output unwritten once). Negative control: the same
 *    client on plain NCCL (no shim, 4 GPUs) misses the rank-order
 *    reference.
 *  - "coll": broadcast, gathers, scatters, in-place buffers, groups with
 *    collectives and send/recv pairs, several streams and communicators,
 *    split, non-blocking init, argument errors; "initall"; "coll" without
 *    privileges (every capability dropped: simcuda's servers must find the
 *    unlinked staging's file through the rank's descriptor).
 *  - tests/clients/nccl_vclient (NVIDIA's headers only, rank r on device
 *    r % count) on 2 and 1 GPUs, over the NCCL carriers on 4, 2 and 1, and
 *    with simcuda's isolated device memory and adversarial scheduling:
 *    passes, same checksum; without the shim on
 *    2 GPUs NCCL refuses the placement ("Duplicate GPU detected"), and on 4
 *    GPUs its sums are not the rank-ordered ones.
 *  - faults: a killed rank, an aborted rank, a live rank that stays away
 *    (EASYSCALE_COLL_TIMEOUT), a rank killed inside a 32 MiB all-reduce
 *    (nccl: the other carriers wait in NCCL calls until the carrier
 *    communicator is aborted), every transport: the others fail
 *    (ncclRemoteError / ncclSystemError) without hanging; no shared-memory segment is left;
 *    a segment left by a rank that died before the others joined is
 *    removed by the next ncclGetUniqueId.
 *  - a stream under capture (simcuda's stream capture, GLOBAL mode): an
 *    all-reduce, alone and in a group, gets ncclInvalidUsage and a log line
 *    on every rank, both transports; the capture survives (a graph of the
 *    client's own nodes, replayed) and the communicator still sums.
 *    Negative control: without the shim the client's check fails.
 *  - stream order, no timing: "order" (4 ranks on 2 GPUs, host transport,
 *    device transport, device transport under SIMCUDA_CHAOS; the
 *    transport read from the shim's log): rank 0's all-reduce returns
 *    before any peer has called (the peers call only after it returned;
 *    a blocking call would leave them waiting until they give up), its
 *    stream is then not done, and a later async copy on that stream
 *    sees the rank-ordered sum; while it waits, a host function rank 0
 *    launches on another stream runs. Under simcuda's trace, the device
 *    transport's runs enqueue no host function but that one (ordering
 *    between ranks is stream memory operations), the host transport's
 *    many. Negative controls: "order-blocking"
 *    (rank 0 blocks on its stream after the call) fails on the peers'
 *    wait; without the shim (4 GPUs) the sums are not rank-ordered.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "coll/coll_int.h"
#include "device/vdev.h"
#include "kernels/portable_kernels.h"
#include "kernels/reduce_kernels.h"
#include "shim/config.h"
#include "shim/log.h"
#include "shim/real.h"
#include "sim/common/f16_impl.h"
#include "tests/coll/refarith.h"
#include "tests/harness.h"

#define TIMEOUT 240

/* device/vdev.o's shim dependencies (its pure rules need none of them). */
es_real_cuda_t es_real_cuda;
void es_log_write(int level, const char *fmt, ...)
{
    (void)level, (void)fmt;
}

/* ---- the host transport's staging registration ------------------------------------
 * coll/transport/host.o is linked in: its set-up reaches the driver only
 * through es_real_cuda (above), which the test fills; what the data path
 * needs from the rest of the engine is stubbed and must not be called. */
#define ES_UNCALLED(ret, name, ...)                                                       \
    ret name(__VA_ARGS__)                                                                 \
    {                                                                                     \
        fail_msg("%s called by the host transport's set-up", #name);                   \
        for (;;)                                                                          \
            ;                                                                             \
    }
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wunused-parameter"
ES_UNCALLED(es_step_t *, es_step_new, es_comm_t *c)
ES_UNCALLED(int, es_step_add, es_step_t *st, const es_action_t *a)
ES_UNCALLED(CUresult, es_step_launch, es_step_t *st, CUstream s)
ES_UNCALLED(int, es_coll_parked_vdev, void)
ES_UNCALLED(int, es_coll_parked_host, void)
ES_UNCALLED(size_t, es_coll_type_size, int dtype)
ES_UNCALLED(void, es_coll_shard, size_t count, size_t es, int rank, int n, size_t *lo, size_t *hi)
ES_UNCALLED(CUresult, es_p2p_rounds, es_comm_t *c, const es_p2p_t *ops, int n, CUstream s,
            es_p2p_copy_fn in, es_p2p_copy_fn out)
ES_UNCALLED(int, es_swap_park_read, int vdev, void *dst, CUdeviceptr src, size_t n)
ES_UNCALLED(int, es_swap_park_write, int vdev, CUdeviceptr dst, const void *src, size_t n)
#pragma GCC diagnostic pop

static char g_last_error[256];
void es_coll_error(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(g_last_error, sizeof(g_last_error), fmt, ap);
    va_end(ap);
}

static CUresult g_reg_result;
static int g_registered, g_unregistered;
static void *g_reg_at;
static size_t g_reg_len;

static CUresult fake_register(void *p, size_t n, unsigned flags)
{
    (void)flags;
    g_reg_at = p;
    g_reg_len = n;
    g_registered += g_reg_result == CUDA_SUCCESS;
    return g_reg_result;
}

static CUresult fake_unregister(void *p)
{
    assert_ptr_equal(p, g_reg_at);
    g_unregistered++;
    return CUDA_SUCCESS;
}

/* The staging must be registered: copies from it to the device are
 * enqueued before the steps that fill it have run, which a driver may
 * serve at once from pageable memory (stale data: a silently wrong sum).
 * So a refused registration fails the set-up (the communicator then fails
 * on every rank with an NCCL error); an accepted one is undone at
 * teardown. */
static void test_host_staging_registration(void **state)
{
    (void)state;
    static _Alignas(4096) char seg[4 * 4096];
    es_seg_hdr_t *h = (es_seg_hdr_t *)seg;
    memset(seg, 0, sizeof(seg));
    h->off_data = 4096;
    h->data_size = 3 * 4096;
    es_comm_t c;
    memset(&c, 0, sizeof(c));
    c.seg.h = h;
    c.nranks = 4;
    c.chunk = 1024;
    c.p2p_chunk = 256;
    es_real_cuda.cuMemHostRegister_v2 = fake_register;
    es_real_cuda.cuMemHostUnregister = fake_unregister;

    static const CUresult refusals[] = { CUDA_ERROR_OPERATING_SYSTEM, CUDA_ERROR_NOT_SUPPORTED,
                                         CUDA_ERROR_OUT_OF_MEMORY };
    for (size_t i = 0; i < sizeof refusals / sizeof refusals[0]; i++) {
        g_reg_result = refusals[i];
        g_last_error[0] = '\0';
        g_unregistered = 0;
        int rc = es_coll_tp_host.setup(&c);
        if (rc == 0)
            fail_msg("registration refused (CUresult %d): the set-up went on", (int)refusals[i]);
        assert_true(rc < 0);
        assert_ptr_equal(g_reg_at, seg + 4096);
        assert_int_equal(g_reg_len, 3 * 4096);
        assert_non_null(strstr(g_last_error, "register")); /* ncclGetLastError says why */
        es_coll_tp_host.teardown(&c);
        assert_int_equal(g_unregistered, 0);
        assert_null(c.tpd);
    }
    g_reg_result = CUDA_SUCCESS;
    g_registered = g_unregistered = 0;
    assert_int_equal(es_coll_tp_host.setup(&c), 0);
    assert_int_equal(g_registered, 1);
    es_coll_tp_host.teardown(&c);
    assert_int_equal(g_unregistered, 1);
    assert_null(c.tpd);
    memset(&es_real_cuda, 0, sizeof(es_real_cuda));
}

/* ---- settings ------------------------------------------------------------------- */

static const char *const g_vars[] = { "EASYSCALE_DETERMINISM", "EASYSCALE_COLLECTIVES",
                                      "EASYSCALE_COLL_TRANSPORT", "EASYSCALE_COLL_TIMEOUT",
                                      "EASYSCALE_COLL_CHUNK", "EASYSCALE_SLOT" };

static int parse1(const char *var, const char *val, es_config_t *c, char *msg)
{
    for (size_t i = 0; i < sizeof g_vars / sizeof g_vars[0]; i++)
        unsetenv(g_vars[i]);
    if (val)
        setenv(var, val, 1);
    int rc = es_config_parse(c, msg, 256);
    unsetenv(var);
    return rc;
}

static void test_config(void **state)
{
    (void)state;
    es_config_t c;
    char msg[256];
    assert_int_equal(parse1("EASYSCALE_COLLECTIVES", NULL, &c, msg), 0);
    assert_int_equal(c.collectives, ES_COLL_VIRTUAL); /* default at d1 */
    assert_int_equal(c.coll_transport, ES_COLL_TP_AUTO);
    assert_int_equal(c.coll_timeout_s, 30);
    assert_int_equal((int)c.coll_chunk, 0);
    assert_string_equal(c.slot, "");
    assert_int_equal(parse1("EASYSCALE_DETERMINISM", "off", &c, msg), 0);
    assert_int_equal(c.collectives, ES_COLL_NCCL); /* off keeps plain NCCL */
    assert_int_equal(parse1("EASYSCALE_COLLECTIVES", "nccl", &c, msg), 0);
    assert_int_equal(c.collectives, ES_COLL_NCCL);
    setenv("EASYSCALE_DETERMINISM", "off", 1);
    setenv("EASYSCALE_COLLECTIVES", "virtual", 1);
    assert_int_equal(es_config_parse(&c, msg, sizeof msg), 0);
    assert_int_equal(c.collectives, ES_COLL_VIRTUAL);
    unsetenv("EASYSCALE_DETERMINISM");
    static const char *const bad_coll[] = { "Virtual", "", "nccl ", "ncc" };
    for (size_t i = 0; i < 4; i++) {
        assert_int_equal(parse1("EASYSCALE_COLLECTIVES", bad_coll[i], &c, msg), -EINVAL);
        assert_non_null(strstr(msg, "EASYSCALE_COLLECTIVES"));
    }
    assert_int_equal(parse1("EASYSCALE_COLL_TRANSPORT", "host", &c, msg), 0);
    assert_int_equal(c.coll_transport, ES_COLL_TP_HOST);
    assert_int_equal(parse1("EASYSCALE_COLL_TRANSPORT", "device", &c, msg), 0);
    assert_int_equal(c.coll_transport, ES_COLL_TP_DEVICE);
    assert_int_equal(parse1("EASYSCALE_COLL_TRANSPORT", "nccl", &c, msg), 0);
    assert_int_equal(c.coll_transport, ES_COLL_TP_NCCL);
    assert_int_equal(parse1("EASYSCALE_COLL_TRANSPORT", "gpu", &c, msg), -EINVAL);
    assert_int_equal(parse1("EASYSCALE_COLL_TIMEOUT", "1", &c, msg), 0);
    assert_int_equal(c.coll_timeout_s, 1);
    assert_int_equal(parse1("EASYSCALE_COLL_TIMEOUT", "86400", &c, msg), 0);
    static const char *const bad_to[] = { "0", "86401", "-5", "2x", "", " 3", "1e3" };
    for (size_t i = 0; i < 7; i++) {
        assert_int_equal(parse1("EASYSCALE_COLL_TIMEOUT", bad_to[i], &c, msg), -EINVAL);
        assert_non_null(strstr(msg, "EASYSCALE_COLL_TIMEOUT"));
    }
    assert_int_equal(parse1("EASYSCALE_COLL_CHUNK", "4096", &c, msg), 0);
    assert_int_equal((int)c.coll_chunk, 4096);
    assert_int_equal(parse1("EASYSCALE_COLL_CHUNK", "4095", &c, msg), -EINVAL);
    assert_int_equal(parse1("EASYSCALE_COLL_CHUNK", "4100", &c, msg), -EINVAL);
    assert_non_null(strstr(msg, "multiple of 64"));
    assert_int_equal(parse1("EASYSCALE_COLL_CHUNK", "2147483648", &c, msg), -EINVAL);
    assert_int_equal(parse1("EASYSCALE_SLOT", "0", &c, msg), 0);
    assert_string_equal(c.slot, "0");
    assert_int_equal(parse1("EASYSCALE_SLOT", "1023", &c, msg), 0);
    assert_int_equal(parse1("EASYSCALE_SLOT", "GPU-0123abcd-4567-89ef-0123-456789ABCDEF", &c, msg),
                     0);
    static const char *const bad_slot[] = { "1024", "-1", "", "1 ", "x", "GPU-0123",
                                            "GPU-0123abcd-4567-89ef-0123-456789abcdeg",
                                            "GPU-0123abcd44567-89ef-0123-456789abcdef" };
    for (size_t i = 0; i < 8; i++) {
        assert_int_equal(parse1("EASYSCALE_SLOT", bad_slot[i], &c, msg), -EINVAL);
        assert_non_null(strstr(msg, "EASYSCALE_SLOT"));
    }
}

/* The placement rules (device/vdev.h). */
static void test_vdev_rules(void **state)
{
    (void)state;
    assert_int_equal(es_vdev_count_for(2, 0), 2);
    assert_int_equal(es_vdev_count_for(2, 4), 4);
    assert_int_equal(es_vdev_count_for(8, 4), 8);
    /* 4 ESTs on 2 GPUs: 2 each; on 3 GPUs: slot 0 holds ranks 0 and 3 */
    assert_int_equal(es_vdev_share_for(2, 4, 0, 0), 2);
    assert_int_equal(es_vdev_share_for(2, 4, 1, 0), 2);
    assert_int_equal(es_vdev_share_for(3, 4, 0, 0), 2);
    assert_int_equal(es_vdev_share_for(3, 4, 2, 0), 1);
    assert_int_equal(es_vdev_share_for(1, 8, 0, 0), 8);
    assert_int_equal(es_vdev_share_for(3, 4, 2, 1), 2); /* EASYSCALE_SLOT: ceil(4 / 3) */
    assert_int_equal(es_vdev_share_for(2, 0, 0, 0), 1); /* LOCAL_WORLD_SIZE unknown */
}

/* ---- element arithmetic: reduce_kernels.h against refarith.h ---------------------- */

static uint64_t kern_enc(int dt, float f) { return es_small_enc(dt, f); }

/* Every code decodes to the reference's value (NaN to a NaN). */
static void test_decode_all_codes(void **state)
{
    (void)state;
    static const int dts[4] = { 6, 9, 10, 11 };
    for (int k = 0; k < 4; k++) {
        int dt = dts[k];
        unsigned ncodes = tsize[dt] == 2 ? 65536 : 256;
        for (unsigned c = 0; c < ncodes; c++) {
            float a = es_small_dec(dt, c), b = ref_dec(dt, c);
            if (isnan(b)) {
                assert_true(isnan(a));
                continue;
            }
            if (f_bits(a) != f_bits(b))
                fail_msg("dtype %d code 0x%x: %a, reference %a", dt, c, a, b);
        }
    }
}

/* Encoding at and around every rounding boundary (midpoints between
 * neighbouring codes, one float ulp either side), the largest values,
 * infinities and NaN. */
static void test_encode_boundaries(void **state)
{
    (void)state;
    static const int dts[4] = { 6, 9, 10, 11 };
    long checked = 0;
    for (int k = 0; k < 4; k++) {
        int dt = dts[k];
        unsigned ncodes = tsize[dt] == 2 ? 32768 : 128; /* positive codes */
        for (unsigned c = 0; c + 1 < ncodes; c++) {
            double lo = ref_dec(dt, c), hi = ref_dec(dt, c + 1);
            if (isnan(lo) || isnan(hi) || isinf(hi))
                continue;
            float mid = (float)((lo + hi) / 2); /* exact: a few more bits than the format */
            float cands[7] = { (float)lo, mid, nextafterf(mid, 0), nextafterf(mid, INFINITY),
                               (float)hi, -mid, nextafterf(-mid, -INFINITY) };
            for (int j = 0; j < 7; j++) {
                uint64_t a = kern_enc(dt, cands[j]), b = ref_enc(dt, cands[j]);
                if (a != b)
                    fail_msg("dtype %d: encode(%a) = 0x%llx, reference 0x%llx", dt, cands[j],
                             (unsigned long long)a, (unsigned long long)b);
                checked++;
            }
        }
        static const float sp[] = { 0.0f, -0.0f, INFINITY, -INFINITY, 3.0e38f, -3.0e38f,
                                    65504.0f, 65520.0f, 448.0f, 464.0f, 57344.0f, 61440.0f,
                                    1e-45f, 1e-40f, 5.9604645e-08f, 2.9802322e-08f };
        for (size_t j = 0; j < sizeof sp / sizeof sp[0]; j++)
            assert_int_equal(kern_enc(dt, sp[j]), ref_enc(dt, sp[j]));
        assert_int_equal(kern_enc(dt, NAN), ref_enc(dt, NAN));
        assert_int_equal(kern_enc(dt, -NAN), ref_enc(dt, NAN));
    }
    assert_true(checked > 300000);
}

/* The NaN rule of the 16-bit conversions (lib/half.h, shared by the
 * collectives and d2's GEMM / convolutions, which store every NaN as the
 * canonical one): narrowing keeps a NaN quiet
 * with its sign and top payload bits, as simcuda's cuBLAS / cuDNN /
 * cuBLASLt (sim/common/f16_impl.h's float path) do; widening keeps all of
 * it. The collectives still store every NaN result as the canonical NaN
 * (0x7e00, 0x7fc0), as simcuda's NCCL does (its double path): their encoder
 * canonicalises before it narrows. Until lib/half.h the collectives'
 * own conversions made every NaN canonical; their outputs are unchanged. */
static void test_half_nan_rule(void **state)
{
    (void)state;
    const float qn = bits_f(0xffa12345u);  /* quiet, negative, with a payload */
    const float sn = bits_f(0x7f812345u);  /* signalling, with a payload */
    /* narrowing: sign and top payload bits kept, made quiet */
    assert_int_equal(es_half_f_to_f16(qn), 0xff09);
    assert_int_equal(es_half_f_to_bf16(qn), 0xffe1);
    assert_int_equal(es_half_f_to_f16(sn), 0x7e09);
    assert_int_equal(es_half_f_to_bf16(sn), 0x7fc1);
    /* widening: exact, payload and sign kept */
    assert_int_equal(f_bits(es_half_f16_to_f(0xfd09)), 0xffa12000u);
    assert_int_equal(f_bits(es_half_bf16_to_f(0xffe1)), 0xffe10000u);
    /* d2's GEMM / convolution store (kernels/portable_kernels.h): every
     * NaN canonical, as the collectives store them (processors differ in
     * the NaNs they make: the H200's were not the host's) */
    uint16_t out[2];
    es_st(out, 0, ES_DT_F16, qn);
    es_st(out, 1, ES_DT_BF16, qn);
    assert_int_equal(out[0], 0x7e00);
    assert_int_equal(out[1], 0x7fc0);
    float o32;
    es_st(&o32, 0, ES_DT_F32, sn);
    assert_int_equal(f_bits(o32), 0x7fc00000u);
    /* simcuda's references: cuBLAS (float) the same rule, NCCL (double)
     * canonical */
    for (int i = 0; i < 2; i++) {
        float f = i ? sn : qn;
        assert_int_equal(es_half_f_to_f16(f), sim_f16_float_to_half_(f));
        assert_int_equal(es_half_f_to_bf16(f), sim_f16_float_to_bf16_(f));
        assert_int_equal(sim_f16_double_to_half_(f), 0x7e00);
        assert_int_equal(sim_f16_double_to_bf16_(f), 0x7fc0);
    }
    /* the collectives: canonical, whatever NaN comes in */
    assert_int_equal(es_small_enc(ES_RT_F16, qn), 0x7e00);
    assert_int_equal(es_small_enc(ES_RT_BF16, qn), 0x7fc0);
    assert_int_equal(es_small_enc(ES_RT_F16, sn), 0x7e00);
    assert_int_equal(es_small_enc(ES_RT_BF16, sn), 0x7fc0);
    assert_int_equal(es_red_finish(ES_RT_BF16, ES_RO_SUM, 1,
                                   es_red_step(ES_RT_BF16, ES_RO_SUM, 0xffe1, 0x3f80)), 0x7fc0);
    assert_int_equal(es_red_finish(ES_RT_F16, ES_RO_SUM, 1,
                                   es_red_step(ES_RT_F16, ES_RO_SUM, 0x3c00, 0xfd09)), 0x7e00);
    /* max picks the NaN's own bits; the finish makes them canonical */
    assert_int_equal(es_red_step(ES_RT_F16, ES_RO_MAX, 0xff09, 0x3c00), 0xff09);
    assert_int_equal(es_red_finish(ES_RT_F16, ES_RO_MAX, 1, 0xff09), 0x7e00);
    assert_int_equal(es_red_finish(ES_RT_BF16, ES_RO_AVG, 2, 0xffe1), 0x7fc0);
}

/* Random and special operands: every datatype x operation step, the
 * PreMulSum scaling and the finish (avg, NaN canonical). */
static void test_steps(void **state)
{
    (void)state;
    uint64_t x = 12345;
    for (int dt = 0; dt < 12; dt++)
        for (int op = OP_SUM; op <= OP_AVG; op++)
            for (int t = 0; t < 20000; t++) {
                x = x * 6364136223846793005ULL + 1442695040888963407ULL;
                uint64_t a = (x >> 3) & (tsize[dt] == 8 ? ~0ULL : (1ULL << (8 * tsize[dt])) - 1);
                x = x * 6364136223846793005ULL + 1442695040888963407ULL;
                uint64_t b = (x >> 5) & (tsize[dt] == 8 ? ~0ULL : (1ULL << (8 * tsize[dt])) - 1);
                int sop = op == OP_AVG ? OP_SUM : op;
                uint64_t ks = es_red_step(dt, sop == OP_SUM ? ES_RO_SUM : sop, a, b);
                uint64_t rs = ref_step(dt, sop, a, b);
                uint64_t kf = es_red_finish(dt, op, 3, ks), rf = ref_finish(dt, op, 3, rs);
                if (kf != rf)
                    fail_msg("dtype %d op %d: 0x%llx, 0x%llx -> 0x%llx, reference 0x%llx", dt, op,
                             (unsigned long long)a, (unsigned long long)b,
                             (unsigned long long)kf, (unsigned long long)rf);
                uint64_t kp = es_red_finish(dt, ES_RO_SUM, 1, es_red_scale(dt, a, b));
                uint64_t rp = ref_finish(dt, OP_SUM, 1, ref_step(dt, OP_PROD, a, b));
                if (kp != rp)
                    fail_msg("dtype %d scale 0x%llx by 0x%llx: 0x%llx, reference 0x%llx", dt,
                             (unsigned long long)a, (unsigned long long)b,
                             (unsigned long long)kp, (unsigned long long)rp);
            }
}

/* ---- whole processes -------------------------------------------------------------- */

static char g_pre[1200];

/* The shim's LD_PRELOAD entry into g_pre. A shim that is not built fails
 * the test: the loader only warns about a preload that does not exist, and
 * the run would go on without it. */
static void need_shim(void)
{
    es_preload_env(es_need_built("lib/libeasyscale.so"), g_pre, sizeof g_pre);
}

/* Runs a program (shim: preloaded) with SIMCUDA_DEVICES=devs and up to
 * three more assignments. */
static es_proc_result_t run_prog(int shim, const char *devs, char *const argv[], const char *x1,
                                 const char *x2, const char *x3)
{
    char dv[256];
    snprintf(dv, sizeof dv, "SIMCUDA_DEVICES=%s", devs);
    /* Without the shim the collectives are simcuda's NCCL (the negative
     * controls); the slot of the preload entry then repeats the devices. */
    char *env[] = { dv, "CUDA_VISIBLE_DEVICES=", "LOCAL_WORLD_SIZE=", "LOCAL_RANK=",
                    shim ? g_pre : dv, (char *)x1, (char *)x2, (char *)x3,
                    NULL };
    es_proc_result_t r;
    assert_int_equal(es_run(argv, env, TIMEOUT, &r), 0);
    return r;
}

static es_proc_result_t run_client(int shim, const char *mode, int n, const char *devs,
                                   const char *x1, const char *x2, const char *x3)
{
    char nb[16];
    snprintf(nb, sizeof nb, "%d", n);
    char *argv[] = { (char *)es_build_path("tests/coll/coll_client"), (char *)mode, nb, NULL };
    return run_prog(shim, devs, argv, x1, x2, x3);
}

static int client_ok(const es_proc_result_t *r, int n)
{
    int ok = 0;
    for (const char *p = r->out; (p = strstr(p, ": ok\n")) != NULL; p++)
        ok++;
    return r->status == 0 && ok == n && strstr(r->out, "done") && !strstr(r->out, "FAIL");
}

static void expect_client(es_proc_result_t *r, int n, const char *what)
{
    if (!client_ok(r, n))
        fprintf(stderr, "---- %s (status %d) ----\n%s\n----\n", what, r->status, r->out);
    assert_true(client_ok(r, n));
}

/* A run that asked for the device or nccl transport got it: the engine
 * warns (rank 0, "... is not possible ...: host transport") when it falls
 * back (a GPU that cannot map another's, no libnccl, time-sliced ESTs). */
static void expect_transport(const es_proc_result_t *r, const char *x1)
{
    if (!x1 || (strcmp(x1, "EASYSCALE_COLL_TRANSPORT=device") != 0 &&
                strcmp(x1, "EASYSCALE_COLL_TRANSPORT=nccl") != 0))
        return;
    char warn[96];
    snprintf(warn, sizeof warn, "%s is not possible", x1);
    if (strstr(r->out, warn))
        fprintf(stderr, "---- asked for %s ----\n%s\n----\n", x1, r->out);
    assert_null(strstr(r->out, warn));
}

static void digest_of(const es_proc_result_t *r, char *buf, size_t len)
{
    assert_non_null(es_find_last(r->out, "digest ", buf, len));
}

#define TWO "a100:4G,a100:4G"
#define THREE "a100:4G,a100:4G,a100:4G"
#define FOUR "a100:4G,a100:4G,a100:4G,a100:4G"

static void test_types(void **state)
{
    (void)state;
    need_shim();
    /* With simcuda's isolated device memory (a host access to device memory
     * faults) and adversarial stream scheduling: the engine never touches
     * device memory from the host and orders its copies on the streams. */
    static const struct {
        int n;
        const char *devs, *x1, *x2, *x3;
    } runs[] = {
        { 4, TWO, NULL, NULL, NULL },
        { 4, TWO, "EASYSCALE_COLL_TRANSPORT=host", NULL, NULL },
        { 4, TWO, "EASYSCALE_COLL_TRANSPORT=host", "EASYSCALE_COLL_CHUNK=4096", NULL },
        { 4, TWO, "EASYSCALE_COLL_TRANSPORT=device", "EASYSCALE_MOVE=off", "EASYSCALE_COLL_CHUNK=4096" },
        { 4, TWO, "EASYSCALE_COLL_TRANSPORT=device", "EASYSCALE_MOVE=off", "SIMCUDA_CHAOS=5" },
        { 4, TWO, "EASYSCALE_COLL_TRANSPORT=host", "SIMCUDA_ISOLATION=1", "SIMCUDA_CHAOS=5" },
        { 4, FOUR, NULL, NULL, NULL },
        { 4, "a100:4G", "EASYSCALE_COLL_CHUNK=65536", NULL, NULL },
        { 8, THREE, NULL, NULL, NULL },
        { 8, THREE, "EASYSCALE_COLL_TRANSPORT=host", "EASYSCALE_COLL_CHUNK=8192", NULL },
        /* the NCCL carriers: ranks interleaved over 2 and 3 GPUs (a chain
         * of whole hops), one per GPU (pipelined), all on one GPU */
        { 4, TWO, "EASYSCALE_COLL_TRANSPORT=nccl", "EASYSCALE_MOVE=off", "EASYSCALE_COLL_CHUNK=4096" },
        { 4, TWO, "EASYSCALE_COLL_TRANSPORT=nccl", "EASYSCALE_MOVE=off", "SIMCUDA_CHAOS=7" },
        { 4, FOUR, "EASYSCALE_COLL_TRANSPORT=nccl", "EASYSCALE_MOVE=off", NULL },
        { 4, "a100:4G", "EASYSCALE_COLL_TRANSPORT=nccl", "EASYSCALE_MOVE=off", NULL },
        { 8, THREE, "EASYSCALE_COLL_TRANSPORT=nccl", "EASYSCALE_MOVE=off", NULL },
    };
    char ref[2][40] = { "", "" };
    for (size_t i = 0; i < sizeof runs / sizeof runs[0]; i++) {
        es_proc_result_t r = run_client(1, "types", runs[i].n, runs[i].devs, runs[i].x1,
                                        runs[i].x2, runs[i].x3);
        expect_client(&r, runs[i].n, runs[i].x1 ? runs[i].x1 : runs[i].devs);
        expect_transport(&r, runs[i].x1);
        char d[40];
        digest_of(&r, d, sizeof d);
        char *rf = ref[runs[i].n == 8];
        if (!rf[0])
            snprintf(rf, 40, "%s", d);
        fprintf(stderr, "note: types %d ranks on %s %s %s %s: digest %s\n", runs[i].n,
                runs[i].devs, runs[i].x1 ? runs[i].x1 : "", runs[i].x2 ? runs[i].x2 : "",
                runs[i].x3 ? runs[i].x3 : "", d);
        assert_string_equal(rf, d);
        es_proc_result_free(&r);
    }
    assert_string_not_equal(ref[0], ref[1]);
}

/* A communicator of one rank: every type and operation, in and out of
 * place, on the nccl transport (one GPU, the all-reduce without staging:
 * an out-of-place one left its output unwritten once) and the host one,
 * each checked against the client's reference, the same digest. */
static void test_types_one_rank(void **state)
{
    (void)state;
    need_shim();
    static const char *const tps[] = { "EASYSCALE_COLL_TRANSPORT=nccl",
                                       "EASYSCALE_COLL_TRANSPORT=host" };
    char d[2][40];
    for (int t = 0; t < 2; t++) {
        es_proc_result_t r = run_client(1, "types", 1, "a100:4G", tps[t], "EASYSCALE_MOVE=off",
                                        NULL);
        expect_client(&r, 1, tps[t]);
        expect_transport(&r, tps[t]);
        digest_of(&r, d[t], sizeof d[t]);
        es_proc_result_free(&r);
    }
    assert_string_equal(d[0], d[1]);
}

/* Negative control: plain NCCL (simcuda's, ring order) on 4 GPUs does not
 * give the rank-ordered bits the client checks for. */
static void test_types_control(void **state)
{
    (void)state;
    es_proc_result_t r = run_client(0, "types", 4, FOUR, NULL, NULL, NULL);
    if (r.status == 0 || !strstr(r.out, "rank-order reference"))
        fprintf(stderr, "---- output (status %d) ----\n%s\n", r.status, r.out);
    assert_int_not_equal(r.status, 0);
    assert_non_null(strstr(r.out, "rank-order reference"));
    es_proc_result_free(&r);
}

static void test_coll(void **state)
{
    (void)state;
    need_shim();
    static const struct {
        int n;
        const char *devs, *x1, *x2;
    } runs[] = {
        { 4, TWO, NULL, NULL },
        { 4, TWO, "EASYSCALE_COLL_TRANSPORT=host", NULL },
        { 4, TWO, "EASYSCALE_COLL_TRANSPORT=device", "EASYSCALE_MOVE=off" },
        { 4, TWO, "SIMCUDA_ISOLATION=1", "SIMCUDA_CHAOS=9" },
        { 4, TWO, "EASYSCALE_COLL_TRANSPORT=host", "SIMCUDA_ISOLATION=1" },
        { 4, "a100:4G", NULL, NULL },
        { 8, THREE, NULL, NULL },
        { 8, THREE, "EASYSCALE_COLL_TRANSPORT=host", NULL },
        { 4, TWO, "EASYSCALE_COLL_TRANSPORT=nccl", "EASYSCALE_MOVE=off" },
        { 4, FOUR, "EASYSCALE_COLL_TRANSPORT=nccl", "EASYSCALE_MOVE=off" },
        { 4, "a100:4G", "EASYSCALE_COLL_TRANSPORT=nccl", "EASYSCALE_MOVE=off" },
        { 4, FOUR, "EASYSCALE_COLL_TRANSPORT=device", "EASYSCALE_MOVE=off" },
        { 4, "a100:4G", "EASYSCALE_COLL_TRANSPORT=host", NULL },
        { 8, THREE, "EASYSCALE_COLL_TRANSPORT=nccl", "EASYSCALE_MOVE=off" },
    };
    /* every rank's results of every collective (non-blocking init, split,
     * groups) hashed alike: one digest per rank count, whatever the
     * transport and the number of GPUs */
    char ref[2][40] = { "", "" };
    for (size_t i = 0; i < sizeof runs / sizeof runs[0]; i++) {
        es_proc_result_t r = run_client(1, "coll", runs[i].n, runs[i].devs, runs[i].x1,
                                        runs[i].x2, "EASYSCALE_COLL_CHUNK=65536");
        expect_client(&r, runs[i].n, runs[i].x1 ? runs[i].x1 : runs[i].devs);
        expect_transport(&r, runs[i].x1);
        char d[40];
        digest_of(&r, d, sizeof d);
        char *rf = ref[runs[i].n == 8];
        if (!rf[0])
            snprintf(rf, 40, "%s", d);
        if (strcmp(rf, d) != 0)
            fprintf(stderr, "coll %d ranks on %s %s: digest %s, expected %s\n", runs[i].n,
                    runs[i].devs, runs[i].x1 ? runs[i].x1 : "", d, rf);
        assert_string_equal(rf, d);
        es_proc_result_free(&r);
    }
}

/* auto takes the NCCL carriers where libnccl.so.2 loads (the client links
 * simcuda's), with moves off and on; with nccl and moves on an EST moves
 * only at a hold of the whole job: of the moves all 4 ESTs signal
 * themselves at once, one is deferred to such a hold and the others are
 * refused with the reason (one hold at a time; sigmove's last collective
 * may come before the hold, test_selfmove_at_a_job_hold makes one), and
 * the collectives go on. Control: the same requests on the host transport
 * move the ESTs at once. Time-sliced ESTs stay on the host transport
 * (their turns are moves): auto quietly, an explicit nccl saying so. */
static void test_transport_choice(void **state)
{
    (void)state;
    need_shim();
    es_proc_result_t r = run_client(1, "coll", 4, TWO, "EASYSCALE_MOVE=off", "EASYSCALE_LOG=info",
                                    NULL);
    expect_client(&r, 4, "auto");
    if (!strstr(r.out, "nccl transport, chunk"))
        fprintf(stderr, "---- auto ----\n%s\n----\n", r.out);
    assert_non_null(strstr(r.out, "nccl transport, chunk"));
    assert_null(strstr(r.out, "device transport, chunk"));
    es_proc_result_free(&r);
    r = run_client(1, "coll", 4, TWO, "EASYSCALE_LOG=info", NULL, NULL);
    expect_client(&r, 4, "auto, moves on");
    assert_true(es_count(r.out, "nccl transport, chunk") >= 4);
    assert_int_equal(es_count(r.out, "host transport, chunk"), 0);
    es_proc_result_free(&r);
    r = run_client(1, "coll", 4, TWO, "EASYSCALE_TIME_SLICE=on", "EASYSCALE_LOG=info", NULL);
    expect_client(&r, 4, "auto, time-sliced");
    assert_true(es_count(r.out, "host transport, chunk") >= 4);
    assert_int_equal(es_count(r.out, "nccl transport, chunk"), 0);
    assert_null(strstr(r.out, "is not possible"));
    es_proc_result_free(&r);
    r = run_client(1, "sigmove", 4, TWO, "EASYSCALE_COLL_TRANSPORT=nccl", "EASYSCALE_LOG=info",
                   "EASYSCALE_MOVE_SIGNAL=SIGUSR1");
    expect_client(&r, 4, "nccl, moves on, a move signalled");
    expect_transport(&r, "EASYSCALE_COLL_TRANSPORT=nccl");
    assert_int_equal(es_count(r.out, "nccl transport, chunk"), 4);
    if (es_count(r.out, "info: move to device ") != 1 ||
        es_count(r.out, "waits for a hold of the job already") != 3)
        fprintf(stderr, "---- sigmove, nccl ----\n%s\n----\n", r.out);
    /* the winner's line: "move to device D: deferred to a hold of all 4 ranks" */
    assert_int_equal(es_count(r.out, "info: move to device "), 1);
    assert_int_equal(es_count(r.out, ": deferred to a hold of all 4 ranks at collective"), 1);
    assert_int_equal(es_count(r.out, "waits for a hold of the job already"), 3);
    assert_true(es_count(r.out, "info: moved to device") <= 1);
    es_proc_result_free(&r);
    r = run_client(1, "sigmove", 4, TWO, "EASYSCALE_COLL_TRANSPORT=host", "EASYSCALE_LOG=info",
                   "EASYSCALE_MOVE_SIGNAL=SIGUSR1");
    expect_client(&r, 4, "host, a move signalled");
    assert_int_equal(es_count(r.out, "info: moved to device"), 4);
    es_proc_result_free(&r);
    r = run_client(1, "coll", 4, TWO, "EASYSCALE_COLL_TRANSPORT=nccl", "EASYSCALE_TIME_SLICE=on",
                   "EASYSCALE_LOG=info");
    expect_client(&r, 4, "nccl, time-sliced");
    assert_non_null(strstr(r.out, "EASYSCALE_COLL_TRANSPORT=nccl is not possible for "
                                  "time-sliced ESTs"));
    assert_int_equal(es_count(r.out, "nccl transport, chunk"), 0);
    es_proc_result_free(&r);
}

/* A move an EST asks for itself (easyscale_move) while the staging is
 * device memory: deferred to a hold of every rank agreed in the
 * communicator's segment (no controller), made there, the transport set up
 * again where the ESTs are then; every sum is the rank-ordered one, before
 * and after. Rank 1 (GPU 1) goes to GPU 0: the nccl transport's runs of
 * ranks change from 4 whole hops to 2 runs. Negative control: rank 3 stays
 * away longer than EASYSCALE_HOLD_TIMEOUT, so the hold is given up and
 * rank 1 stays where it was, the collectives unharmed. */
static void test_selfmove_at_a_job_hold(void **state)
{
    (void)state;
    need_shim();
    const char *tps[2] = { "EASYSCALE_COLL_TRANSPORT=nccl", "EASYSCALE_COLL_TRANSPORT=device" };
    for (int i = 0; i < 2; i++) {
        es_proc_result_t r = run_client(1, "selfmove", 4, TWO, tps[i], "EASYSCALE_LOG=info", NULL);
        expect_client(&r, 4, tps[i]);
        expect_transport(&r, tps[i]);
        if (!strstr(r.out, "rank 1: where 0 (asked 0)"))
            fprintf(stderr, "---- selfmove, %s ----\n%s\n----\n", tps[i], r.out);
        assert_non_null(strstr(r.out, "rank 1: easyscale_move(0) = 1\n"));
        assert_non_null(strstr(r.out, "deferred to a hold of all 4 ranks at collective"));
        assert_int_equal(es_count(r.out, "for rank 1's move"), 4); /* every rank waited */
        assert_non_null(strstr(r.out, "collectives: moved at a hold of all 4 ranks"));
        assert_non_null(strstr(r.out, "transport set up again after a hold"));
        assert_non_null(strstr(r.out, "rank 1: where 0 (asked 0)"));
        if (i == 0)
            assert_non_null(strstr(r.out, "runs of ranks: 2 (one per GPU: pipelined chain)"));
        es_proc_result_free(&r);
    }
    es_proc_result_t r = run_client(1, "selfmove-stall", 4, TWO, tps[0], "EASYSCALE_LOG=info",
                                    "EASYSCALE_HOLD_TIMEOUT=3");
    expect_client(&r, 4, "selfmove-stall");
    if (!strstr(r.out, "rank 1: where 1 (asked 0)") || !strstr(r.out, "is given up"))
        fprintf(stderr, "---- selfmove-stall ----\n%s\n----\n", r.out);
    assert_non_null(strstr(r.out, "rank 1: easyscale_move(0) = 1\n"));
    assert_non_null(strstr(r.out, "is given up: not every rank reached it within "
                                  "EASYSCALE_HOLD_TIMEOUT"));
    assert_null(strstr(r.out, "collectives: moved at a hold"));
    assert_non_null(strstr(r.out, "rank 1: where 1 (asked 0)"));
    es_proc_result_free(&r);
}

static void test_initall(void **state)
{
    (void)state;
    need_shim();
    es_proc_result_t r = run_client(1, "initall", 4, TWO, NULL, NULL, NULL);
    expect_client(&r, 4, "initall");
    es_proc_result_free(&r);
}

/* Without privileges (no CAP_SYS_ADMIN, as for any ordinary user): simcuda's
 * device servers must still reach the host staging, whose name is unlinked
 * once every rank joined, so the file is found through the rank's open
 * descriptor (/proc/self/map_files needs the capability). Host transport,
 * isolation, 4 ranks: the rank-ordered sums. Run as root, the client is
 * started through setpriv with every capability dropped. */
static void test_unprivileged(void **state)
{
    (void)state;
    need_shim();
    const char *setpriv = "/usr/bin/setpriv";
    char nb[] = "4";
    char *plain[] = { (char *)es_build_path("tests/coll/coll_client"), (char *)"coll", nb, NULL };
    char *dropped[] = { (char *)setpriv, (char *)"--inh-caps=-all", (char *)"--ambient-caps=-all",
                        (char *)"--bounding-set=-all", plain[0], plain[1], plain[2], NULL };
    if (geteuid() == 0 && access(setpriv, X_OK) != 0)
        fail_msg("run as root, the test drops every capability with %s (util-linux), which is "
                 "missing", setpriv);
    es_proc_result_t r = run_prog(1, TWO, geteuid() == 0 ? dropped : plain,
                                  "EASYSCALE_COLL_TRANSPORT=host", "SIMCUDA_ISOLATION=1",
                                  "EASYSCALE_COLL_CHUNK=65536");
    expect_client(&r, 4, "unprivileged");
    es_proc_result_free(&r);
}

/* ---- the NVIDIA-headers client -------------------------------------------------- */

static es_proc_result_t run_vclient(int shim, const char *devs, const char *arg)
{
    char *argv[] = { (char *)es_build_path("tests/clients/nccl_vclient"), (char *)arg, NULL };
    return run_prog(shim, devs, argv, NULL, NULL, NULL);
}

static es_proc_result_t run_vclient_iso(const char *devs)
{
    char *argv[] = { (char *)es_build_path("tests/clients/nccl_vclient"), NULL };
    return run_prog(1, devs, argv, "SIMCUDA_ISOLATION=1", "SIMCUDA_CHAOS=11", NULL);
}

static void test_vclient(void **state)
{
    (void)state;
    need_shim();
    char a[40], b[40];
    es_proc_result_t r = run_vclient(1, TWO, NULL);
    if (r.status != 0)
        fprintf(stderr, "---- 2 GPUs ----\n%s\n", r.out);
    assert_int_equal(r.status, 0);
    assert_non_null(strstr(r.out, "[  PASSED  ] 8 test(s)."));
    assert_non_null(es_find_last(r.out, "checksum ", a, sizeof a));
    es_proc_result_free(&r);
    r = run_vclient(1, "a100:4G", NULL);
    if (r.status != 0)
        fprintf(stderr, "---- 1 GPU ----\n%s\n", r.out);
    assert_int_equal(r.status, 0);
    assert_non_null(es_find_last(r.out, "checksum ", b, sizeof b));
    assert_string_equal(a, b);
    es_proc_result_free(&r);
    /* the NCCL carriers (moves on: the transport is kept, ESTs move only at
     * scheduled steps) on 4, 2 and 1 GPUs: the same checksum */
    static const char *const nc_devs[] = { FOUR, TWO, "a100:4G" };
    for (int i = 0; i < 3; i++) {
        char *argv[] = { (char *)es_build_path("tests/clients/nccl_vclient"), NULL };
        r = run_prog(1, nc_devs[i], argv, "EASYSCALE_COLL_TRANSPORT=nccl", "EASYSCALE_LOG=info",
                     NULL);
        if (r.status != 0 || !strstr(r.out, "nccl transport, chunk"))
            fprintf(stderr, "---- nccl, %s ----\n%s\n", nc_devs[i], r.out);
        assert_int_equal(r.status, 0);
        assert_non_null(strstr(r.out, "nccl transport, chunk"));
        assert_non_null(es_find_last(r.out, "checksum ", b, sizeof b));
        assert_string_equal(a, b);
        es_proc_result_free(&r);
    }
    /* isolated device memory, adversarial stream scheduling */
    r = run_vclient_iso(TWO);
    if (r.status != 0)
        fprintf(stderr, "---- 2 GPUs, isolation ----\n%s\n", r.out);
    assert_int_equal(r.status, 0);
    assert_non_null(es_find_last(r.out, "checksum ", b, sizeof b));
    assert_string_equal(a, b);
    es_proc_result_free(&r);
    /* without the shim: NCCL refuses two ranks on one GPU */
    r = run_vclient(0, TWO, NULL);
    if (r.status == 0 || !strstr(r.out, "Duplicate GPU detected"))
        fprintf(stderr, "---- no shim, 2 GPUs ----\n%s\n", r.out);
    assert_int_not_equal(r.status, 0);
    assert_non_null(strstr(r.out, "Duplicate GPU detected"));
    es_proc_result_free(&r);
    /* ... and on 4 GPUs it runs, correct to rounding (--loose), but its sums
     * are not the rank-ordered ones */
    r = run_vclient(0, FOUR, "--loose");
    if (r.status != 0)
        fprintf(stderr, "---- no shim, 4 GPUs, loose ----\n%s\n", r.out);
    assert_int_equal(r.status, 0);
    es_proc_result_free(&r);
    r = run_vclient(0, FOUR, NULL);
    assert_int_not_equal(r.status, 0);
    assert_non_null(strstr(r.out, "rank-order reference"));
    es_proc_result_free(&r);
}

/* ---- faults and clean-up ------------------------------------------------------------ */

/* Names of this user's segments in /dev/shm. */
static int list_segments(char names[][300], int max)
{
    char prefix[32];
    snprintf(prefix, sizeof prefix, "es-coll-%u-", (unsigned)getuid());
    DIR *d = opendir("/dev/shm");
    int n = 0;
    if (!d)
        return 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL && n < max)
        if (strncmp(e->d_name, prefix, strlen(prefix)) == 0)
            snprintf(names[n++], 300, "%s", e->d_name);
    closedir(d);
    return n;
}

static int in_list(char names[][300], int n, const char *s)
{
    for (int i = 0; i < n; i++)
        if (strcmp(names[i], s) == 0)
            return 1;
    return 0;
}

/* Whether the process pid is alive and the one that started at start
 * (/proc/<pid>/stat field 22; not a zombie). */
static int proc_alive(int32_t pid, uint64_t start)
{
    char path[64], buf[1024];
    snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
    FILE *f = fopen(path, "r");
    if (!f)
        return 0;
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = '\0';
    char *p = strrchr(buf, ')'); /* the command name may hold spaces */
    if (!p || p[1] != ' ' || p[2] == 'Z')
        return 0;
    p += 2;
    for (int field = 3; field < 22 && p; field++) { /* state is field 3 */
        p = strchr(p, ' ');
        if (p)
            p++;
    }
    return p && strtoull(p, NULL, 10) == start;
}

/* Whether the segment /dev/shm/<name> was left by a job that is over: set
 * up, and no rank that joined is alive. The segments of jobs still running
 * (other test programs of this user beside this one, other checkouts' test
 * runs) are not, nor one being set up. */
static int segment_left(const char *name)
{
    char path[320];
    snprintf(path, sizeof path, "/dev/shm/%.299s", name);
    size_t len;
    char *m = es_read_file(path, &len);
    int left = 0;
    if (m && len >= sizeof(es_seg_hdr_t)) {
        const es_seg_hdr_t *h = (const es_seg_hdr_t *)m;
        if (atomic_load(&h->magic) == ES_SEG_MAGIC && h->nranks <= ES_COLL_MAX_RANKS &&
            len >= h->off_ranks + h->nranks * sizeof(es_seg_rank_t)) {
            left = 1;
            for (uint32_t r = 0; r < h->nranks; r++) {
                const es_seg_rank_t *sr = (const es_seg_rank_t *)(m + h->off_ranks) + r;
                if (atomic_load(&sr->state) != 0 && proc_alive(sr->pid, sr->starttime))
                    left = 0;
            }
        }
    }
    free(m);
    return left;
}

/* Segments left by jobs that are over (segment_left) present now that were
 * not in before[]. */
static int new_segments(char before[][300], int nb, char out[][300], int max)
{
    char now[64][300];
    int nn = list_segments(now, 64), k = 0;
    for (int i = 0; i < nn && k < max; i++)
        if (!in_list(before, nb, now[i]) && segment_left(now[i]))
            memcpy(out[k++], now[i], sizeof(now[i]));
    return k;
}

static void fault_run_on(const char *mode, const char *want, int survivors, const char *tp,
                         const char *devs)
{
    need_shim();
    char before[64][300], extra[8][300];
    int nb = list_segments(before, 64);
    int dev = tp && strcmp(tp, "EASYSCALE_COLL_TRANSPORT=host") != 0;
    /* a rank that is late: the collective timeout (1 s) ends the waits; a
     * rank that died or aborted: its death ends them, however long the
     * survivors take to get there (a loaded machine: 30 s) */
    const char *tmo = strcmp(mode, "timeout") == 0 ? "EASYSCALE_COLL_TIMEOUT=1"
                                                   : "EASYSCALE_COLL_TIMEOUT=30";
    es_proc_result_t r = run_client(1, mode, 4, devs, tmo, tp, dev ? "EASYSCALE_MOVE=off" : NULL);
    expect_transport(&r, tp);
    int n = 0;
    for (const char *p = r.out; (p = strstr(p, want)) != NULL; p++)
        n++;
    if (r.status != 0 || n < survivors || strstr(r.out, "FAIL"))
        fprintf(stderr, "---- %s (status %d) ----\n%s\n", mode, r.status, r.out);
    assert_int_equal(r.status, 0);
    assert_true(n >= survivors);
    assert_null(strstr(r.out, "FAIL"));
    assert_int_equal(new_segments(before, nb, extra, 8), 0);
    es_proc_result_free(&r);
}

static void fault_run(const char *mode, const char *want, int survivors, const char *tp)
{
    fault_run_on(mode, want, survivors, tp, TWO);
}

static void test_fault_kill(void **state)
{
    (void)state;
    /* rank 2 died: ranks 0, 1, 3 see ncclRemoteError (every transport) */
    fault_run("kill", "second allreduce: remote process exited", 3,
              "EASYSCALE_COLL_TRANSPORT=device");
    fault_run("kill", "second allreduce: remote process exited", 3,
              "EASYSCALE_COLL_TRANSPORT=host");
    fault_run("kill", "second allreduce: remote process exited", 3,
              "EASYSCALE_COLL_TRANSPORT=nccl");
}

/* Rank 2 dies inside a large all-reduce: under the nccl transport on 4
 * GPUs it is a carrier, and the others' carriers wait in NCCL calls for
 * it (the watchdog aborts the carrier communicator); on 2 GPUs it hands
 * its contribution to rank 0, the carrier of its GPU. */
static void test_fault_kill_mid(void **state)
{
    (void)state;
    fault_run_on("killmid", "second allreduce: remote process exited", 3,
                 "EASYSCALE_COLL_TRANSPORT=nccl", FOUR);
    fault_run_on("killmid", "second allreduce: remote process exited", 3,
                 "EASYSCALE_COLL_TRANSPORT=nccl", TWO);
    fault_run_on("killmid", "second allreduce: remote process exited", 3,
                 "EASYSCALE_COLL_TRANSPORT=device", FOUR);
    fault_run_on("killmid", "second allreduce: remote process exited", 3,
                 "EASYSCALE_COLL_TRANSPORT=host", TWO);
}

static void test_fault_abort(void **state)
{
    (void)state;
    fault_run("abort", "second allreduce: remote process exited", 3,
              "EASYSCALE_COLL_TRANSPORT=device");
    fault_run("abort", "second allreduce: remote process exited", 3,
              "EASYSCALE_COLL_TRANSPORT=host");
    fault_run("abort", "second allreduce: remote process exited", 3,
              "EASYSCALE_COLL_TRANSPORT=nccl");
}

static void test_fault_timeout(void **state)
{
    (void)state;
    /* rank 1 alive but away for 5 s; EASYSCALE_COLL_TIMEOUT=1 (the device
     * transport: its watchdog ends the waits on the device) */
    fault_run("timeout", "second allreduce: unhandled system error", 3, NULL);
    fault_run("timeout", "second allreduce: unhandled system error", 3,
              "EASYSCALE_COLL_TRANSPORT=device");
    fault_run("timeout", "second allreduce: unhandled system error", 3,
              "EASYSCALE_COLL_TRANSPORT=nccl");
}

/* A rank that dies before the others joined leaves the rendezvous
 * segment; the next ncclGetUniqueId of the user removes it. */
static void test_stale_segment(void **state)
{
    (void)state;
    need_shim();
    char before[64][300], extra[8][300];
    int nb = list_segments(before, 64);
    es_proc_result_t r = run_client(1, "stale", 2, TWO, NULL, NULL, NULL);
    if (r.status != 0)
        fprintf(stderr, "---- stale ----\n%s\n", r.out);
    assert_int_equal(r.status, 0);
    es_proc_result_free(&r);
    int k = new_segments(before, nb, extra, 8);
    assert_int_equal(k, 1); /* left behind */
    r = run_client(1, "coll", 2, TWO, NULL, NULL, NULL); /* any job: its id sweeps */
    expect_client(&r, 2, "sweeping job");
    es_proc_result_free(&r);
    char now[64][300];
    int nn = list_segments(now, 64);
    assert_false(in_list(now, nn, extra[0]));
}

/* A collective on a stream under capture (CUDA graphs, GLOBAL mode): every
 * rank gets ncclInvalidUsage and one log line per call, the capture ends
 * with a graph of the client's own work that replays, the communicator
 * keeps working; 4 ranks on 2 GPUs, both transports. */
static void test_capture(void **state)
{
    (void)state;
    need_shim();
    static const char *const tps[] = { "EASYSCALE_COLL_TRANSPORT=device",
                                       "EASYSCALE_COLL_TRANSPORT=host" };
    for (size_t t = 0; t < 2; t++) {
        es_proc_result_t r = run_client(1, "capture", 4, TWO, tps[t],
                                        t == 0 ? "EASYSCALE_MOVE=off" : NULL, NULL);
        expect_client(&r, 4, tps[t]);
        expect_transport(&r, tps[t]);
        /* the call alone and the call in a group, on each of the 4 ranks */
        assert_int_equal(es_count(r.out, "ncclAllReduce on a stream under capture"), 8);
        assert_int_equal(es_count(r.out, "allreduce under capture: invalid usage"), 4);
        es_proc_result_free(&r);
    }
    /* Negative control: without the shim (simcuda's NCCL enqueues the
     * collective into the capture) every rank reaches the capture and its
     * check fails: no ncclInvalidUsage. */
    es_proc_result_t r = run_client(0, "capture", 4, FOUR, NULL, NULL, NULL);
    assert_false(client_ok(&r, 4));
    assert_int_equal(es_count(r.out, "allreduce under capture: no error ("), 4);
    assert_int_equal(es_count(r.out, "allreduce under capture: invalid usage"), 0);
    es_proc_result_free(&r);
}

/* Stream order of a virtual collective (see the file comment). */
static void test_stream_order(void **state)
{
    (void)state;
    need_shim();
    static const struct {
        const char *tp, *x, *said;
    } runs[] = {
        { "EASYSCALE_COLL_TRANSPORT=host", NULL, "host transport, chunk" },
        { "EASYSCALE_COLL_TRANSPORT=device", NULL, "device transport, chunk" },
        { "EASYSCALE_COLL_TRANSPORT=device", "SIMCUDA_CHAOS=13", "device transport, chunk" },
    };
    for (size_t i = 0; i < sizeof runs / sizeof runs[0]; i++) {
        int dev = strstr(runs[i].tp, "device") != NULL;
        char *argv[] = { (char *)es_build_path("tests/coll/coll_client"), "order", "4", NULL };
        char *env[] = { "SIMCUDA_DEVICES=" TWO, "CUDA_VISIBLE_DEVICES=", "LOCAL_WORLD_SIZE=",
                        "LOCAL_RANK=", g_pre, "EASYSCALE_LOG=info", "EASYSCALE_COLL_CHUNK=65536",
                        (char *)runs[i].tp, dev ? "EASYSCALE_MOVE=off" : "EASYSCALE_MOVE=",
                        "SIMCUDA_TRACE=1", (char *)runs[i].x, NULL };
        es_proc_result_t r;
        assert_int_equal(es_run(argv, env, TIMEOUT, &r), 0);
        expect_client(&r, 4, runs[i].tp);
        /* every rank's communicator ran on the transport asked for */
        if (es_count(r.out, runs[i].said) != 4)
            fprintf(stderr, "---- %s: not 4 \"%s\" ----\n%s\n", runs[i].tp, runs[i].said,
                    r.out);
        assert_int_equal(es_count(r.out, runs[i].said), 4);
        /* Ordering on the device: with the device transport the only host
         * function of the run is the one rank 0 launches itself (on
         * another stream, while its all-reduce waits); the host
         * transport's steps are host functions on the collective's stream
         * (the check's negative control). simcuda's trace logs each. */
        int hostfns = es_count(r.out, "simcuda trace: host function enqueued on stream");
        if (dev ? hostfns != 1 : hostfns <= 4)
            fprintf(stderr, "---- %s: %d host functions ----\n%s\n", runs[i].tp, hostfns, r.out);
        if (dev)
            assert_int_equal(hostfns, 1);
        else
            assert_true(hostfns > 4);
        es_proc_result_free(&r);
    }
    /* Negative control: rank 0 blocks on its stream after the call (what a
     * collective that waited for its peers would do): the peers never see
     * it return and give up (after 5 s, well within the communicator's
     * timeout, which would otherwise end rank 0's wait first); rank 0 then
     * fails too (a peer is gone). */
    es_proc_result_t r = run_client(1, "order-blocking", 4, TWO, "EASYSCALE_COLL_TIMEOUT=60",
                                    NULL, NULL);
    assert_false(client_ok(&r, 4));
    /* (the first peer to give up ends rank 0's wait: the others may then
     * see the flag, call and fail on the dead communicator) */
    if (es_count(r.out, "did not return before its peers called") < 1)
        fprintf(stderr, "---- order-blocking (status %d) ----\n%s\n", r.status, r.out);
    assert_true(es_count(r.out, "did not return before its peers called") >= 1);
    es_proc_result_free(&r);
    /* Negative control: without the shim (simcuda's NCCL, ring order, 4
     * GPUs) the order holds but the sums are not the rank-ordered ones. */
    r = run_client(0, "order", 4, FOUR, NULL, NULL, NULL);
    assert_false(client_ok(&r, 4));
    assert_non_null(strstr(r.out, "order: element"));
    assert_null(strstr(r.out, "did not return before"));
    es_proc_result_free(&r);
}

int main(void)
{
    /* Two programs of one source (coll_engine_test and coll_engine2_test,
     * ES_TEST_PART 1 and 2), so that each stays well within the runner's
     * time limit on a loaded machine: the unit tests and the digests of
     * every type; the transports, the clients and the faults. */
    const struct CMUnitTest part1[] = {
        cmocka_unit_test(test_config),
        cmocka_unit_test(test_host_staging_registration),
        cmocka_unit_test(test_vdev_rules),
        cmocka_unit_test(test_decode_all_codes),
        cmocka_unit_test(test_encode_boundaries),
        cmocka_unit_test(test_half_nan_rule),
        cmocka_unit_test(test_steps),
        cmocka_unit_test(test_types),
        cmocka_unit_test(test_types_control),
        cmocka_unit_test(test_types_one_rank),
    };
    const struct CMUnitTest part2[] = {
        cmocka_unit_test(test_coll),
        cmocka_unit_test(test_transport_choice),
        cmocka_unit_test(test_selfmove_at_a_job_hold),
        cmocka_unit_test(test_initall),
        cmocka_unit_test(test_unprivileged),
        cmocka_unit_test(test_vclient),
        cmocka_unit_test(test_fault_kill),
        cmocka_unit_test(test_fault_kill_mid),
        cmocka_unit_test(test_fault_abort),
        cmocka_unit_test(test_fault_timeout),
        cmocka_unit_test(test_stale_segment),
        cmocka_unit_test(test_capture),
        cmocka_unit_test(test_stream_order),
    };
    if (getenv("COLL_TEST")) /* one test by name, when debugging */
        cmocka_set_test_filter(getenv("COLL_TEST"));
#if ES_TEST_PART == 2
    (void)part1;
    return cmocka_run_group_tests_name("coll 2", part2, NULL, NULL);
#else
    (void)part2;
    return cmocka_run_group_tests_name("coll", part1, NULL, NULL);
#endif
}
