# examples/: the data-parallel trainer's device code (kernels.cu -> fatbin
# with sm_75, sm_80, sm_90 and compute_90 PTX: code for every model simcuda
# has, loaded by examples/train.py), the C
# twins that run those kernels on simcuda, and the trainer's integration
# tests (tests/train/).

EX_FATBIN := $(B)/examples/kernels.fatbin
EX_TWINS := $(B)/sim/twins/libsimtwin_examples.so
EX_GENCODE := -gencode arch=compute_75,code=sm_75 -gencode arch=compute_80,code=sm_80 \
    -gencode arch=compute_90,code=[sm_90,compute_90]

ALL += $(EX_FATBIN) $(EX_TWINS)
TESTS += $(B)/tests/train_twins_test $(B)/tests/train_test

$(EX_FATBIN): examples/kernels.cu examples/twins/es_kmath.h examples/module.mk
	@mkdir -p $(dir $@)
	$(NVCC) -Wno-deprecated-gpu-targets -fatbin $(EX_GENCODE) -o $@ $<

# Twins follow the kernels' float operations one by one: no contraction.
$(B)/obj/examples/twins/twins.o: CFLAGS += -ffp-contract=off

$(EX_TWINS): $(B)/obj/examples/twins/twins.o
	@mkdir -p $(dir $@)
	$(CC) $(SO_LDFLAGS) -o $@ $^ -lm

# Unit test of the twins (reduction sizing, atomics order, dropout stream).
$(B)/obj/tests/train/twins_test.o: CFLAGS += -ffp-contract=off
$(B)/tests/train_twins_test: $(B)/obj/tests/train/twins_test.o $(B)/obj/examples/twins/twins.o
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) -o $@ $^ -lm $(CMOCKA_LIBS)

# Integration tests: whole training runs through scripts/launch.
$(B)/tests/train_test: $(B)/obj/tests/train/train_test.o $(TEST_HARNESS_OBJ) | $(EX_FATBIN) $(EX_TWINS)
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) -o $@ $(filter %.o,$^) -lm $(CMOCKA_LIBS)
