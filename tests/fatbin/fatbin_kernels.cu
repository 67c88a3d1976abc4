// Small kernels for tests/fatbin/reader_test.c: compiled at build time by
// fatbin/module.mk into fatbins (every compression mode), cubins, PTX and
// host objects, whose contents the test walks.
__global__ void es_fb_add_float(float *p, float v) { atomicAdd(p, v); }
__global__ void es_fb_add_int(int *p, int v) { atomicAdd(p, v); }
extern "C" __global__ void es_fb_scale(float *p, float s, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n)
        p[i] *= s;
}
