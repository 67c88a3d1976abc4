/* simcuda NCCL reduction engine: element kernels for every NCCL datatype and
 * operation, and the plan that fixes each element's fold order the way
 * NCCL's ring/tree algorithms, channels and protocols do (see simnccl.h). */
#include "sim/nccl/simnccl.h"
#include "sim/nccl/nkern.h"

#include <ctype.h>
#include <math.h>
#include <string.h>
#include <strings.h>

static const size_t g_size[SIM_NCCL_NTYPES] = {1, 1, 4, 4, 8, 8, 2, 4, 8, 2, 1, 1};

size_t sim_nccl_type_size(int dtype)
{
    return (dtype >= 0 && dtype < SIM_NCCL_NTYPES) ? g_size[dtype] : 0;
}

int sim_nccl_type_reducible(int dtype)
{
    return dtype >= 0 && dtype < 10;
}

/* ---- kernels --------------------------------------------------------------- */

#define BLK 2048

/* Every kernel folds a block of BLK elements into a local accumulator and
 * only then stores it, so outputs may alias inputs at the same positions. */

#define STORE(T)                                                                   \
    do {                                                                           \
        memcpy((T *)out + b, acc, m * sizeof(T));                                  \
        if (out2)                                                                  \
            memcpy((T *)out2 + b, acc, m * sizeof(T));                             \
    } while (0)

/* Integer types: T the C type, U the unsigned type for wrapping arithmetic. */
#define DEF_INT(NAME, T, U)                                                            \
    static void red_##NAME(int op, int scale_n, void *out, void *out2,                 \
                           const void *const *in, int nin, size_t n)                   \
    {                                                                                  \
        T acc[BLK];                                                                    \
        for (size_t b = 0; b < n; b += BLK) {                                          \
            size_t m = n - b < BLK ? n - b : BLK;                                      \
            memcpy(acc, (const T *)in[0] + b, m * sizeof(T));                          \
            for (int k = 1; k < nin; k++) {                                            \
                const T *x = (const T *)in[k] + b;                                     \
                switch (op) {                                                          \
                case SIM_OP_SUM:                                                       \
                case SIM_OP_AVG:                                                       \
                    for (size_t i = 0; i < m; i++)                                     \
                        acc[i] = (T)((U)acc[i] + (U)x[i]);                             \
                    break;                                                             \
                case SIM_OP_PROD:                                                      \
                    for (size_t i = 0; i < m; i++)                                     \
                        acc[i] = (T)((U)acc[i] * (U)x[i]);                             \
                    break;                                                             \
                case SIM_OP_MAX:                                                       \
                    for (size_t i = 0; i < m; i++)                                     \
                        acc[i] = x[i] > acc[i] ? x[i] : acc[i];                        \
                    break;                                                             \
                default:                                                               \
                    for (size_t i = 0; i < m; i++)                                     \
                        acc[i] = x[i] < acc[i] ? x[i] : acc[i];                        \
                    break;                                                             \
                }                                                                      \
            }                                                                          \
            if (op == SIM_OP_AVG)                                                      \
                for (size_t i = 0; i < m; i++)                                         \
                    acc[i] = (T)(acc[i] / (T)scale_n);                                 \
            STORE(T);                                                                  \
        }                                                                              \
    }

DEF_INT(i8, int8_t, uint8_t)
DEF_INT(u8, uint8_t, uint8_t)
DEF_INT(i32, int32_t, uint32_t)
DEF_INT(u32, uint32_t, uint32_t)
DEF_INT(i64, int64_t, uint64_t)
DEF_INT(u64, uint64_t, uint64_t)

/* float and double: arithmetic in the type itself (fmax/fmin as NCCL's
 * device max/min); avg premultiplies each input by (T)(1/n). */
