// A CUDA runtime program exactly as a user writes it, compiled by nvcc (host
// and device code) and linked with NVIDIA's runtime: shared (-cudart shared)
// and static (nvcc's default). tests/sim/driver/cudart_test.c runs it on
// simcuda. The kernel is registered by the runtime (__cudaRegisterFatBinary)
// and launched with <<<>>>; its CPU twin is simcuda_twin_sim_rt_axpy in
// twins.c.
//
// Usage: cudart_app EXPECTED_NAME EXPECTED_SM_COUNT
// Prints "cudart: ok <step>" per check, "cudart: all checks passed" at the
// end (exit 0). The first runtime call failing prints
// "cudart: init failed: error N (NAME)" and exits 3; any later failure
// prints "cudart: FAIL <step>: ..." and exits 1.
#include <cuda_runtime.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>

extern "C" __global__ void sim_rt_axpy(float a, const float *x, float *y, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n)
        y[i] = a * x[i] + y[i];
}

#define CHECK(step, call)                                                                  \
    do {                                                                                   \
        cudaError_t e_ = (call);                                                           \
        if (e_ != cudaSuccess) {                                                           \
            printf("cudart: FAIL %s: error %d (%s)\n", step, (int)e_, cudaGetErrorName(e_)); \
            return 1;                                                                      \
        }                                                                                  \
        printf("cudart: ok %s\n", step);                                                   \
    } while (0)

int main(int argc, char **argv)
{
    if (argc != 3) {
        fprintf(stderr, "usage: cudart_app EXPECTED_NAME EXPECTED_SM_COUNT\n");
        return 2;
    }
    setvbuf(stdout, NULL, _IONBF, 0);
    int count = -1;
    cudaError_t e = cudaGetDeviceCount(&count);
    if (e != cudaSuccess) {
        printf("cudart: init failed: error %d (%s)\n", (int)e, cudaGetErrorName(e));
        return 3;
    }
    printf("cudart: ok device count %d\n", count);
    if (count < 1) {
        printf("cudart: FAIL device count %d\n", count);
        return 1;
    }
    cudaDeviceProp prop;
    CHECK("cudaGetDeviceProperties", cudaGetDeviceProperties(&prop, 0));
    if (strcmp(prop.name, argv[1]) != 0 || prop.multiProcessorCount != atoi(argv[2])) {
        printf("cudart: FAIL properties: '%s' with %d SMs, expected '%s' with %s\n", prop.name,
               prop.multiProcessorCount, argv[1], argv[2]);
        return 1;
    }
    CHECK("cudaSetDevice", cudaSetDevice(0));

    const int n = 1000;
    static float hx[n], hy[n], out[n];
    for (int i = 0; i < n; i++) {
        hx[i] = (float)i;
        hy[i] = 0.5f * (float)i;
    }
    float *dx = NULL, *dy = NULL;
    CHECK("cudaMalloc x", cudaMalloc(&dx, n * sizeof(float)));
    CHECK("cudaMalloc y", cudaMalloc(&dy, n * sizeof(float)));
    CHECK("cudaMemcpy x", cudaMemcpy(dx, hx, n * sizeof(float), cudaMemcpyHostToDevice));
    CHECK("cudaMemcpy y", cudaMemcpy(dy, hy, n * sizeof(float), cudaMemcpyHostToDevice));

    // Legacy default stream.
    sim_rt_axpy<<<(n + 255) / 256, 256>>>(2.0f, dx, dy, n);
    CHECK("launch on the default stream", cudaGetLastError());
    CHECK("cudaDeviceSynchronize", cudaDeviceSynchronize());
    CHECK("cudaMemcpy back", cudaMemcpy(out, dy, n * sizeof(float), cudaMemcpyDeviceToHost));
    for (int i = 0; i < n; i++)
        if (out[i] != 2.5f * (float)i) {
            printf("cudart: FAIL result[%d] = %g, expected %g\n", i, out[i], 2.5 * i);
            return 1;
        }

    // A created stream, events around the launch, async copy back.
    cudaStream_t s;
    cudaEvent_t e0, e1;
    CHECK("cudaStreamCreate", cudaStreamCreate(&s));
    CHECK("cudaEventCreate 0", cudaEventCreate(&e0));
    CHECK("cudaEventCreate 1", cudaEventCreate(&e1));
    CHECK("cudaEventRecord 0", cudaEventRecord(e0, s));
    sim_rt_axpy<<<dim3(4), dim3(256), 0, s>>>(-1.0f, dx, dy, n);
    CHECK("launch on a stream", cudaGetLastError());
    CHECK("cudaEventRecord 1", cudaEventRecord(e1, s));
    CHECK("cudaMemcpyAsync back", cudaMemcpyAsync(out, dy, n * sizeof(float), cudaMemcpyDeviceToHost, s));
    CHECK("cudaEventSynchronize", cudaEventSynchronize(e1));
    float ms = -1;
    CHECK("cudaEventElapsedTime", cudaEventElapsedTime(&ms, e0, e1));
    if (!(ms >= 0)) {
        printf("cudart: FAIL elapsed time %g\n", ms);
        return 1;
    }
    CHECK("cudaStreamSynchronize", cudaStreamSynchronize(s));
    for (int i = 0; i < n; i++)
        if (out[i] != 1.5f * (float)i) {
            printf("cudart: FAIL stream result[%d] = %g, expected %g\n", i, out[i], 1.5 * i);
            return 1;
        }

    CHECK("cudaEventDestroy 0", cudaEventDestroy(e0));
    CHECK("cudaEventDestroy 1", cudaEventDestroy(e1));
    CHECK("cudaStreamDestroy", cudaStreamDestroy(s));
    CHECK("cudaFree x", cudaFree(dx));
    CHECK("cudaFree y", cudaFree(dy));
    CHECK("cudaDeviceSynchronize at the end", cudaDeviceSynchronize());
    printf("cudart: all checks passed\n");
    return 0;
}
