# tests/harness/: the checksum harness (easyscale-ctl verify), the
# first-divergence finder (easyscale-ctl diff, the collective digests).
# Variables local to this file are prefixed HAR_.

# verify_test: unit tests of controller/verify.c and controller/digest.c,
# and whole processes (easyscale-ctl verify on a stand-in and on the trainer).
$(B)/tests/verify_test: $(B)/obj/tests/harness/verify_test.o $(CTL_LIB_OBJS) $(TEST_HARNESS_OBJ) \
		| $(B)/bin/easyscale-ctl $(B)/lib/libeasyscale.so $(EX_FATBIN) $(EX_TWINS)
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) -o $@ $(filter %.o,$^) $(CMOCKA_LIBS) -ldl -lm

TESTS += $(B)/tests/verify_test

# digest_kernel_test: the digest hash kernel (kernels/digest.cu) through
# simcuda's driver, against the formula computed on the host.
$(B)/tests/digest_kernel_test: $(B)/obj/tests/harness/digest_kernel_test.o $(TEST_HARNESS_OBJ) \
		| $(SIMCUDA_LIB) $(B)/sim/libcuda.so $(ES_DIGEST_FATBIN) $(ES_DIGEST_TWIN)
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) -o $@ $(filter %.o,$^) $(CMOCKA_LIBS) -L$(B)/sim -lcuda

TESTS += $(B)/tests/digest_kernel_test
