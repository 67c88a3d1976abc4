# tests/examples/: the tests of the trainer (examples/): its kernels on the
# CPU (examples_twins_test) and whole training runs through scripts/launch
# (examples_train_test; the placement tests examples_train_place1_test and
# examples_train_place2_test are the same source, train_test.c, built as
# programs of their own).

TESTS += $(B)/tests/examples_twins_test $(B)/tests/examples_train_test \
	$(B)/tests/examples_train_place1_test $(B)/tests/examples_train_place2_test

# Unit test of the kernels on the CPU (reduction sizing, atomics order,
# dropout stream), against plain-C references built with the same rule.
$(B)/obj/tests/examples/twins_test.o: CFLAGS += -ffp-contract=off
$(B)/tests/examples_twins_test: $(B)/obj/tests/examples/twins_test.o $(B)/obj/examples/kernels.cu.o \
		$(CUCPU_LIB)
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) -o $@ $(filter %.o,$^) -L$(B)/sim -lcucpu -lm $(CMOCKA_LIBS)

# Integration tests: whole training runs through scripts/launch; the
# placement tests are the same source built as a program of their own.
$(B)/tests/examples_train_test: $(B)/obj/tests/examples/train_test.o $(TEST_HARNESS_OBJ) \
		| $(EX_FATBIN) $(EX_TWINS)
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) -o $@ $(filter %.o,$^) -lm $(CMOCKA_LIBS)

$(B)/obj/tests/examples/train_place%_test.o: tests/examples/train_test.c
	@mkdir -p $(dir $@)
	$(CC) $(CPPFLAGS) $(CFLAGS) -DES_TRAIN_PLACEMENT=$* -MMD -MP -c -o $@ $<

$(B)/tests/examples_train_place%_test: $(B)/obj/tests/examples/train_place%_test.o $(TEST_HARNESS_OBJ) \
		| $(EX_FATBIN) $(EX_TWINS)
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) -o $@ $(filter %.o,$^) -lm $(CMOCKA_LIBS)
