# simcuda cuBLASLt: build/sim/libcublasLt.so.13 (+ libcublasLt.so), its
# kernels (a fatbin embedded in the library; their CPU twins in
# build/sim/twins/libsimtwin_cublaslt.so, listed by scripts/simenv) and its
# unit/API test.

LT_SRCS := sim/cublaslt/lt.c
LT_OBJS := $(patsubst %.c,$(B)/obj/%.o,$(LT_SRCS)) $(B)/obj/sim/cublaslt/blob.o
LT_FATBIN := $(B)/gen/simlt.fatbin
# SASS for every simulated model's architecture, PTX for later ones.
LT_GENCODE := -gencode arch=compute_75,code=sm_75 -gencode arch=compute_80,code=sm_80 \
    -gencode arch=compute_86,code=sm_86 -gencode arch=compute_89,code=sm_89 \
    -gencode arch=compute_90,code=sm_90 -gencode arch=compute_100,code=[sm_100,compute_100]

# The summation order is the one written: no contraction into FMA.
$(LT_OBJS) $(B)/obj/sim/cublaslt/twin.o $(B)/obj/tests/sim_cublaslt/sim_cublaslt_test.o: \
	CFLAGS += -ffp-contract=off

$(LT_FATBIN): sim/cublaslt/kernels.cu sim/cublaslt/lt_kernels.h
	@mkdir -p $(dir $@)
	$(NVCC) -I. -O3 -fmad=false -Wno-deprecated-gpu-targets -fatbin $(LT_GENCODE) -o $@ $<

$(B)/obj/sim/cublaslt/blob.o: CPPFLAGS += -DSIM_CUBLASLT_FATBIN='"$(LT_FATBIN)"'
$(B)/obj/sim/cublaslt/blob.o: $(LT_FATBIN)

$(B)/sim/libcublasLt.so.13: $(LT_OBJS) $(SIMDRV_OBJ) $(SIM_LIVE_OBJ) sim/cublaslt/libcublasLt.map
	@mkdir -p $(dir $@)
	$(CC) $(SO_LDFLAGS) -Wl,-soname,libcublasLt.so.13 -Wl,--no-undefined \
		-Wl,--version-script=sim/cublaslt/libcublasLt.map -o $@ \
		$(LT_OBJS) $(SIMDRV_OBJ) $(SIM_LIVE_OBJ) -ldl -lm

$(B)/sim/libcublasLt.so: $(B)/sim/libcublasLt.so.13
	ln -sf libcublasLt.so.13 $@

$(B)/sim/twins/libsimtwin_cublaslt.so: $(B)/obj/sim/cublaslt/twin.o
	@mkdir -p $(dir $@)
	$(CC) $(SO_LDFLAGS) -o $@ $^ -lm

ALL += $(B)/sim/libcublasLt.so.13 $(B)/sim/libcublasLt.so $(B)/sim/twins/libsimtwin_cublaslt.so

$(B)/tests/sim_cublaslt_test: $(B)/obj/tests/sim_cublaslt/sim_cublaslt_test.o \
		$(TEST_HARNESS_OBJ) $(SIM_TEST_ABI_OBJ) | $(B)/sim/libcublasLt.so $(B)/sim/libcuda.so \
		$(B)/sim/twins/libsimtwin_cublaslt.so
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) -o $@ $(filter %.o,$^) -L$(B)/sim -lcublasLt -lcuda $(CMOCKA_LIBS) -lrt -lm

TESTS += $(B)/tests/sim_cublaslt_test
