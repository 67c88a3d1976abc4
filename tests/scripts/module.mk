# tests/scripts/: tests of the scripts: check_deps_test runs
# scripts/check-deps (the folders' one-way dependencies) on the real tree and
# build, on a copy of the sources with a forbidden #include planted, and on
# fake builds it compiles itself.

$(B)/tests/scripts_check_deps_test: $(B)/obj/tests/scripts/check_deps_test.o $(TEST_HARNESS_OBJ) \
		| $(B)/lib/libeasyscale.so
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) -o $@ $(filter %.o,$^) $(CMOCKA_LIBS)

TESTS += $(B)/tests/scripts_check_deps_test
