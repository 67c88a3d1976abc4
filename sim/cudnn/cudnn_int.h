/* simcuda cuDNN internals shared by the legacy API (cudnn.c) and the backend
 * API (backend.c): handle and descriptor layouts, status helpers, the
 * jobs (kernels of the library's module on the handle's stream). */
#ifndef SIM_CUDNN_INT_H
#define SIM_CUDNN_INT_H

#include <cudnn.h>
#include <stdint.h>

#include "sim/common/kmod.h"
#include "sim/common/simdrv.h"
#include "sim/cudnn/heur.h"
#include "sim/cudnn/kern.h"

#define SIM_HANDLE_MAGIC 0x64686e6eu /* "nnhd" */
#define SIM_TENSOR_MAGIC 0x7473726eu
#define SIM_FILTER_MAGIC 0x746c666eu
#define SIM_CONV_MAGIC 0x766e636eu
#define SIM_POOL_MAGIC 0x6c6f706eu
#define SIM_ACT_MAGIC 0x7463616eu

struct cudnnContext {
    uint32_t magic;
    const sim_kmod_t *km; /* the kernels of ctx */
    CUcontext ctx;
    CUstream stream;
    sim_heur_dev_t dev;
    int ordinal;
    CUuuid uuid; /* the device of ctx at cudnnCreate: work runs only there */
    uint64_t serial; /* unique per handle ever made (a freed address may be reused) */
};

struct cudnnTensorStruct {
    uint32_t magic;
    int set;
    cudnnDataType_t dtype;
    int nbdims;
    int dims[4];
    int strides[4];
};

struct cudnnFilterStruct {
    uint32_t magic;
    int set;
    cudnnDataType_t dtype;
    cudnnTensorFormat_t format;
    int k, c, h, w;
};

struct cudnnConvolutionStruct {
    uint32_t magic;
    int set;
    int pad_h, pad_w, str_h, str_w, dil_h, dil_w;
    cudnnConvolutionMode_t mode;
    cudnnDataType_t compute;
    int groups;
    cudnnMathType_t math;
    cudnnReorderType_t reorder;
};

struct cudnnPoolingStruct {
    uint32_t magic;
    int set;
    cudnnPoolingMode_t mode;
    cudnnNanPropagation_t nan;
    int win_h, win_w, pad_h, pad_w, str_h, str_w;
};

struct cudnnActivationStruct {
    uint32_t magic;
    int set;
    cudnnActivationMode_t mode;
    cudnnNanPropagation_t nan;
    double coef, swish;
};

/* Records msg as the thread's last error (cudnnGetLastErrorString) and
 * returns st. */
cudnnStatus_t sim_cudnn_fail(cudnnStatus_t st, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* SUCCESS if h is a live handle (NULL: BAD_PARAM_NULL_POINTER, unknown:
 * BAD_PARAM). */
cudnnStatus_t sim_cudnn_check_handle(cudnnHandle_t h);

/* Whether h is a live handle with that serial (never reads a dead one). */
int sim_cudnn_handle_is(cudnnHandle_t h, uint64_t serial);

/* Whether context ctx still exists and its device is the one of *uuid (a
 * context the shim re-made on another GPU fails this, as a destroyed one).
 * Leaves the caller's current context as it was. 1 yes, 0 no. */
int sim_cudnn_ctx_on(CUcontext ctx, const CUuuid *uuid);

/* Converts descriptors to a validated convolution problem. */
cudnnStatus_t sim_cudnn_conv_problem(const cudnnTensorDescriptor_t xd,
                                     const cudnnFilterDescriptor_t wd,
                                     const cudnnConvolutionDescriptor_t cd,
                                     const cudnnTensorDescriptor_t yd, sim_conv_t *p);

/* A unit of work run later on the handle's stream. SIM_JOB_CONVERT (the
 * backend's 16-bit conversion): out (view v[1], type types[1]) = in[0]
 * (view v[0], type types[0]), types being backend_kernels.h's SIMBK_*. */
typedef enum {
    SIM_JOB_CONV_FWD, SIM_JOB_CONV_BWD_DATA, SIM_JOB_CONV_BWD_FILTER, SIM_JOB_BWD_BIAS,
    SIM_JOB_POOL_FWD, SIM_JOB_POOL_BWD, SIM_JOB_ACT_FWD, SIM_JOB_ACT_BWD, SIM_JOB_ADD,
    SIM_JOB_SET, SIM_JOB_SCALE, SIM_JOB_CONVERT,
} sim_job_kind_t;

typedef struct sim_job {
    sim_job_kind_t kind;
    int algo;
    float alpha, beta;
    sim_conv_t conv;
    sim_pool_t pool;
    sim_t4_t v[4];
    int act_mode;
    double coef;
    int types[2];
    const void *in[3];
    void *out;
} sim_job_t;

/* Launches the kernels of *job on h's stream (their parameters are copied
 * at the launch). */
cudnnStatus_t sim_cudnn_enqueue(cudnnHandle_t h, const sim_job_t *job);

#endif
