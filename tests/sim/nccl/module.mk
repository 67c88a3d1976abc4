# tests/sim/nccl/: the tests of simcuda's NCCL (sim/nccl/): the unit and
# multi-process API test and the NVIDIA-header-only client test
# (tests/clients/nccl_client.c), and the one across simulated hosts
# (net_test.c with its client net_client.c).

# Reduction order is the plan's (as in sim/nccl/module.mk): no contraction
# into FMA.
$(B)/obj/tests/sim/nccl/api_test.o: CFLAGS += -O3 -ffp-contract=off

# Unit + multi-process API test: links the engine and transport statically
# (their symbols are local in the library), the library and the driver
# dynamically.
$(B)/tests/sim_nccl_api_test: $(B)/obj/tests/sim/nccl/api_test.o $(NCCL_CORE_OBJS) \
		$(TEST_HARNESS_OBJ) $(SIM_TEST_ABI_OBJ) $(B)/sim/libnccl.so $(B)/sim/libcuda.so.1 \
		| $(NCCL_TWIN)
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) -o $@ $(B)/obj/tests/sim/nccl/api_test.o $(NCCL_CORE_OBJS) \
		$(TEST_HARNESS_OBJ) $(SIM_TEST_ABI_OBJ) -L$(B)/sim -lnccl $(B)/sim/libcuda.so.1 $(CMOCKA_LIBS) -lrt -lm

# Client written only against NVIDIA's headers.
$(B)/tests/sim_nccl_client_test: tests/clients/nccl_client.c $(B)/sim/libnccl.so $(B)/sim/libcuda.so.1 \
		| $(NCCL_TWIN)
	@mkdir -p $(dir $@)
	$(CC) -I$(CUDA_HOME)/include -std=gnu11 -Wall -Wextra -g $(filter -fsanitize=%,$(CFLAGS)) \
		tests/clients/nccl_client.c -L$(B)/sim -lnccl -l:libcuda.so.1 $(LDFLAGS) -lm -o $@

TESTS += $(B)/tests/sim_nccl_api_test $(B)/tests/sim_nccl_client_test

# Across simulated hosts (scripts/simhosts, needs root): the nccl.h client
# (with simcuda NCCL's reference reduction for the expected values) and
# its test.
$(B)/obj/tests/sim/nccl/net_client.o: CFLAGS += -O2 -ffp-contract=off
$(B)/tests/sim/nccl/net_client: $(B)/obj/tests/sim/nccl/net_client.o \
		$(B)/obj/sim/nccl/reduce.o $(SIMF16_OBJ) $(B)/sim/libnccl.so $(B)/sim/libcuda.so.1 \
		| $(NCCL_TWIN)
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) -o $@ $(B)/obj/tests/sim/nccl/net_client.o $(B)/obj/sim/nccl/reduce.o \
		$(SIMF16_OBJ) -L$(B)/sim -lnccl $(B)/sim/libcuda.so.1 -lm
$(B)/tests/sim_nccl_net_test: $(B)/obj/tests/sim/nccl/net_test.o $(TEST_HARNESS_OBJ) \
		| $(B)/tests/sim/nccl/net_client
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) -o $@ $(filter %.o,$^) $(CMOCKA_LIBS)
# In `make test`, and alone with `make test-hosts`.
TESTS += $(B)/tests/sim_nccl_net_test
HOSTS_TESTS += $(B)/tests/sim_nccl_net_test
