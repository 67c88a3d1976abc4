# tests/sim/cudnn/: the tests of simcuda's cuDNN (sim/cudnn/): the unit + API
# test, the backend with 16-bit tensors, and the NVIDIA-header-only client
# test (tests/clients/cudnn_client.c).

# Each algorithm's summation order must be the one written (as in
# sim/cudnn/module.mk): no contraction into FMA.
$(B)/obj/tests/sim/cudnn/api_test.o: CFLAGS += -ffp-contract=off

# Unit + API test: links the math cores statically (their symbols are local
# in the library) and the library and driver dynamically.
$(B)/tests/sim_cudnn_api_test: $(B)/obj/tests/sim/cudnn/api_test.o $(CUDNN_CORE_OBJS) \
		$(TEST_HARNESS_OBJ) $(SIM_TEST_ABI_OBJ) $(B)/sim/libcudnn.so $(B)/sim/libcuda.so.1 \
		| $(SIM_ARCH_TEST)
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) -o $@ $(B)/obj/tests/sim/cudnn/api_test.o $(CUDNN_CORE_OBJS) \
		$(TEST_HARNESS_OBJ) $(SIM_TEST_ABI_OBJ) -L$(B)/sim -lcudnn $(B)/sim/libcuda.so.1 $(CMOCKA_LIBS) -lm

# Client written only against NVIDIA's headers.
$(B)/tests/sim_cudnn_client_test: tests/clients/cudnn_client.c $(B)/sim/libcudnn.so $(B)/sim/libcuda.so.1
	@mkdir -p $(dir $@)
	$(CC) -I$(CUDA_HOME)/include -std=gnu11 -Wall -Wextra -g $(filter -fsanitize=%,$(CFLAGS)) \
		tests/clients/cudnn_client.c -L$(B)/sim -lcudnn -l:libcuda.so.1 $(LDFLAGS) -lm -o $@

TESTS += $(B)/tests/sim_cudnn_api_test $(B)/tests/sim_cudnn_client_test

# The backend with 16-bit tensors (against its own fp32 engines).
$(B)/tests/sim_cudnn_backend_half_test: $(B)/obj/tests/sim/cudnn/backend_half_test.o \
		$(TEST_HARNESS_OBJ) | $(B)/sim/libcudnn.so $(B)/sim/libcuda.so $(CUDNN_TWIN)
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) -o $@ $(filter %.o,$^) -L$(B)/sim -lcudnn -lcuda $(CMOCKA_LIBS) -lrt -lm

TESTS += $(B)/tests/sim_cudnn_backend_half_test
