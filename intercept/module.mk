# intercept/: one file per intercepted library (the generated pass-through
# wrappers of shim/funcs.h in gen.c, hand-written decisions in cuda.c (the
# vendor libraries' physical view of the devices in vendordev.c),
# cublas.c, cublaslt.c, cudnn.c, cudnn_backend.c, nccl.c), the entry path
# (enter.c), the time-slicing check before a call (tsdefer.c), and virtual/: the virtual handles and memory that let an EST
# move under the application (the translating real table of thunks.c,
# cuda_handles.c, cuda_mem.c, the vendor handles of libh*.c, the cuDNN
# descriptor journal of cudnn_journal.c, refuse.c).
# The shim compiles $(INTERCEPT_SRCS). Their tests are tests/intercept/module.mk's
# (the decisions) and tests/move/module.mk's (the virtual handles across moves).

INTERCEPT_SRCS := intercept/enter.c intercept/gen.c intercept/cuda.c intercept/cublas.c \
    intercept/cudnn.c intercept/cudnn_backend.c intercept/cudnn_heur.c intercept/cublaslt.c \
    intercept/nccl.c intercept/tsdefer.c intercept/vendordev.c
INTERCEPT_SRCS += intercept/virtual/thunks.c intercept/virtual/cuda_handles.c \
    intercept/virtual/cuda_mem.c intercept/virtual/refuse.c intercept/virtual/libh.c \
    intercept/virtual/libh_gen.c intercept/virtual/cudnn_journal.c

# The driver functions of cuda.h that take a virtual handle (generated from
# cuda.h; intercept/virtual/refuse.c refuses those funcs.h does not wrap).
ES_HANDLE_FNS_H := $(B)/gen/cuda_handle_fns.h
$(ES_HANDLE_FNS_H): scripts/cuda-handle-fns $(CUDA_HOME)/include/cuda.h
	@mkdir -p $(dir $@)
	CC=$(CC) scripts/cuda-handle-fns $(CUDA_HOME) > $@.tmp && mv $@.tmp $@
$(B)/obj/intercept/virtual/refuse.o: $(ES_HANDLE_FNS_H)
# The vendor functions that take a library handle and funcs.h does not wrap
# (generated from NVIDIA's headers; intercept/virtual/libh_gen.c wraps them).
ES_VENDOR_FNS_H := $(B)/gen/vendor_handle_fns.h
$(ES_VENDOR_FNS_H): scripts/vendor-handle-fns shim/funcs.h $(CUDA_HOME)/include/cublas_api.h \
		$(CUDA_HOME)/include/cublasLt.h $(CUDNN_INCLUDE)/cudnn.h
	@mkdir -p $(dir $@)
	CC=$(CC) CUDNN_INCLUDE=$(CUDNN_INCLUDE) scripts/vendor-handle-fns $(CUDA_HOME) shim/funcs.h \
	    > $@.tmp && mv $@.tmp $@
$(B)/obj/intercept/virtual/libh_gen.o: $(ES_VENDOR_FNS_H)
$(B)/obj/intercept/virtual/libh_gen.o: CPPFLAGS += -I$(B)/gen
$(B)/obj/intercept/virtual/refuse.o: CPPFLAGS += -I$(B)/gen
