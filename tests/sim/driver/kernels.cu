// Test kernels for simcuda's driver tests, compiled by nvcc into a fatbin
// (sm_80, sm_90 and compute_90 PTX). On simcuda each runs as its C twin in
// twins.c (simcuda_twin_<name>); the tests check that the driver finds the
// names in the image, copies the arguments by the layout the image gives
// and hands the twin the launch configuration.
extern "C" __global__ void sim_add(const float *a, const float *b, float *c, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n)
        c[i] = a[i] + b[i];
}

struct sim_pair { double x; char tag; };

// Mixed argument sizes (1, 4, 8, 16 bytes) to check the parameter copy.
extern "C" __global__ void sim_scale(float *v, float s, int n, char flag, struct sim_pair p,
                                     long long big)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n)
        v[i] = v[i] * s + (float)p.x + (float)flag + (float)p.tag + (float)big;
}

// Its twin reports failure: the launch fails with a sticky error.
extern "C" __global__ void sim_fail(int *out)
{
    out[threadIdx.x] = 1;
}

// Writes what the twin saw of the launch (SM count, grid, ...) to out.
extern "C" __global__ void sim_info(long long *out)
{
    out[threadIdx.x] = blockDim.x;
}

// Its twin dereferences the given pointer: an illegal address when bad.
extern "C" __global__ void sim_crash(int *p)
{
    p[0] = 1;
}