#define DEF_FLT(NAME, T, FMAX, FMIN)                                                   \
    static void red_##NAME(int op, int scale_n, void *out, void *out2,                 \
                           const void *const *in, int nin, size_t n)                   \
    {                                                                                  \
        T acc[BLK];                                                                    \
        T sc = (T)(1.0 / scale_n);                                                     \
        for (size_t b = 0; b < n; b += BLK) {                                          \
            size_t m = n - b < BLK ? n - b : BLK;                                      \
            const T *x0 = (const T *)in[0] + b;                                        \
            if (op == SIM_OP_AVG) {                                                    \
                for (size_t i = 0; i < m; i++)                                         \
                    acc[i] = x0[i] * sc;                                               \
                for (int k = 1; k < nin; k++) {                                        \
                    const T *x = (const T *)in[k] + b;                                 \
                    for (size_t i = 0; i < m; i++) {                                   \
                        T t = x[i] * sc;                                               \
                        acc[i] = acc[i] + t;                                           \
                    }                                                                  \
                }                                                                      \
                STORE(T);                                                              \
                continue;                                                              \
            }                                                                          \
            int k = 1;                                                                 \
            if (nin >= 2) {                                                            \
                const T *x = (const T *)in[1] + b;                                     \
                switch (op) {                                                          \
                case SIM_OP_SUM: for (size_t i = 0; i < m; i++) acc[i] = x0[i] + x[i]; break; \
                case SIM_OP_PROD: for (size_t i = 0; i < m; i++) acc[i] = x0[i] * x[i]; break; \
                case SIM_OP_MAX: for (size_t i = 0; i < m; i++) acc[i] = FMAX(x0[i], x[i]); break; \
                default: for (size_t i = 0; i < m; i++) acc[i] = FMIN(x0[i], x[i]); break; \
                }                                                                      \
                k = 2;                                                                 \
            } else {                                                                   \
                memcpy(acc, x0, m * sizeof(T));                                        \
            }                                                                          \
            for (; k < nin; k++) {                                                     \
                const T *x = (const T *)in[k] + b;                                     \
                switch (op) {                                                          \
                case SIM_OP_SUM: for (size_t i = 0; i < m; i++) acc[i] = acc[i] + x[i]; break; \
                case SIM_OP_PROD: for (size_t i = 0; i < m; i++) acc[i] = acc[i] * x[i]; break; \
                case SIM_OP_MAX: for (size_t i = 0; i < m; i++) acc[i] = FMAX(acc[i], x[i]); break; \
                default: for (size_t i = 0; i < m; i++) acc[i] = FMIN(acc[i], x[i]); break; \
                }                                                                      \
            }                                                                          \
            STORE(T);                                                                  \
        }                                                                              \
    }

DEF_FLT(f32, float, fmaxf, fminf)
DEF_FLT(f64, double, fmax, fmin)

/* half and bfloat16: every operation is computed exactly in double and
 * rounded once to the 16-bit type, as the device's __hadd/__hmul do. Each
 * element's inputs are read before its outputs are written. */
static void red_16(int bf, int op, int scale_n, void *out, void *out2, const void *const *in,
                   int nin, size_t n)
{
    double (*to)(uint16_t) = bf ? sim_f16_bf16_to_double : sim_f16_half_to_double;
    uint16_t (*from)(double) = bf ? sim_f16_double_to_bf16 : sim_f16_double_to_half;
    double sc = to(from(1.0 / scale_n));
    for (size_t i = 0; i < n; i++) {
        double acc = to(((const uint16_t *)in[0])[i]);
        if (op == SIM_OP_AVG)
            acc = to(from(acc * sc));
        for (int k = 1; k < nin; k++) {
            double x = to(((const uint16_t *)in[k])[i]);
            switch (op) {
            case SIM_OP_SUM: acc = to(from(acc + x)); break;
            case SIM_OP_AVG: acc = to(from(acc + to(from(x * sc)))); break;
            case SIM_OP_PROD: acc = to(from(acc * x)); break;
            case SIM_OP_MAX: acc = fmax(acc, x); break;
            default: acc = fmin(acc, x); break;
            }
        }
        uint16_t v = from(acc);
        ((uint16_t *)out)[i] = v;
        if (out2)
            ((uint16_t *)out2)[i] = v;
    }
}

void sim_nccl_reduce(int dtype, int op, int scale_n, void *out, void *out2,
                     const void *const *in, int nin, size_t n)
{
    if (scale_n < 1)
        scale_n = 1;
    switch (dtype) {
    case 0: red_i8(op, scale_n, out, out2, in, nin, n); break;
    case 1: red_u8(op, scale_n, out, out2, in, nin, n); break;
    case 2: red_i32(op, scale_n, out, out2, in, nin, n); break;
    case 3: red_u32(op, scale_n, out, out2, in, nin, n); break;
    case 4: red_i64(op, scale_n, out, out2, in, nin, n); break;
    case 5: red_u64(op, scale_n, out, out2, in, nin, n); break;
    case 6: red_16(0, op, scale_n, out, out2, in, nin, n); break;
    case 7: red_f32(op, scale_n, out, out2, in, nin, n); break;
    case 8: red_f64(op, scale_n, out, out2, in, nin, n); break;
    case 9: red_16(1, op, scale_n, out, out2, in, nin, n); break;
    default: break;
    }
}

/* ---- plan ------------------------------------------------------------------ */

static const size_t g_chunk_bytes[SIM_NPROTOS] = {8 << 10, 32 << 10, 128 << 10};
static const size_t g_chan_threshold[SIM_NPROTOS] = {4 << 10, 16 << 10, 64 << 10};

static size_t div_up(size_t a, size_t b) { return (a + b - 1) / b; }
static size_t align_up(size_t a, size_t b) { return div_up(a, b) * b; }

