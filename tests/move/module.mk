# tests/move/: the tests of move/: the machinery on simcuda's driver
# directly, linked with $(MOVE_OBJS) (move_memreg_test, move_swap_test,
# move_vhandle_test, move_door_test, move_mover_test, move_tslice_test,
# move_mempool_test; helpers in movetest.c), and whole processes moved under
# the shim: one EST (move_est_test, client move_client.c), the vendor
# libraries' handles across moves (move_vendor_test, client lib_client.c),
# the trainer's ESTs moved by the controller (move_ests_test) and a running
# job time-sliced (move_tsdyn_test); the swap bench.
# Variables local to this file are prefixed MVT_.

MVT_COMMON_OBJ := $(B)/obj/tests/move/movetest.o
MVT_LIBS := -L$(B)/sim -l:libcuda.so.1 $(CMOCKA_LIBS) $(FATBIN_LIBS) -ldl -lrt

$(B)/tests/move_memreg_test: $(B)/obj/tests/move/memreg_test.o $(MVT_COMMON_OBJ) \
		$(MOVE_OBJS) | $(SIMCUDA_LIB)
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) -o $@ $(filter %.o,$^) $(MVT_LIBS)

$(B)/tests/move_swap_test: $(B)/obj/tests/move/swap_test.o $(MVT_COMMON_OBJ) \
		$(MOVE_OBJS) | $(SIMCUDA_LIB) $(ES_SWAPSUM_TWIN)
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) -o $@ $(filter %.o,$^) $(MVT_LIBS)

$(B)/tests/move_vhandle_test: $(B)/obj/tests/move/vhandle_test.o $(MVT_COMMON_OBJ) \
		$(MOVE_OBJS) | $(SIMCUDA_LIB) $(ES_SWAPSUM_TWIN) \
		$(ES_SWAPSUM_FATBIN)
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) -o $@ $(filter %.o,$^) $(MVT_LIBS)

$(B)/tests/move_mover_test: $(B)/obj/tests/move/mover_test.o $(MVT_COMMON_OBJ) \
		$(MOVE_OBJS) | $(SIMCUDA_LIB) $(ES_SWAPSUM_TWIN)
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) -o $@ $(filter %.o,$^) $(MVT_LIBS)

$(B)/tests/move_tslice_test: $(B)/obj/tests/move/tslice_test.o $(MVT_COMMON_OBJ) \
		$(MOVE_OBJS) | $(SIMCUDA_LIB) $(ES_SWAPSUM_TWIN)
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) -o $@ $(filter %.o,$^) $(MVT_LIBS)

$(B)/tests/move_mempool_test: $(B)/obj/tests/move/mempool_test.o $(MVT_COMMON_OBJ) \
		$(MOVE_OBJS) | $(SIMCUDA_LIB)
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) -o $@ $(filter %.o,$^) $(MVT_LIBS)

# The door needs no driver.
$(B)/tests/move_door_test: $(B)/obj/tests/move/door_test.o $(B)/obj/move/door.o
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) -o $@ $(filter %.o,$^) $(CMOCKA_LIBS)

TESTS += $(B)/tests/move_memreg_test $(B)/tests/move_swap_test \
    $(B)/tests/move_vhandle_test $(B)/tests/move_door_test $(B)/tests/move_mover_test \
    $(B)/tests/move_tslice_test $(B)/tests/move_mempool_test

# Moving an EST under the shim: a cuda.h-only client and the whole-process
# test that moves it.
$(B)/obj/tests/move/move_client.o: $(ES_HANDLE_FNS_H)
$(B)/obj/tests/move/move_client.o: CPPFLAGS += -I$(B)/gen
$(B)/tests/move/move_client: $(B)/obj/tests/move/move_client.o | $(SIMCUDA_LIB)
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) -o $@ $< -L$(B)/sim -l:libcuda.so.1 -ldl

# One source, two programs (ES_TEST_PART 1: move_est_test, the client and
# the trainer at d1; 2: move_est2_test, the trainer at d2 across models),
# each well within the runner's time limit.
$(B)/obj/tests/move/est_test.o: CFLAGS += -DES_TEST_PART=1
$(B)/obj/tests/move/est2_test.o: tests/move/est_test.c
	@mkdir -p $(dir $@)
	$(CC) $(CPPFLAGS) $(CFLAGS) -DES_TEST_PART=2 -MMD -MP -c -o $@ $<
$(B)/tests/move_est_test $(B)/tests/move_est2_test: $(B)/tests/move_%_test: \
		$(B)/obj/tests/move/%_test.o $(TEST_HARNESS_OBJ) \
		| $(B)/lib/libeasyscale.so $(B)/tests/move/move_client $(ES_SWAPSUM_FATBIN) \
		  $(ES_SWAPSUM_TWIN) $(B)/bin/easyscale-ctl $(B)/tests/sim_driver_client_test \
		  $(B)/tests/sim_cublas_client_test $(B)/tests/sim_cudnn_client_test \
		  $(EX_FATBIN) $(EX_TWINS)
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) -o $@ $(filter %.o,$^) -L$(B)/sim -l:libcuda.so.1 $(CMOCKA_LIBS)

TESTS += $(B)/tests/move_est_test $(B)/tests/move_est2_test

