# intercept/: one file per intercepted library (the generated pass-through
# wrappers of intercept/funcs.h in gen.c, hand-written decisions in cuda.c,
# cublas.c, cublaslt.c, cudnn.c, cudnn_backend.c, nccl.c). The shim compiles $(INTERCEPT_SRCS).

INTERCEPT_SRCS := intercept/gen.c intercept/cuda.c intercept/cublas.c intercept/cudnn.c \
    intercept/cudnn_backend.c intercept/cublaslt.c
INTERCEPT_SRCS += intercept/nccl.c
