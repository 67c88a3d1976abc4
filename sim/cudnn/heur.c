/* simcuda cuDNN heuristics: the preference order of convolution algorithms
 * per device and shape. Like real cuDNN, older architectures (compute
 * capability < 8: t4) favour the atomics-based algorithms for
 * small channel counts, so the default choice there is nondeterministic, and
 * the forward choice differs between architectures, so different GPU models
 * give different bits.
 *
 * Rules (cpg = input channels per group, kpg = output channels per group,
 * "unit" = stride 1, dilation 1, groups 1; NPQ = N * P * Q):
 *   FWD:        cc >= 9: unit 3x3 -> WINOGRAD_NONFUSED, else IMPLICIT_PRECOMP_GEMM
 *               cc == 8: IMPLICIT_PRECOMP_GEMM
 *               cc <  8: cpg*R*S <= 32 -> IMPLICIT_GEMM, else GEMM
 *   BWD_DATA:   cc <  8: kpg <= 64 -> ALGO_0 (nondeterministic), else ALGO_1
 *               cc >= 8: stride > 1 and kpg <= 32 -> ALGO_0, else ALGO_1
 *   BWD_FILTER: cc <  8: cpg <= 64 and K <= 64 -> ALGO_0 (nondeterministic),
 *                        else ALGO_1
 *               cc >= 8: cpg*R*S <= 27 and NPQ >= 16384 -> ALGO_3
 *                        (nondeterministic), else ALGO_1
 * After the first choice: the remaining supported algorithms with the
 * direction's usual runner-up first (FWD: IMPLICIT_GEMM, IMPLICIT_PRECOMP_GEMM,
 * GEMM; BWD_DATA: ALGO_1, ALGO_0; BWD_FILTER: ALGO_1, ALGO_0, ALGO_3), then
 * the others by id; then the unsupported ones by id.
 */
#include "sim/cudnn/heur.h"

static void push(int *algos, int *n, int *used, int a)
{
    if (a >= 0 && !used[a]) {
        used[a] = 1;
        algos[(*n)++] = a;
    }
}

int sim_heur_rank(int dir, const sim_heur_dev_t *dev, const sim_conv_t *p, int *algos)
{
    int count = sim_conv_algo_count(dir);
    int used[8] = {0};
    int pref[8], np = 0;
    int cc = dev->cc_major;
    int cpg = p->w.c, K = p->w.n, R = p->w.h, S = p->w.w;
    int kpg = p->groups > 0 ? K / p->groups : K;
    int unit = p->str_h == 1 && p->str_w == 1 && p->dil_h == 1 && p->dil_w == 1 &&
               p->groups == 1;
    long long npq = (long long)p->y.n * p->y.h * p->y.w;

    switch (dir) {
    case SIM_DIR_FWD:
        if (cc >= 9)
            pref[np++] = unit && R == 3 && S == 3 ? 7 : 1;
        else if (cc == 8)
            pref[np++] = 1;
        else
            pref[np++] = (long long)cpg * R * S <= 32 ? 0 : 2;
        pref[np++] = 0;
        pref[np++] = 1;
        pref[np++] = 2;
        break;
    case SIM_DIR_BWD_DATA:
        if (cc < 8)
            pref[np++] = kpg <= 64 ? 0 : 1;
        else
            pref[np++] = (p->str_h > 1 || p->str_w > 1) && kpg <= 32 ? 0 : 1;
        pref[np++] = 1;
        pref[np++] = 0;
        break;
    case SIM_DIR_BWD_FILTER:
        if (cc < 8)
            pref[np++] = cpg <= 64 && K <= 64 ? 0 : 1;
        else
            pref[np++] = (long long)cpg * R * S <= 27 && npq >= 16384 ? 3 : 1;
        pref[np++] = 1;
        pref[np++] = 0;
        pref[np++] = 3;
        break;
    default:
        return 0;
    }
    int n = 0;
    for (int i = 0; i < np; i++)
        if (sim_conv_algo_supported(dir, pref[i], p))
            push(algos, &n, used, pref[i]);
    for (int a = 0; a < count; a++)
        if (sim_conv_algo_supported(dir, a, p))
            push(algos, &n, used, a);
    int nsup = n;
    for (int a = 0; a < count; a++)
        push(algos, &n, used, a);
    return nsup;
}
