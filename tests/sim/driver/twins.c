/* CPU twins of tests/sim/driver/kernels.cu, built into
 * build/sim/twins/libsimtwin_simtest.so. Each loops over the whole launch
 * (grid x block) as the kernel's threads would. */
#include <stdint.h>
#include <string.h>

#include "sim/include/simcuda_twin.h"

int simcuda_twin_sim_add(const simcuda_launch_t *l);
int simcuda_twin_sim_scale(const simcuda_launch_t *l);
int simcuda_twin_sim_fail(const simcuda_launch_t *l);
int simcuda_twin_sim_info(const simcuda_launch_t *l);
int simcuda_twin_sim_crash(const simcuda_launch_t *l);

#define ARG(l, i, type) (*(type *)(l)->params[i])

int simcuda_twin_sim_add(const simcuda_launch_t *l)
{
    const float *a = ARG(l, 0, const float *);
    const float *b = ARG(l, 1, const float *);
    float *c = ARG(l, 2, float *);
    int n = ARG(l, 3, int);
    uint64_t threads = (uint64_t)l->grid[0] * l->block[0];
    for (uint64_t i = 0; i < threads; i++)
        if ((int64_t)i < n)
            c[i] = a[i] + b[i];
    return 0;
}

struct sim_pair { double x; char tag; };

int simcuda_twin_sim_scale(const simcuda_launch_t *l)
{
    float *v = ARG(l, 0, float *);
    float s = ARG(l, 1, float);
    int n = ARG(l, 2, int);
    char flag = ARG(l, 3, char);
    struct sim_pair p;
    memcpy(&p, l->params[4], sizeof(p));
    long long big = ARG(l, 5, long long);
    uint64_t threads = (uint64_t)l->grid[0] * l->block[0];
    for (uint64_t i = 0; i < threads; i++)
        if ((int64_t)i < n)
            v[i] = v[i] * s + (float)p.x + (float)flag + (float)p.tag + (float)big;
    return 0;
}

int simcuda_twin_sim_fail(const simcuda_launch_t *l)
{
    (void)l;
    return 1;
}

int simcuda_twin_sim_info(const simcuda_launch_t *l)
{
    long long *out = ARG(l, 0, long long *);
    out[0] = l->abi;
    out[1] = l->sm_count;
    out[2] = l->cc_major * 10 + l->cc_minor;
    out[3] = l->grid[0];
    out[4] = l->block[0];
    out[5] = l->shared_bytes;
    out[6] = l->device;
    memcpy(&out[7], &l->nondet_seed, sizeof(l->nondet_seed));
    return 0;
}

int simcuda_twin_sim_crash(const simcuda_launch_t *l)
{
    volatile int *p = ARG(l, 0, int *);
    p[0] = 1;
    return 0;
}

/* tests/sim/driver/cudart_app.cu: y = a * x + y, launched with <<<>>>
 * through NVIDIA's CUDA runtime. */
int simcuda_twin_sim_rt_axpy(const simcuda_launch_t *l);
int simcuda_twin_sim_rt_axpy(const simcuda_launch_t *l)
{
    float a = ARG(l, 0, float);
    const float *x = ARG(l, 1, const float *);
    float *y = ARG(l, 2, float *);
    int n = ARG(l, 3, int);
    uint64_t threads = (uint64_t)l->grid[0] * l->block[0];
    for (uint64_t i = 0; i < threads && (int64_t)i < n; i++)
        y[i] = a * x[i] + y[i];
    return 0;
}
