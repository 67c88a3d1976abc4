# simcuda cuBLASLt: build/sim/libcublasLt.so.13 (+ libcublasLt.so), its
# kernels (sim/cublaslt/kernels.cu through the CUDA-on-CPU layer: a fatbin
# embedded in the library, the same source's twins in
# build/sim/twins/libsimtwin_cublaslt.so, listed by scripts/simenv). Its
# unit/API test is tests/sim/cublaslt/module.mk's.

LT_SRCS := sim/cublaslt/lt.c
LT_OBJS := $(patsubst %.c,$(B)/obj/%.o,$(LT_SRCS)) $(B)/obj/sim/cublaslt/blob.o
LT_FATBIN := $(B)/gen/simlt.fatbin
LT_TWIN := $(B)/sim/twins/libsimtwin_cublaslt.so
$(eval $(call cucpu_cu,sim/cublaslt/kernels.cu,$(LT_FATBIN),$(LT_TWIN),sim/cublaslt/lt_kernels.h \
    sim/common/f16_impl.h))

# The summation order is the one written: no contraction into FMA.
$(LT_OBJS): CFLAGS += -ffp-contract=off

$(B)/obj/sim/cublaslt/blob.o: CPPFLAGS += -DSIM_CUBLASLT_FATBIN='"$(LT_FATBIN)"'
$(B)/obj/sim/cublaslt/blob.o: $(LT_FATBIN)

# -Bsymbolic-functions: calls to its own exports bind inside the library (as
# simcuda's cuBLAS, sim/cublas/module.mk).
$(B)/sim/libcublasLt.so.13: $(LT_OBJS) $(SIMDRV_OBJ) $(SIM_LIVE_OBJ) $(SIM_KMOD_OBJ) \
		$(SIM_CUBLAS_STATUS_OBJ) sim/cublaslt/libcublasLt.map
	@mkdir -p $(dir $@)
	$(CC) $(SO_LDFLAGS) -Wl,-soname,libcublasLt.so.13 -Wl,--no-undefined -Wl,-Bsymbolic-functions \
		-Wl,--version-script=sim/cublaslt/libcublasLt.map -o $@ \
		$(LT_OBJS) $(SIMDRV_OBJ) $(SIM_LIVE_OBJ) $(SIM_KMOD_OBJ) $(SIM_CUBLAS_STATUS_OBJ) -ldl -lm

$(B)/sim/libcublasLt.so: $(B)/sim/libcublasLt.so.13
	ln -sf libcublasLt.so.13 $@

ALL += $(B)/sim/libcublasLt.so.13 $(B)/sim/libcublasLt.so $(LT_TWIN)
