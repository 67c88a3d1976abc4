# tests/scripts/: tests of the scripts: check_deps_test runs
# scripts/check-deps (the folders' one-way dependencies) on the real tree and
# build, on a copy of the sources with a forbidden #include planted, and on
# fake builds it compiles itself. simhosts_test runs scripts/simhosts.

$(B)/tests/scripts_check_deps_test: $(B)/obj/tests/scripts/check_deps_test.o $(TEST_HARNESS_OBJ) \
		| $(B)/lib/libeasyscale.so
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) -o $@ $(filter %.o,$^) $(CMOCKA_LIBS)

TESTS += $(B)/tests/scripts_check_deps_test

# simhosts_test runs scripts/simhosts (simulated hosts as namespaces; needs
# root, as CI runs) through the cases of simhosts_case.sh.
$(B)/tests/scripts_simhosts_test: $(B)/obj/tests/scripts/simhosts_test.o $(TEST_HARNESS_OBJ) \
		| $(B)/bin/es-devices
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) -o $@ $(filter %.o,$^) $(CMOCKA_LIBS)

TESTS += $(B)/tests/scripts_simhosts_test
