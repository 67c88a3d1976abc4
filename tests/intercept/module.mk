# tests/intercept/: the tests of intercept/'s decisions: the argument
# annotations of shim/funcs.h (intercept_vargs_test), and whole processes
# under the shim with clients that call the libraries the way frameworks do:
# the cuDNN backend API as cudnn-frontend and PyTorch drive it
# (intercept_dnn_test, fe_client.c), cuBLASLt as PyTorch drives it
# (intercept_lt_test, lt_client.c), 16-bit GEMMs and convolutions through the
# legacy APIs (intercept_half_test, half_client.c), and library calls during
# a CUDA graph capture (intercept_capture_test, cap_client.c).

# The argument annotations of funcs.h (vargs.h, docs/MOVING.md) and their test.
$(B)/tests/intercept_vargs_test: $(B)/obj/tests/intercept/vargs_test.o
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) -o $@ $^ $(CMOCKA_LIBS)

TESTS += $(B)/tests/intercept_vargs_test

# The time-slicing check before a call (intercept/tsdefer.c) against a fake
# engine.
$(B)/tests/intercept_tsdefer_test: $(B)/obj/tests/intercept/tsdefer_test.o \
		$(B)/obj/intercept/tsdefer.o
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) -o $@ $^ $(CMOCKA_LIBS)

TESTS += $(B)/tests/intercept_tsdefer_test

# ---- clients -----------------------------------------------------------------
# cudnn-frontend's call sequences (tests/intercept/dnn_test.c).
$(B)/obj/tests/intercept/fe_client.o: CFLAGS += -ffp-contract=off
$(B)/tests/intercept/fe_client: $(B)/obj/tests/intercept/fe_client.o $(KERNELS_D2INT8_OBJ) \
		$(ES_SIMLIBS)
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) -o $@ $(filter %.o,$^) -L$(B)/sim -l:libcuda.so.1 -l:libcudnn.so.9 -lm
# cuBLASLt the way PyTorch calls it (tests/intercept/lt_test.c).
$(B)/obj/tests/intercept/lt_client.o: CFLAGS += -ffp-contract=off
$(B)/tests/intercept/lt_client: $(B)/obj/tests/intercept/lt_client.o $(KERNELS_D2INT8_OBJ) \
		$(B)/sim/libcublasLt.so.13 $(B)/sim/libcuda.so.1
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) -o $@ $(filter %.o,$^) -L$(B)/sim -l:libcuda.so.1 -l:libcublasLt.so.13 -lm
# Library calls during a CUDA graph capture (tests/intercept/capture_test.c).
$(B)/tests/intercept/cap_client: $(B)/obj/tests/intercept/cap_client.o $(ES_SIMLIBS)
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) -o $@ $< -L$(B)/sim -l:libcuda.so.1 -l:libcublas.so.13 -l:libcudnn.so.9
# Half precision through the legacy APIs (tests/intercept/half_test.c).
$(B)/obj/tests/intercept/half_client.o: CFLAGS += -ffp-contract=off
$(B)/tests/intercept/half_client: $(B)/obj/tests/intercept/half_client.o $(KERNELS_D2INT8_OBJ) \
		$(ES_SIMLIBS)
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) -o $@ $(filter %.o,$^) -L$(B)/sim -l:libcuda.so.1 -l:libcublas.so.13 -l:libcudnn.so.9 -lm

# ---- tests -------------------------------------------------------------------
# The cuDNN backend API the way cudnn-frontend and PyTorch drive it.
$(B)/tests/intercept_dnn_test: $(B)/obj/tests/intercept/dnn_test.o $(TEST_HARNESS_OBJ) \
		| $(B)/lib/libeasyscale.so $(B)/sim/twins/libsimtwin_easyscale.so \
		  $(B)/tests/intercept/fe_client
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) -o $@ $(filter %.o,$^) $(CMOCKA_LIBS)

TESTS += $(B)/tests/intercept_dnn_test

# fp16 / bf16 GEMMs and convolutions through the legacy APIs.
$(B)/tests/intercept_half_test: $(B)/obj/tests/intercept/half_test.o $(TEST_HARNESS_OBJ) \
		| $(B)/lib/libeasyscale.so $(B)/sim/twins/libsimtwin_easyscale.so \
		  $(B)/tests/intercept/half_client
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) -o $@ $(filter %.o,$^) $(CMOCKA_LIBS)

TESTS += $(B)/tests/intercept_half_test

# cuBLASLt the way PyTorch drives it.
$(B)/tests/intercept_lt_test: $(B)/obj/tests/intercept/lt_test.o $(TEST_HARNESS_OBJ) \
		| $(B)/lib/libeasyscale.so $(B)/sim/twins/libsimtwin_easyscale.so \
		  $(B)/sim/twins/libsimtwin_cublaslt.so $(B)/tests/intercept/lt_client
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) -o $@ $(filter %.o,$^) $(CMOCKA_LIBS)

TESTS += $(B)/tests/intercept_lt_test

# Library calls during a CUDA graph capture.
$(B)/tests/intercept_capture_test: $(B)/obj/tests/intercept/capture_test.o $(TEST_HARNESS_OBJ) \
		| $(B)/lib/libeasyscale.so $(B)/sim/twins/libsimtwin_easyscale.so \
		  $(B)/tests/intercept/cap_client
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) -o $@ $(filter %.o,$^) $(CMOCKA_LIBS)

TESTS += $(B)/tests/intercept_capture_test
