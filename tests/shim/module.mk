# tests/shim/: the tests of libeasyscale.so as a whole: preloaded into
# processes on simcuda (shim_preload_test: configuration parsing, the export
# list, the lookup paths, every wrapped function, processes without CUDA,
# bad settings, missing libraries, threads, fork, each determinism claim
# with its negative control; clients es_client.c, es_allpaths.c,
# es_nocuda.c, es_empty.c), the reduced determinism matrix of whole jobs
# (shim_determinism_test, through easyscale-ctl verify), and the
# pass-through and portable-kernel benches.

# Client programs run by shim_preload_test under the shim (whole processes).
# The client computes the portable kernels' order on the host: no contraction.
$(B)/obj/tests/shim/es_client.o: CFLAGS += -ffp-contract=off
$(B)/tests/shim/es_client: $(B)/obj/tests/shim/es_client.o $(KERNELS_D2INT8_OBJ) $(ES_SIMLIBS)
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) -o $@ $(filter %.o,$^) -L$(B)/sim -l:libcuda.so.1 -l:libcublas.so.13 -l:libcudnn.so.9 \
		-ldl -lm
# Every entry of shim/funcs.h through every path (linked with the
# simcuda libraries: without the shim direct references are theirs).
$(B)/tests/shim/es_allpaths: $(B)/obj/tests/shim/es_allpaths.o $(ES_SIMLIBS) $(B)/sim/libnccl.so.2 \
		$(B)/sim/libcublasLt.so.13
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) -o $@ $< -Wl,--no-as-needed -L$(B)/sim -l:libcuda.so.1 -l:libcublas.so.13 \
		-l:libcudnn.so.9 -l:libnccl.so.2 -l:libcublasLt.so.13 -Wl,--as-needed -ldl
$(B)/tests/shim/es_nocuda: $(B)/obj/tests/shim/es_nocuda.o
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) -o $@ $< -ldl

# Libraries with the wrapped sonames and none of their functions (the
# "missing real function" test); libcuda.so.1 is deliberately absent.
ES_FAKELIBS := $(addprefix $(B)/tests/shim/fakelib/,libcublas.so.13 libcudnn.so.9 libnccl.so.2)
$(ES_FAKELIBS): tests/shim/es_empty.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $(SO_LDFLAGS) -Wl,-soname,$(notdir $@) -o $@ $<

$(B)/tests/shim_preload_test: $(B)/obj/tests/shim/preload_test.o $(B)/obj/shim/config.o \
		$(B)/obj/wire/proto.o \
		$(B)/obj/device/device.o $(TEST_HARNESS_OBJ) \
		| $(B)/lib/libeasyscale.so $(B)/sim/twins/libsimtwin_easyscale.so \
		  $(B)/tests/shim/es_client $(B)/tests/shim/es_nocuda $(ES_FAKELIBS) \
		  $(B)/tests/shim/es_allpaths
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) -o $@ $(filter %.o,$^) $(CMOCKA_LIBS) -ldl

TESTS += $(B)/tests/shim_preload_test
# the export check counts the generated vendor wrappers (intercept/module.mk)
$(B)/obj/tests/shim/preload_test.o: $(B)/gen/vendor_handle_fns.h
$(B)/obj/tests/shim/preload_test.o: CPPFLAGS += -I$(B)/gen

# The reduced determinism matrix (CI's, in make test): scripts/determinism-matrix
# --reduced through easyscale-ctl verify with the trainer.
$(B)/tests/shim_determinism_test: $(B)/obj/tests/shim/determinism_test.o $(TEST_HARNESS_OBJ) \
		| $(B)/bin/easyscale-ctl $(B)/lib/libeasyscale.so $(EX_FATBIN) $(EX_TWINS)
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) -o $@ $(filter %.o,$^) $(CMOCKA_LIBS)

TESTS += $(B)/tests/shim_determinism_test

# ---- bench -----------------------------------------------------------------
$(B)/bench/passthrough_bench: $(B)/obj/tests/shim/bench_passthrough.o $(ES_SIMLIBS) \
		| $(B)/lib/libeasyscale.so
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) -o $@ $< -ldl

BENCHES += $(B)/bench/passthrough_bench

# d2's portable kernels (tiled and per-element) against cuBLAS / cuDNN; also
# what scripts/gpu-check step g runs on a real GPU (--large).
$(B)/bench/portable_bench: $(B)/obj/tests/shim/portable_bench.o $(ES_SIMLIBS) \
		| $(ES_PORTABLE_FATBIN) $(ES_PORTABLE_TWIN)
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) -o $@ $< -L$(B)/sim -l:libcuda.so.1 -l:libcublas.so.13 -l:libcudnn.so.9

BENCHES += $(B)/bench/portable_bench
