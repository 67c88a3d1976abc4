# simcuda cuBLAS: build/sim/libcublas.so.13 (+ libcublas.so) and the SGEMM
# bench. Its tests are tests/sim/cublas/module.mk's.

# Shared by the three simcuda libraries (this file is included before
# sim/cudnn and sim/nccl's): the per-context module of a library's kernels
# (sim/common/kmod.h).
SIM_KMOD_OBJ := $(B)/obj/sim/common/kmod.o
# cuBLAS status names and messages, for cuBLAS and cuBLASLt
# (sim/common/cublas_status.h).
SIM_CUBLAS_STATUS_OBJ := $(B)/obj/sim/common/cublas_status.o

# The kernels, single source (sim/cucpu): the fatbin embedded in the library
# (fatbin_blob.c) and the twin library simcuda runs them from.
CUBLAS_FATBIN := $(B)/gen/simcublas.fatbin
CUBLAS_TWIN := $(B)/sim/twins/libsimtwin_cublas.so
$(eval $(call cucpu_cu,sim/cublas/kernels.cu,$(CUBLAS_FATBIN),$(CUBLAS_TWIN),sim/cublas/kparams.h sim/common/f16_impl.h))

CUBLAS_SRCS := sim/cublas/cublas.c sim/cublas/gemm.c sim/cublas/fatbin_blob.c
CUBLAS_OBJS := $(patsubst %.c,$(B)/obj/%.o,$(CUBLAS_SRCS))
# The plain-C references of the kernels' orders and the heuristic, linked
# statically by the unit test and the bench; they use the half / bf16
# conversions of sim/common/f16.c.
CUBLAS_CORE_OBJS := $(B)/obj/sim/cublas/gemm.o $(B)/obj/sim/cublas/ref.o \
    $(B)/obj/sim/cublas/level12.o $(SIMF16_OBJ)

$(B)/obj/sim/cublas/fatbin_blob.o: CPPFLAGS += -DSIMCUBLAS_FATBIN='"$(CUBLAS_FATBIN)"'
$(B)/obj/sim/cublas/fatbin_blob.o: $(CUBLAS_FATBIN)

# The summation order must be the plan's whatever the optimiser does: no
# contraction into FMA (and never -ffast-math).
# (tests/sim/cublas/module.mk: the same for the unit test.)
$(CUBLAS_OBJS) $(CUBLAS_CORE_OBJS) $(B)/obj/sim/cublas/bench_sgemm.o: CFLAGS += -O3 -ffp-contract=off

# -Bsymbolic-functions: the library's calls to its own exports (cublasSgemm_v2
# -> cublasSgemm_v2_64) bind inside it, as in NVIDIA's libraries, never to a
# preloaded interposer's export of the same name (the shim's wrappers).
$(B)/sim/libcublas.so.13: $(CUBLAS_OBJS) $(SIMF16_OBJ) $(SIMDRV_OBJ) $(SIM_LIVE_OBJ) \
		$(SIM_KMOD_OBJ) $(SIM_CUBLAS_STATUS_OBJ) sim/cublas/libcublas.map
	@mkdir -p $(dir $@)
	$(CC) $(SO_LDFLAGS) -Wl,-soname,libcublas.so.13 -Wl,-Bsymbolic-functions \
		-Wl,--version-script=sim/cublas/libcublas.map -o $@ \
		$(CUBLAS_OBJS) $(SIMF16_OBJ) $(SIMDRV_OBJ) $(SIM_LIVE_OBJ) $(SIM_KMOD_OBJ) \
		$(SIM_CUBLAS_STATUS_OBJ) -ldl -lm

$(B)/sim/libcublas.so: $(B)/sim/libcublas.so.13
	ln -sf libcublas.so.13 $@

ALL += $(B)/sim/libcublas.so.13 $(B)/sim/libcublas.so $(CUBLAS_TWIN)

$(B)/bench/sgemm_bench: $(B)/obj/sim/cublas/bench_sgemm.o $(CUBLAS_CORE_OBJS) | $(CUBLAS_TWIN)
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) -o $@ $^ -ldl -lm

BENCHES += $(B)/bench/sgemm_bench
