# intercept/: one file per intercepted library (the generated pass-through
# wrappers of shim/funcs.h in gen.c, hand-written decisions in cuda.c,
# cublas.c, cublaslt.c, cudnn.c, cudnn_backend.c, nccl.c), the entry path
# (enter.c), and virtual/: the virtual handles and memory that let an EST
# move under the application (the translating real table of thunks.c,
# cuda_handles.c, cuda_mem.c, the vendor handles of libh*.c, the cuDNN
# descriptor journal of cudnn_journal.c, refuse.c).
# The shim compiles $(INTERCEPT_SRCS).

INTERCEPT_SRCS := intercept/enter.c intercept/gen.c intercept/cuda.c intercept/cublas.c \
    intercept/cudnn.c intercept/cudnn_backend.c intercept/cudnn_heur.c intercept/cublaslt.c \
    intercept/nccl.c
INTERCEPT_SRCS += intercept/virtual/thunks.c intercept/virtual/cuda_handles.c \
    intercept/virtual/cuda_mem.c intercept/virtual/refuse.c intercept/virtual/libh.c \
    intercept/virtual/libh_gen.c intercept/virtual/cudnn_journal.c

# The argument annotations of funcs.h (vargs.h, docs/MOVING.md) and their test.
$(B)/tests/intercept_vargs_test: $(B)/obj/tests/intercept/vargs_test.o
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) -o $@ $^ $(CMOCKA_LIBS)

TESTS += $(B)/tests/intercept_vargs_test

# Moving an EST under the shim: a cuda.h-only client and the whole-process
# test that moves it (tests/move/).
$(B)/obj/tests/move/move_client.o: $(ES_HANDLE_FNS_H)
$(B)/obj/tests/move/move_client.o: CPPFLAGS += -I$(B)/gen
$(B)/tests/move/move_client: $(B)/obj/tests/move/move_client.o | $(SIMCUDA_LIB)
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) -o $@ $< -L$(B)/sim -l:libcuda.so.1 -ldl

$(B)/tests/move_test: $(B)/obj/tests/move/move_test.o $(TEST_HARNESS_OBJ) \
		| $(B)/lib/libeasyscale.so $(B)/tests/move/move_client $(ES_SWAPSUM_FATBIN) \
		  $(ES_SWAPSUM_TWIN) $(B)/bin/easyscale-ctl $(B)/tests/cuda_client_test \
		  $(B)/tests/cublas_client_test $(B)/tests/cudnn_client_test
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) -o $@ $(filter %.o,$^) -L$(B)/sim -l:libcuda.so.1 $(CMOCKA_LIBS)

TESTS += $(B)/tests/move_test

# Four ESTs of the trainer moved by the controller, and time-sliced on one
# GPU (tests/move/ests_test.c).
$(B)/tests/ests_test: $(B)/obj/tests/move/ests_test.o $(TEST_HARNESS_OBJ) \
		| $(B)/lib/libeasyscale.so $(B)/bin/easyscale-ctl $(ES_SWAPSUM_TWIN) \
		  $(EX_FATBIN) $(EX_TWINS)
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) -o $@ $(filter %.o,$^) $(CMOCKA_LIBS)

TESTS += $(B)/tests/ests_test

# A running job time-sliced by the controller (tests/move/tsdyn_test.c).
$(B)/tests/tsdyn_test: $(B)/obj/tests/move/tsdyn_test.o $(TEST_HARNESS_OBJ) \
		| $(B)/lib/libeasyscale.so $(B)/bin/easyscale-ctl $(ES_SWAPSUM_TWIN) \
		  $(EX_FATBIN) $(EX_TWINS)
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) -o $@ $(filter %.o,$^) $(CMOCKA_LIBS)

TESTS += $(B)/tests/tsdyn_test

# The driver functions of cuda.h that take a virtual handle (generated from
# cuda.h; intercept/virtual/refuse.c refuses those funcs.h does not wrap).
ES_HANDLE_FNS_H := $(B)/gen/cuda_handle_fns.h
$(ES_HANDLE_FNS_H): scripts/cuda-handle-fns $(CUDA_HOME)/include/cuda.h
	@mkdir -p $(dir $@)
	CC=$(CC) scripts/cuda-handle-fns $(CUDA_HOME) > $@.tmp && mv $@.tmp $@
$(B)/obj/intercept/virtual/refuse.o: $(ES_HANDLE_FNS_H)
# The vendor functions that take a library handle and funcs.h does not wrap
# (generated from NVIDIA's headers; intercept/virtual/libh_gen.c wraps them).
ES_VENDOR_FNS_H := $(B)/gen/vendor_handle_fns.h
$(ES_VENDOR_FNS_H): scripts/vendor-handle-fns shim/funcs.h $(CUDA_HOME)/include/cublas_api.h \
		$(CUDA_HOME)/include/cublasLt.h $(CUDA_HOME)/include/cudnn.h
	@mkdir -p $(dir $@)
	CC=$(CC) scripts/vendor-handle-fns $(CUDA_HOME) shim/funcs.h > $@.tmp && mv $@.tmp $@
$(B)/obj/intercept/virtual/libh_gen.o: $(ES_VENDOR_FNS_H)
$(B)/obj/intercept/virtual/libh_gen.o: CPPFLAGS += -I$(B)/gen
$(B)/obj/intercept/virtual/refuse.o: CPPFLAGS += -I$(B)/gen

# cuBLAS, cuBLASLt and cuDNN handles across moves (tests/move/lib_test.c,
# intercept/virtual/libh.h): a client written against NVIDIA's headers only.
$(B)/obj/tests/move/lib_client.o: CFLAGS += -ffp-contract=off
$(B)/tests/move/lib_client: $(B)/obj/tests/move/lib_client.o $(B)/sim/libcuda.so.1 \
		$(B)/sim/libcublas.so.13 $(B)/sim/libcublasLt.so.13 $(B)/sim/libcudnn.so.9
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) -o $@ $< -L$(B)/sim -l:libcuda.so.1 -l:libcublas.so.13 \
		-l:libcublasLt.so.13 -l:libcudnn.so.9 -ldl

$(B)/tests/lib_test: $(B)/obj/tests/move/lib_test.o $(TEST_HARNESS_OBJ) \
		| $(B)/lib/libeasyscale.so $(B)/tests/move/lib_client $(ES_SWAPSUM_FATBIN) \
		  $(ES_SWAPSUM_TWIN) $(B)/sim/twins/libsimtwin_easyscale.so \
		  $(B)/sim/twins/libsimtwin_cublas.so $(B)/sim/twins/libsimtwin_cublaslt.so \
		  $(B)/sim/twins/libsimtwin_cudnn.so
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) -o $@ $(filter %.o,$^) $(CMOCKA_LIBS)

TESTS += $(B)/tests/lib_test
