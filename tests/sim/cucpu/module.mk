# tests/sim/cucpu/: the test of the CUDA-on-CPU layer (sim/cucpu/) and its
# bench: the kernels of tests/sim/cucpu/test_kernels.cu built both ways
# (cucpu_cu: nvcc's fatbin and the host compiler's twin library).

CUCPU_TEST_FATBIN := $(B)/tests/sim/cucpu/test_kernels.fatbin
CUCPU_TEST_TWIN := $(B)/sim/test-twins/libcucpu_test_kernels.so
$(eval $(call cucpu_cu,tests/sim/cucpu/test_kernels.cu,$(CUCPU_TEST_FATBIN),$(CUCPU_TEST_TWIN),sim/cucpu/wmma.h))

$(B)/obj/tests/sim/cucpu/layer_test.o $(B)/obj/tests/sim/cucpu/bench_cucpu.o: \
    CPPFLAGS += -DCUCPU_TEST_FATBIN='"$(patsubst $(B)/%,%,$(CUCPU_TEST_FATBIN))"' \
    -DCUCPU_TEST_TWIN='"$(patsubst $(B)/%,%,$(CUCPU_TEST_TWIN))"'
$(B)/obj/tests/sim/cucpu/layer_test.o $(B)/obj/tests/sim/cucpu/bench_cucpu.o: CFLAGS += -ffp-contract=off

$(B)/tests/sim_cucpu_layer_test: $(B)/obj/tests/sim/cucpu/layer_test.o $(B)/obj/tests/sim/cucpu/test_kernels.cu.o \
		$(TEST_HARNESS_OBJ) $(CUCPU_LIB) | $(CUCPU_TEST_FATBIN) $(CUCPU_TEST_TWIN) $(SIMCUDA_LIB) \
		$(B)/sim/libcuda.so
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) -o $@ $(filter %.o,$^) -L$(B)/sim -lcucpu -lcuda -ldl $(CMOCKA_LIBS) -lm

$(B)/bench/cucpu_bench: $(B)/obj/tests/sim/cucpu/bench_cucpu.o $(B)/obj/tests/sim/cucpu/test_kernels.cu.o \
		$(TEST_HARNESS_OBJ) $(CUCPU_LIB) | $(CUCPU_TEST_FATBIN) $(CUCPU_TEST_TWIN) \
		$(SIMCUDA_LIB) $(B)/sim/libcuda.so
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) -o $@ $(filter %.o,$^) -L$(B)/sim -lcucpu -lcuda -ldl -lm

TESTS += $(B)/tests/sim_cucpu_layer_test
BENCHES += $(B)/bench/cucpu_bench
