# examples/: the data-parallel trainer's device code, single source
# (kernels.cu -> the fatbin loaded by examples/train.py, and the same
# kernels for simcuda through the CUDA-on-CPU layer, sim/cucpu/module.mk),
# and the trainer's tests (tests/train/).

EX_FATBIN := $(B)/examples/kernels.fatbin
EX_TWINS := $(B)/sim/twins/libsimtwin_examples.so

$(eval $(call cucpu_cu,examples/kernels.cu,$(EX_FATBIN),$(EX_TWINS),examples/es_kmath.h))

ALL += $(EX_FATBIN) $(EX_TWINS)
TESTS += $(B)/tests/train_twins_test $(B)/tests/train_test $(B)/tests/train_place1_test \
	$(B)/tests/train_place2_test

# Unit test of the kernels on the CPU (reduction sizing, atomics order,
# dropout stream), against plain-C references built with the same rule.
$(B)/obj/tests/train/twins_test.o: CFLAGS += -ffp-contract=off
$(B)/tests/train_twins_test: $(B)/obj/tests/train/twins_test.o $(B)/obj/examples/kernels.cu.o \
		$(CUCPU_LIB)
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) -o $@ $(filter %.o,$^) -L$(B)/sim -lcucpu -lm $(CMOCKA_LIBS)

# Integration tests: whole training runs through scripts/launch; the
# placement tests are the same source built as a program of their own.
$(B)/tests/train_test: $(B)/obj/tests/train/train_test.o $(TEST_HARNESS_OBJ) | $(EX_FATBIN) $(EX_TWINS)
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) -o $@ $(filter %.o,$^) -lm $(CMOCKA_LIBS)

$(B)/obj/tests/train/train_place%_test.o: tests/train/train_test.c
	@mkdir -p $(dir $@)
	$(CC) $(CPPFLAGS) $(CFLAGS) -DES_TRAIN_PLACEMENT=$* -MMD -MP -c -o $@ $<

$(B)/tests/train_place%_test: $(B)/obj/tests/train/train_place%_test.o $(TEST_HARNESS_OBJ) \
		| $(EX_FATBIN) $(EX_TWINS)
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) -o $@ $(filter %.o,$^) -lm $(CMOCKA_LIBS)