void sim_nccl_plan(sim_nccl_plan_t *p, const sim_nccl_tuning_t *t, int kind, int nranks,
                   size_t count, int dtype, int root_pos)
{
    size_t es = sim_nccl_type_size(dtype);
    if (es == 0)
        es = 1;
    memset(p, 0, sizeof(*p));
    p->kind = kind;
    p->nranks = nranks;
    p->root_pos = root_pos;
    size_t bytes = count * es;
    if (kind == SIM_COLL_ALLGATHER || kind == SIM_COLL_REDUCESCATTER)
        bytes *= (size_t)nranks;

    /* Algorithm: only allreduce has a tree. */
    int algo = SIM_ALGO_RING;
    if (kind == SIM_COLL_ALLREDUCE) {
        int want = (nranks >= 3 && bytes <= (64 << 10)) ? SIM_ALGO_TREE : SIM_ALGO_RING;
        if (t->algo_mask & (1 << want))
            algo = want;
        else if (t->algo_mask & (1 << SIM_ALGO_RING))
            algo = SIM_ALGO_RING;
        else
            algo = SIM_ALGO_TREE;
    }
    /* Protocol by size, else the nearest allowed one. */
    int want = bytes <= (64 << 10) ? SIM_PROTO_LL
             : bytes <= (1 << 20) ? SIM_PROTO_LL128 : SIM_PROTO_SIMPLE;
    int proto = -1;
    for (int d = 0; d < SIM_NPROTOS && proto < 0; d++) {
        if (want + d < SIM_NPROTOS && (t->proto_mask & (1 << (want + d))))
            proto = want + d;
        else if (want - d >= 0 && (t->proto_mask & (1 << (want - d))))
            proto = want - d;
    }
    if (proto < 0)
        proto = SIM_PROTO_SIMPLE;
    /* Channels. */
    int nch = t->base_ch;
    if (nch > t->max_ch)
        nch = t->max_ch;
    if (nch < t->min_ch)
        nch = t->min_ch;
    while (nch > t->min_ch && nch > 1 && bytes < (size_t)nch * g_chan_threshold[proto])
        nch--;
    if (nch < 1)
        nch = 1;

    p->algo = algo;
    p->proto = proto;
    p->nch = nch;
    p->align = es >= 16 ? 1 : 16 / es;
    p->chunk = g_chunk_bytes[proto] / es;
    if (kind == SIM_COLL_REDUCESCATTER) {
        p->block = count;
        p->count = count * (size_t)nranks;
    } else {
        p->count = count;
    }
    p->chan_elems = align_up(div_up(p->count ? p->count : 1, (size_t)nch), p->align);
}

void sim_nccl_plan_segment(const sim_nccl_plan_t *p, size_t e, int *start, int *dir,
                           size_t *end)
{
    int32_t pos[SIMNCCL_MAX_RANKS];
    for (int r = 0; r < p->nranks && p->pos_of; r++)
        pos[r] = p->pos_of[r];
    uint64_t e64;
    simnccl_segment(p->kind, p->nranks, p->algo, p->root_pos, p->count, p->chunk, p->align,
                    p->chan_elems, p->block, pos, e, start, dir, &e64);
    *end = (size_t)e64;
}

/* ---- environment lists ---------------------------------------------------- */

static int parse_list(const char *s, const char *const *names, int nnames)
{
    int neg = 0, mask = 0;
    while (isspace((unsigned char)*s))
        s++;
    if (*s == '^') {
        neg = 1;
        s++;
    }
    while (*s) {
        const char *e = strchr(s, ',');
        size_t len = e ? (size_t)(e - s) : strlen(s);
        while (len && isspace((unsigned char)*s)) {
            s++;
            len--;
        }
        while (len && isspace((unsigned char)s[len - 1]))
            len--;
        int found = -1;
        for (int i = 0; i < nnames; i++)
            if (strlen(names[i]) == len && strncasecmp(s, names[i], len) == 0)
                found = i;
        if (found < 0)
            return -1;
        mask |= 1 << found;
        if (!e)
            break;
        s = e + 1;
    }
    if (neg)
        mask = ((1 << nnames) - 1) & ~mask;
    return mask ? mask : -1;
}

int sim_nccl_parse_algo(const char *s)
{
    /* NCCL's other algorithms need NVLink SHARP, CollNet or several nodes:
     * accepted by name, never available here. */
    static const char *const names[] = {"Ring", "Tree", "CollNetDirect", "CollNetChain",
                                        "NVLS", "NVLSTree", "PAT"};
    int m = parse_list(s, names, 7);
    if (m < 0 || (m & 3) == 0)
        return -1;
    return m & 3;
}

int sim_nccl_parse_proto(const char *s)
{
    static const char *const names[] = {"LL", "LL128", "Simple"};
    return parse_list(s, names, 3);
}
