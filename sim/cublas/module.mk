# simcuda cuBLAS: build/sim/libcublas.so.13 (+ libcublas.so), its unit test,
# the NVIDIA-header-only client test and the SGEMM bench.

# Shared by the three simcuda libraries (this file is included before
# sim/cudnn and sim/nccl's): the live-object registry (sim/common/live.h),
# and the library tests' ELF interface check (tests/sim_common).
SIM_TEST_ABI_OBJ := $(B)/obj/tests/sim_common/abi.o
# The per-context module of a library's kernels (sim/common/kmod.h).
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
$(CUBLAS_OBJS) $(CUBLAS_CORE_OBJS) $(B)/obj/sim/cublas/bench_sgemm.o \
    $(B)/obj/tests/sim_cublas/sim_cublas_test.o: CFLAGS += -O3 -ffp-contract=off

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

# The child of the tests that need a process of their own
# (tests/sim_cublas/lib_child.c) and the driver front that makes a GPU look
# older (tests/sim_cublas/old_gpu.c); the cuDNN test uses them too.
# The audit tests run the child under the shim (scripts/simenv --shim).
SIM_ARCH_TEST := $(B)/tests/lib_child $(B)/tests/old_gpu/libcuda.so.1 $(B)/lib/libeasyscale.so
$(B)/tests/old_gpu/libcuda.so.1: tests/sim_cublas/old_gpu.c
	@mkdir -p $(dir $@)
	$(CC) $(CPPFLAGS) $(CFLAGS) $(SO_LDFLAGS) -o $@ $< -ldl
$(B)/tests/lib_child: tests/sim_cublas/lib_child.c | $(B)/sim/libcublas.so $(B)/sim/libcudnn.so
	@mkdir -p $(dir $@)
	$(CC) $(CPPFLAGS) $(CFLAGS) -o $@ $< -L$(B)/sim -lcublas -lcudnn $(LDFLAGS) -ldl

# Unit + API test: links the math core statically (its symbols are local in
# the library) and the library and driver dynamically. It runs the client
# test on the bare build/sim directory (kernel twins found beside the driver).
$(B)/tests/sim_cublas_test: $(B)/obj/tests/sim_cublas/sim_cublas_test.o $(CUBLAS_CORE_OBJS) \
		$(TEST_HARNESS_OBJ) $(SIM_TEST_ABI_OBJ) | $(B)/sim/libcublas.so $(B)/sim/libcuda.so \
		$(SIM_ARCH_TEST) $(B)/tests/cublas_client_test $(SIMCUDA_GPU) $(CUBLAS_TWIN) \
		$(B)/sim/twins/libsimtwin_simtest.so
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) -o $@ $(B)/obj/tests/sim_cublas/sim_cublas_test.o $(CUBLAS_CORE_OBJS) \
		$(TEST_HARNESS_OBJ) $(SIM_TEST_ABI_OBJ) -L$(B)/sim -lcublas -lcuda $(CMOCKA_LIBS) -lm

# Client written only against NVIDIA's headers.
$(B)/tests/cublas_client_test: tests/clients/cublas_client.c | $(B)/sim/libcublas.so $(B)/sim/libcuda.so
	@mkdir -p $(dir $@)
	$(CC) -I$(CUDA_HOME)/include -std=gnu11 -Wall -Wextra -g $(filter -fsanitize=%,$(CFLAGS)) \
		tests/clients/cublas_client.c -L$(B)/sim -lcublas -lcuda $(LDFLAGS) -lm -o $@

TESTS += $(B)/tests/sim_cublas_test $(B)/tests/cublas_client_test

$(B)/bench/sgemm_bench: $(B)/obj/sim/cublas/bench_sgemm.o $(CUBLAS_CORE_OBJS) | $(CUBLAS_TWIN)
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) -o $@ $^ -ldl -lm

BENCHES += $(B)/bench/sgemm_bench
