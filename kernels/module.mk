# kernels/: the shim's own device kernels and the code that launches them:
# d2's portable GEMM and convolutions (kernels/portable.cu, one source
# through the CUDA-on-CPU layer: nvcc's fatbin embedded in libeasyscale.so,
# the host compiler's twin for simcuda) and their launchers (gemm.c,
# conv.c, portable.c, archcheck.c), and the virtual collectives' reduction
# kernel (reduce.cu, launched by reduce.c).
#
# The shim compiles $(KERNELS_SHIM_SRCS) and links $(KERNELS_SHIM_OBJS).

KERNELS_SHIM_SRCS := kernels/portable.c kernels/gemm.c kernels/conv.c kernels/archcheck.c
KERNELS_SHIM_OBJS := $(B)/obj/kernels/portable_blob.o
# The int8 GEMM's plain C reference (d2int8.c; not part of the shim):
# linked by the test clients and the bench that check the kernel's bits
# against it (with -lm). Every float operation rounds once (no
# contraction), as in the kernels.
KERNELS_D2INT8_OBJ := $(B)/obj/kernels/d2int8.o
$(KERNELS_D2INT8_OBJ): CFLAGS += -ffp-contract=off
ES_PORTABLE_FATBIN := $(B)/gen/es_portable.fatbin
ES_PORTABLE_TWIN := $(B)/sim/twins/libsimtwin_easyscale.so

# SASS for every architecture this nvcc can build (CUDA 13: sm_75 to
# sm_121) and PTX of the newest, which the driver JITs on later GPUs. The
# kernels' arithmetic is explicit round-to-nearest operations (and nvcc
# gets -fmad=false -ftz=false): SASS or JIT, the bits are the same.
ES_SM_LIST := $(shell $(NVCC) --list-gpu-code 2>/dev/null | sed -n 's/^sm_\([0-9]*\)$$/\1/p' | sort -n)
ifeq ($(filter 75,$(ES_SM_LIST)),)
$(error $(NVCC) --list-gpu-code lists no sm_75: d2's kernels need a CUDA 13 nvcc)
endif
ES_SM_NEWEST := $(lastword $(ES_SM_LIST))
ES_GENCODE := $(foreach s,$(ES_SM_LIST),-gencode arch=compute_$(s),code=sm_$(s)) \
    -gencode arch=compute_$(ES_SM_NEWEST),code=compute_$(ES_SM_NEWEST)

$(eval $(call cucpu_cu,kernels/portable.cu,$(ES_PORTABLE_FATBIN),$(ES_PORTABLE_TWIN),kernels/portable_kernels.h kernels/d2int8_kernels.h \
    sim/cucpu/wmma.h lib/half.h))
$(ES_PORTABLE_FATBIN): CUCPU_GENCODE := $(ES_GENCODE)
# compressed (a dozen architectures' SASS, embedded in libeasyscale.so);
# the architectures compiled in parallel
$(ES_PORTABLE_FATBIN): CUCPU_NVCCFLAGS += -Xfatbin -compress-all --threads 0

$(B)/obj/kernels/portable_blob.o: CPPFLAGS += -DES_PORTABLE_FATBIN='"$(ES_PORTABLE_FATBIN)"'
$(B)/obj/kernels/portable_blob.o: $(ES_PORTABLE_FATBIN)

ALL += $(ES_PORTABLE_TWIN)

# The swap engine's chunk checksum (move/swap.c): swapsum.cu, single
# source (sim/cucpu): a fatbin embedded by swapsum_blob.c, and its twin
# library for simcuda.
ES_SWAPSUM_FATBIN := $(B)/gen/es_swapsum.fatbin
ES_SWAPSUM_TWIN := $(B)/sim/twins/libsimtwin_esswap.so
KERNELS_SWAPSUM_OBJ := $(B)/obj/kernels/swapsum_blob.o
KERNELS_SHIM_OBJS += $(KERNELS_SWAPSUM_OBJ)
$(eval $(call cucpu_cu,kernels/swapsum.cu,$(ES_SWAPSUM_FATBIN),$(ES_SWAPSUM_TWIN),kernels/swapsum.h))
$(B)/obj/kernels/swapsum_blob.o: CPPFLAGS += -DES_SWAPSUM_FATBIN='"$(ES_SWAPSUM_FATBIN)"'
$(B)/obj/kernels/swapsum_blob.o: $(ES_SWAPSUM_FATBIN)
ALL += $(ES_SWAPSUM_TWIN)
# The virtual collectives' reduction kernel, single source (reduce.cu
# through sim/cucpu: nvcc SASS for sm_75, sm_80, sm_86, sm_89, sm_90, sm_100
# and compute_100 PTX, embedded in the library by reduce_blob.c; the same
# source compiled by the host compiler is its simcuda twin). Its element
# arithmetic (reduce_kernels.h) is shared with the host transport; reduce.c
# loads and launches it.
KERNELS_SHIM_SRCS += kernels/reduce.c
KERNELS_SHIM_OBJS += $(B)/obj/kernels/reduce_blob.o
ES_REDUCE_FATBIN := $(B)/gen/es_reduce.fatbin
ES_REDUCE_TWIN := $(B)/sim/twins/libsimtwin_coll.so
$(eval $(call cucpu_cu,kernels/reduce.cu,$(ES_REDUCE_FATBIN),$(ES_REDUCE_TWIN),kernels/reduce_kernels.h lib/half.h))

$(B)/obj/kernels/reduce_blob.o: CPPFLAGS += -DES_REDUCE_FATBIN='"$(ES_REDUCE_FATBIN)"'
$(B)/obj/kernels/reduce_blob.o: $(ES_REDUCE_FATBIN)

ALL += $(ES_REDUCE_TWIN)

# The collective digests' hash kernel (EASYSCALE_DIGEST), single source
# (digest.cu through sim/cucpu: nvcc's fatbin embedded by digest_blob.c, the
# host compiler's twin for simcuda); digest.c loads and launches it.
KERNELS_SHIM_SRCS += kernels/digest.c
KERNELS_SHIM_OBJS += $(B)/obj/kernels/digest_blob.o
ES_DIGEST_FATBIN := $(B)/gen/es_digest.fatbin
ES_DIGEST_TWIN := $(B)/sim/twins/libsimtwin_digest.so
$(eval $(call cucpu_cu,kernels/digest.cu,$(ES_DIGEST_FATBIN),$(ES_DIGEST_TWIN),kernels/digest_kernel.h))

$(B)/obj/kernels/digest_blob.o: CPPFLAGS += -DES_DIGEST_FATBIN='"$(ES_DIGEST_FATBIN)"'
$(B)/obj/kernels/digest_blob.o: $(ES_DIGEST_FATBIN)

ALL += $(ES_DIGEST_TWIN)
