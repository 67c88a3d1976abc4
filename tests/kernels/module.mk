# tests/kernels/: the tests of kernels/: the architecture check of
# device-code images (kernels_archcheck_test, kernels/archcheck.c), d2's
# tiled portable kernels against the reference element functions and the
# int8 ones against the 128-bit reference (kernels_tile_test, with
# tile_client.c under the shim), the int8 definition's element functions
# and reference (kernels_d2int8_test), and the collective
# digests' hash kernel through simcuda's driver (kernels_digest_test,
# kernels/digest.cu).

# The architecture check of device-code images (d2's start-up check).
$(B)/tests/kernels_archcheck_test: $(B)/obj/tests/kernels/archcheck_test.o $(B)/obj/kernels/archcheck.o \
		$(FATBIN_OBJ) $(TEST_HARNESS_OBJ) | $(ES_PORTABLE_FATBIN) $(FB_DATA)
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) -o $@ $(filter %.o,$^) $(FATBIN_LIBS) $(CMOCKA_LIBS)

TESTS += $(B)/tests/kernels_archcheck_test

# The tiled portable kernels on many shapes (tests/kernels/tile_test.c).
$(B)/obj/tests/kernels/tile_client.o: CFLAGS += -ffp-contract=off
$(B)/tests/kernels/tile_client: $(B)/obj/tests/kernels/tile_client.o $(KERNELS_D2INT8_OBJ) \
		$(ES_SIMLIBS)
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) -o $@ $(filter %.o,$^) -L$(B)/sim -l:libcuda.so.1 -l:libcublas.so.13 -l:libcudnn.so.9 -lm

$(B)/tests/kernels_tile_test: $(B)/obj/tests/kernels/tile_test.o $(TEST_HARNESS_OBJ) \
		| $(B)/lib/libeasyscale.so $(B)/sim/twins/libsimtwin_easyscale.so \
		  $(B)/tests/kernels/tile_client
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) -o $@ $(filter %.o,$^) $(CMOCKA_LIBS)

TESTS += $(B)/tests/kernels_tile_test

# The digest hash kernel (kernels/digest.cu) through simcuda's driver,
# against the formula computed on the host.
$(B)/tests/kernels_digest_test: $(B)/obj/tests/kernels/digest_test.o $(TEST_HARNESS_OBJ) \
		| $(SIMCUDA_LIB) $(B)/sim/libcuda.so $(ES_DIGEST_FATBIN) $(ES_DIGEST_TWIN)
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) -o $@ $(filter %.o,$^) $(CMOCKA_LIBS) -L$(B)/sim -lcuda

TESTS += $(B)/tests/kernels_digest_test

# d2's int8 GEMM's definition: the element functions and the C reference
# against independent host computations (tests/kernels/d2int8_test.c).
$(B)/obj/tests/kernels/d2int8_test.o: CFLAGS += -ffp-contract=off
$(B)/tests/kernels_d2int8_test: $(B)/obj/tests/kernels/d2int8_test.o $(KERNELS_D2INT8_OBJ)
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) -o $@ $(filter %.o,$^) $(CMOCKA_LIBS) -lm

TESTS += $(B)/tests/kernels_d2int8_test

# d2's int8 GEMM: its accuracy against the exact dot product and fp32 fma
# accumulation (host), its MMAs and bytes per output, its speed against the
# fma kernels and cuBLAS, its bits against the CPU reference
# (tests/kernels/d2int8_bench.c; scripts/gpu-check runs it with --large).
$(B)/obj/tests/kernels/d2int8_bench.o: CFLAGS += -ffp-contract=off
$(B)/bench/d2int8_bench: $(B)/obj/tests/kernels/d2int8_bench.o $(KERNELS_D2INT8_OBJ) \
		$(ES_SIMLIBS) | $(ES_PORTABLE_FATBIN) $(ES_PORTABLE_TWIN)
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) -o $@ $(filter %.o,$^) -L$(B)/sim -l:libcuda.so.1 -l:libcublas.so.13 -lm

BENCHES += $(B)/bench/d2int8_bench
