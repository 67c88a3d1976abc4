# intercept/: one file per intercepted library (the generated pass-through
# wrappers of intercept/funcs.h in gen.c, hand-written decisions in cuda.c,
# cublas.c, cudnn.c). The shim compiles $(INTERCEPT_SRCS).

INTERCEPT_SRCS := intercept/gen.c intercept/cuda.c intercept/cublas.c intercept/cudnn.c
INTERCEPT_SRCS += intercept/nccl.c
