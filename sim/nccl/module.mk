# simcuda NCCL: build/sim/libnccl.so.2 (+ libnccl.so), its unit/multi-process
# test, the NVIDIA-header-only client test and the allreduce bench.

# The kernels, single source (sim/cucpu): the fatbin embedded in the library
# (fatbin_blob.c) and the twin library simcuda runs them from.
NCCL_FATBIN := $(B)/gen/simnccl.fatbin
NCCL_TWIN := $(B)/sim/twins/libsimtwin_nccl.so
$(eval $(call cucpu_cu,sim/nccl/kernels.cu,$(NCCL_FATBIN),$(NCCL_TWIN),sim/nccl/nkern.h sim/common/f16_impl.h))

NCCL_SRCS := sim/nccl/nccl.c sim/nccl/reduce.c sim/nccl/transport.c sim/nccl/staging.c sim/nccl/net.c \
    sim/nccl/fatbin_blob.c
NCCL_OBJS := $(patsubst %.c,$(B)/obj/%.o,$(NCCL_SRCS))
NCCL_CORE_OBJS := $(B)/obj/sim/nccl/reduce.o $(B)/obj/sim/nccl/transport.o $(SIMF16_OBJ)

$(B)/obj/sim/nccl/fatbin_blob.o: CPPFLAGS += -DSIMNCCL_FATBIN='"$(NCCL_FATBIN)"'
$(B)/obj/sim/nccl/fatbin_blob.o: $(NCCL_FATBIN)

# Reduction order is the plan's: no contraction into FMA (never -ffast-math).
$(NCCL_OBJS) $(B)/obj/tests/sim_nccl/sim_nccl_test.o: CFLAGS += -O3 -ffp-contract=off

$(B)/sim/libnccl.so.2: $(NCCL_OBJS) $(SIMF16_OBJ) $(SIMDRV_OBJ) $(SIM_LIVE_OBJ) $(SIM_KMOD_OBJ) \
		sim/nccl/libnccl.map
	@mkdir -p $(dir $@)
	$(CC) $(SO_LDFLAGS) -Wl,-soname,libnccl.so.2 \
		-Wl,--version-script=sim/nccl/libnccl.map -o $@ \
		$(NCCL_OBJS) $(SIMF16_OBJ) $(SIMDRV_OBJ) $(SIM_LIVE_OBJ) $(SIM_KMOD_OBJ) -ldl -lrt -lm

$(B)/sim/libnccl.so: $(B)/sim/libnccl.so.2
	ln -sf libnccl.so.2 $@

ALL += $(B)/sim/libnccl.so.2 $(B)/sim/libnccl.so $(NCCL_TWIN)

# Unit + multi-process API test: links the engine and transport statically
# (their symbols are local in the library), the library and the driver
# dynamically.
$(B)/tests/sim_nccl_test: $(B)/obj/tests/sim_nccl/sim_nccl_test.o $(NCCL_CORE_OBJS) \
		$(TEST_HARNESS_OBJ) $(SIM_TEST_ABI_OBJ) $(B)/sim/libnccl.so $(B)/sim/libcuda.so.1 \
		| $(NCCL_TWIN)
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) -o $@ $(B)/obj/tests/sim_nccl/sim_nccl_test.o $(NCCL_CORE_OBJS) \
		$(TEST_HARNESS_OBJ) $(SIM_TEST_ABI_OBJ) -L$(B)/sim -lnccl $(B)/sim/libcuda.so.1 $(CMOCKA_LIBS) -lrt -lm

# Client written only against NVIDIA's headers.
$(B)/tests/nccl_client_test: tests/clients/nccl_client.c $(B)/sim/libnccl.so $(B)/sim/libcuda.so.1 \
		| $(NCCL_TWIN)
	@mkdir -p $(dir $@)
	$(CC) -I$(CUDA_HOME)/include -std=gnu11 -Wall -Wextra -g $(filter -fsanitize=%,$(CFLAGS)) \
		tests/clients/nccl_client.c -L$(B)/sim -lnccl -l:libcuda.so.1 $(LDFLAGS) -lm -o $@

TESTS += $(B)/tests/sim_nccl_test $(B)/tests/nccl_client_test

$(B)/bench/allreduce_bench: $(B)/obj/sim/nccl/bench_allreduce.o $(B)/sim/libnccl.so \
		$(B)/sim/libcuda.so.1 | $(NCCL_TWIN)
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) -o $@ $(B)/obj/sim/nccl/bench_allreduce.o -L$(B)/sim -lnccl \
		$(B)/sim/libcuda.so.1 -lm

BENCHES += $(B)/bench/allreduce_bench

# Across simulated hosts (scripts/simhosts, needs root): the nccl.h client
# (with simcuda NCCL's reference reduction for the expected values) and
# its test.
$(B)/obj/tests/sim_nccl/ncclnet_client.o: CFLAGS += -O2 -ffp-contract=off
$(B)/tests/ncclnet_client: $(B)/obj/tests/sim_nccl/ncclnet_client.o \
		$(B)/obj/sim/nccl/reduce.o $(SIMF16_OBJ) $(B)/sim/libnccl.so $(B)/sim/libcuda.so.1 \
		| $(NCCL_TWIN)
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) -o $@ $(B)/obj/tests/sim_nccl/ncclnet_client.o $(B)/obj/sim/nccl/reduce.o \
		$(SIMF16_OBJ) -L$(B)/sim -lnccl $(B)/sim/libcuda.so.1 -lm
$(B)/tests/sim_ncclnet_test: $(B)/obj/tests/sim_nccl/sim_ncclnet_test.o $(TEST_HARNESS_OBJ) \
		$(B)/tests/ncclnet_client
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) -o $@ $(B)/obj/tests/sim_nccl/sim_ncclnet_test.o $(TEST_HARNESS_OBJ) \
		$(CMOCKA_LIBS)
ALL += $(B)/tests/ncclnet_client
TESTS += $(B)/tests/sim_ncclnet_test
