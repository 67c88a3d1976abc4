# kernels/: the shim's own device kernels and the code that launches them:
# d2's portable GEMM and convolutions (portable.cu for nvcc, embedded in
# libeasyscale.so as a fatbin; portable_twin.c, the same element functions,
# for simcuda) and their launchers (gemm.c, conv.c, portable.c).
#
# The shim compiles $(KERNELS_SHIM_SRCS) and links $(KERNELS_SHIM_OBJS).

KERNELS_SHIM_SRCS := kernels/portable.c kernels/gemm.c kernels/conv.c
KERNELS_SHIM_OBJS := $(B)/obj/kernels/portable_blob.o
ES_PORTABLE_FATBIN := $(B)/gen/es_portable.fatbin
ES_GENCODE := -gencode arch=compute_75,code=compute_75 -gencode arch=compute_80,code=sm_80 \
    -gencode arch=compute_90,code=[sm_90,compute_90]

# d2's portable kernels: fatbin embedded in the library (portable_blob.c).
# -ftz=false -fmad=false: IEEE denormals and no contraction, whatever flags
# NVCC is given (the element functions use explicit _rn intrinsics anyway).
$(ES_PORTABLE_FATBIN): kernels/portable.cu kernels/portable_kernels.h
	@mkdir -p $(dir $@)
	$(NVCC) -I. -O3 -ftz=false -fmad=false -Wno-deprecated-gpu-targets -fatbin $(ES_GENCODE) \
		-o $@ $<

$(B)/obj/kernels/portable_blob.o: CPPFLAGS += -DES_PORTABLE_FATBIN='"$(ES_PORTABLE_FATBIN)"'
$(B)/obj/kernels/portable_blob.o: $(ES_PORTABLE_FATBIN)

# Twins of the portable kernels, for simcuda (scripts/simenv lists them).
$(B)/obj/kernels/portable_twin.o: CFLAGS += -ffp-contract=off
$(B)/sim/twins/libsimtwin_easyscale.so: $(B)/obj/kernels/portable_twin.o
	@mkdir -p $(dir $@)
	$(CC) $(SO_LDFLAGS) -o $@ $^ -lm

ALL += $(B)/sim/twins/libsimtwin_easyscale.so

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
$(eval $(call cucpu_cu,kernels/reduce.cu,$(ES_REDUCE_FATBIN),$(ES_REDUCE_TWIN),kernels/reduce_kernels.h))

$(B)/obj/kernels/reduce_blob.o: CPPFLAGS += -DES_REDUCE_FATBIN='"$(ES_REDUCE_FATBIN)"'
$(B)/obj/kernels/reduce_blob.o: $(ES_REDUCE_FATBIN)

ALL += $(ES_REDUCE_TWIN)
