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

# digest_test: the shim's collective digests with the trainer (whole jobs
# under easyscale-ctl run) and the first-divergence finder on them.
$(B)/tests/digest_test: $(B)/obj/tests/harness/digest_test.o $(B)/obj/controller/digest.o \
		$(B)/obj/controller/util.o $(TEST_HARNESS_OBJ) \
		| $(B)/bin/easyscale-ctl $(B)/lib/libeasyscale.so $(EX_FATBIN) $(EX_TWINS)
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) -o $@ $(filter %.o,$^) $(CMOCKA_LIBS) -lm

TESTS += $(B)/tests/digest_test

# determinism_test: the reduced determinism matrix (CI's, in make test).
$(B)/tests/determinism_test: $(B)/obj/tests/harness/determinism_test.o $(TEST_HARNESS_OBJ) \
		| $(B)/bin/easyscale-ctl $(B)/lib/libeasyscale.so $(EX_FATBIN) $(EX_TWINS)
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) -o $@ $(filter %.o,$^) $(CMOCKA_LIBS)

TESTS += $(B)/tests/determinism_test