# What the shim hands out to the CUDA runtime, and the occupancy calculator
# (tests/move/runtime_test.c): the stand-in runtime is one object built under
# three names (the shim tells the runtime and the vendor libraries apart by
# their file names).
MVT_RT_DIR := $(B)/tests/move/rt
$(MVT_RT_DIR)/libcudart.so.99: tests/move/rt_probe.c | $(SIMCUDA_LIB)
	@mkdir -p $(dir $@)
	$(CC) $(CPPFLAGS) $(CFLAGS) $(SO_LDFLAGS) -Wl,-soname,libcudart.so.99 -o $@ $< \
	    -L$(B)/sim -l:libcuda.so.1

$(MVT_RT_DIR)/librtprobe.so: tests/move/rt_probe.c | $(SIMCUDA_LIB)
	@mkdir -p $(dir $@)
	$(CC) $(CPPFLAGS) $(CFLAGS) $(SO_LDFLAGS) -Wl,-soname,librtprobe.so -o $@ $< \
	    -L$(B)/sim -l:libcuda.so.1

$(MVT_RT_DIR)/libcudnn_probe.so.99: tests/move/rt_probe.c | $(SIMCUDA_LIB)
	@mkdir -p $(dir $@)
	$(CC) $(CPPFLAGS) $(CFLAGS) $(SO_LDFLAGS) -Wl,-soname,libcudnn_probe.so.99 -o $@ $< \
	    -L$(B)/sim -l:libcuda.so.1

$(B)/tests/move/rt_client: $(B)/obj/tests/move/rt_client.o $(B)/sim/libcuda.so.1 \
		$(B)/sim/libcublas.so.13 $(B)/sim/libcudnn.so.9
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) -o $@ $< -L$(B)/sim -l:libcuda.so.1 -l:libcublas.so.13 \
		-l:libcudnn.so.9 -ldl -lm

$(B)/tests/move_runtime_test: $(B)/obj/tests/move/runtime_test.o $(TEST_HARNESS_OBJ) \
		| $(B)/lib/libeasyscale.so $(B)/tests/move/move_client $(ES_SWAPSUM_FATBIN) \
		  $(ES_SWAPSUM_TWIN) $(MVT_RT_DIR)/libcudart.so.99 $(MVT_RT_DIR)/librtprobe.so \
		  $(MVT_RT_DIR)/libcudnn_probe.so.99 $(B)/tests/move/rt_client \
		  $(B)/sim/twins/libsimtwin_cublas.so
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) -o $@ $(filter %.o,$^) $(CMOCKA_LIBS)

TESTS += $(B)/tests/move_runtime_test

# Four ESTs of the trainer moved by the controller, and time-sliced on one
# GPU (tests/move/ests_test.c).
$(B)/tests/move_ests_test: $(B)/obj/tests/move/ests_test.o $(TEST_HARNESS_OBJ) \
		| $(B)/lib/libeasyscale.so $(B)/bin/easyscale-ctl $(ES_SWAPSUM_TWIN) \
		  $(EX_FATBIN) $(EX_TWINS)
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) -o $@ $(filter %.o,$^) $(CMOCKA_LIBS)

TESTS += $(B)/tests/move_ests_test

# A running job time-sliced by the controller (tests/move/tsdyn_test.c).
$(B)/tests/move_tsdyn_test: $(B)/obj/tests/move/tsdyn_test.o $(TEST_HARNESS_OBJ) \
		| $(B)/lib/libeasyscale.so $(B)/bin/easyscale-ctl $(ES_SWAPSUM_TWIN) \
		  $(EX_FATBIN) $(EX_TWINS)
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) -o $@ $(filter %.o,$^) $(CMOCKA_LIBS)

TESTS += $(B)/tests/move_tsdyn_test

# cuBLAS, cuBLASLt and cuDNN handles across moves (tests/move/vendor_test.c,
# intercept/virtual/libh.h): a client written against NVIDIA's headers only.
$(B)/obj/tests/move/lib_client.o: CFLAGS += -ffp-contract=off
$(B)/tests/move/lib_client: $(B)/obj/tests/move/lib_client.o $(B)/sim/libcuda.so.1 \
		$(B)/sim/libcublas.so.13 $(B)/sim/libcublasLt.so.13 $(B)/sim/libcudnn.so.9
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) -o $@ $< -L$(B)/sim -l:libcuda.so.1 -l:libcublas.so.13 \
		-l:libcublasLt.so.13 -l:libcudnn.so.9 -ldl

$(B)/tests/move_vendor_test: $(B)/obj/tests/move/vendor_test.o $(TEST_HARNESS_OBJ) \
		| $(B)/lib/libeasyscale.so $(B)/tests/move/lib_client $(ES_SWAPSUM_FATBIN) \
		  $(ES_SWAPSUM_TWIN) $(B)/sim/twins/libsimtwin_easyscale.so \
		  $(B)/sim/twins/libsimtwin_cublas.so $(B)/sim/twins/libsimtwin_cublaslt.so \
		  $(B)/sim/twins/libsimtwin_cudnn.so
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) -o $@ $(filter %.o,$^) $(CMOCKA_LIBS)

TESTS += $(B)/tests/move_vendor_test

# ---- bench -------------------------------------------------------------------
$(B)/bench/swap_bench: $(B)/obj/tests/move/bench_swap.o $(MOVE_OBJS) \
		| $(SIMCUDA_LIB) $(ES_SWAPSUM_TWIN)
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) -o $@ $(filter %.o,$^) $(MVT_LIBS)

BENCHES += $(B)/bench/swap_bench
