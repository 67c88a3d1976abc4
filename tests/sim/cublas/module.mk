# tests/sim/cublas/: the tests of simcuda's cuBLAS (sim/cublas/): the unit +
# API test, the NVIDIA-header-only client test (tests/clients/cublas_client.c),
# and the child process and old-GPU driver front the cuDNN test uses too.

# The summation order must be the plan's whatever the optimiser does: no
# contraction into FMA (and never -ffast-math), as in sim/cublas/module.mk.
$(B)/obj/tests/sim/cublas/api_test.o: CFLAGS += -O3 -ffp-contract=off

# The child of the tests that need a process of their own
# (tests/sim/cublas/lib_child.c) and the driver front that makes a GPU look
# older (tests/sim/cublas/old_gpu.c); the cuDNN test uses them too.
# The audit tests run the child under the shim (scripts/simenv --shim).
SIM_ARCH_TEST := $(B)/tests/sim/cublas/lib_child $(B)/tests/sim/cublas/old_gpu/libcuda.so.1 $(B)/lib/libeasyscale.so
$(B)/tests/sim/cublas/old_gpu/libcuda.so.1: tests/sim/cublas/old_gpu.c
	@mkdir -p $(dir $@)
	$(CC) $(CPPFLAGS) $(CFLAGS) $(SO_LDFLAGS) -o $@ $< -ldl
$(B)/tests/sim/cublas/lib_child: tests/sim/cublas/lib_child.c | $(B)/sim/libcublas.so $(B)/sim/libcudnn.so
	@mkdir -p $(dir $@)
	$(CC) $(CPPFLAGS) $(CFLAGS) -o $@ $< -L$(B)/sim -lcublas -lcudnn $(LDFLAGS) -ldl

# Unit + API test: links the math core statically (its symbols are local in
# the library) and the library and driver dynamically. It runs the client
# test on the bare build/sim directory (kernel twins found beside the driver).
$(B)/tests/sim_cublas_api_test: $(B)/obj/tests/sim/cublas/api_test.o $(CUBLAS_CORE_OBJS) \
		$(TEST_HARNESS_OBJ) $(SIM_TEST_ABI_OBJ) | $(B)/sim/libcublas.so $(B)/sim/libcuda.so \
		$(SIM_ARCH_TEST) $(B)/tests/sim_cublas_client_test $(SIMCUDA_GPU) $(CUBLAS_TWIN) \
		$(B)/sim/twins/libsimtwin_simtest.so
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) -o $@ $(B)/obj/tests/sim/cublas/api_test.o $(CUBLAS_CORE_OBJS) \
		$(TEST_HARNESS_OBJ) $(SIM_TEST_ABI_OBJ) -L$(B)/sim -lcublas -lcuda $(CMOCKA_LIBS) -lm

# Client written only against NVIDIA's headers.
$(B)/tests/sim_cublas_client_test: tests/clients/cublas_client.c | $(B)/sim/libcublas.so $(B)/sim/libcuda.so
	@mkdir -p $(dir $@)
	$(CC) -I$(CUDA_HOME)/include -std=gnu11 -Wall -Wextra -g $(filter -fsanitize=%,$(CFLAGS)) \
		tests/clients/cublas_client.c -L$(B)/sim -lcublas -lcuda $(LDFLAGS) -lm -o $@

TESTS += $(B)/tests/sim_cublas_api_test $(B)/tests/sim_cublas_client_test
