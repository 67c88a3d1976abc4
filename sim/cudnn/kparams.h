/* simcuda cuDNN: the kernels of the library's module (sim/cudnn/kernels.cu)
 * in the order of the library's function table, and the constants they
 * share with the C side (cudnn.c). Kernel parameters are kern.h's views and
 * problems (sim_t4_t, sim_conv_t, sim_pool_t) and the backend's conversion
 * arguments (backend_kernels.h's simbk_convert_t), one layout for C, C++
 * and the device. */
#ifndef SIM_CUDNN_KPARAMS_H
#define SIM_CUDNN_KPARAMS_H

#define SIMCUDNN_KERNELS(X)                                                    \
    X(SIMCUDNN_K_CONV_FWD, "simcudnn_conv_fwd")                                \
    X(SIMCUDNN_K_CONV_BWD_DATA, "simcudnn_conv_bwd_data")                      \
    X(SIMCUDNN_K_CONV_BWD_DATA_ATOMIC, "simcudnn_conv_bwd_data_atomic")        \
    X(SIMCUDNN_K_CONV_BWD_FILTER, "simcudnn_conv_bwd_filter")                  \
    X(SIMCUDNN_K_CONV_BWD_FILTER_ATOMIC, "simcudnn_conv_bwd_filter_atomic")    \
    X(SIMCUDNN_K_BWD_BIAS, "simcudnn_bwd_bias")                                \
    X(SIMCUDNN_K_FILL, "simcudnn_fill")                                        \
    X(SIMCUDNN_K_ADD, "simcudnn_add")                                          \
    X(SIMCUDNN_K_ACT_FWD, "simcudnn_act_fwd")                                  \
    X(SIMCUDNN_K_ACT_BWD, "simcudnn_act_bwd")                                  \
    X(SIMCUDNN_K_POOL_FWD, "simcudnn_pool_fwd")                                \
    X(SIMCUDNN_K_POOL_BWD, "simcudnn_pool_bwd")                                \
    X(SIMCUDNN_K_POOL_BWD_ATOMIC, "simcudnn_pool_bwd_atomic")                  \
    X(SIMCUDNN_K_CONVERT, "simcudnn_convert")

#define SIMCUDNN_K_ENUM(id, name) id,
enum { SIMCUDNN_KERNELS(SIMCUDNN_K_ENUM) SIMCUDNN_K_COUNT };
#undef SIMCUDNN_K_ENUM

/* Threads per block of every kernel (grid-stride loops beyond the grid). */
#define SIMCUDNN_THREADS 256

/* Largest filter (R x S taps) the convolution kernels take; the API
 * refuses larger ones with CUDNN_STATUS_NOT_SUPPORTED. */
#define SIMCUDNN_MAX_TAPS 256

/* simcudnn_fill modes. */
enum { SIMCUDNN_FILL_SET = 0, SIMCUDNN_FILL_SCALE = 1, SIMCUDNN_FILL_BETA = 2 };

#endif
