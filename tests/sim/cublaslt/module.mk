# tests/sim/cublaslt/: the unit/API test of simcuda's cuBLASLt (sim/cublaslt/).

# The summation order is the one written: no contraction into FMA.
$(B)/obj/tests/sim/cublaslt/api_test.o: CFLAGS += -ffp-contract=off

$(B)/tests/sim_cublaslt_api_test: $(B)/obj/tests/sim/cublaslt/api_test.o \
		$(TEST_HARNESS_OBJ) $(SIM_TEST_ABI_OBJ) | $(B)/sim/libcublasLt.so $(B)/sim/libcuda.so \
		$(LT_TWIN)
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) -o $@ $(filter %.o,$^) -L$(B)/sim -lcublasLt -lcuda $(CMOCKA_LIBS) -lrt -lm

TESTS += $(B)/tests/sim_cublaslt_api_test
