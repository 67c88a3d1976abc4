# intercept/: one file per intercepted library (the generated pass-through
# wrappers of intercept/funcs.h in gen.c, hand-written decisions in cuda.c,
# cublas.c, cudnn.c). The shim compiles $(INTERCEPT_SRCS).

INTERCEPT_SRCS := intercept/gen.c intercept/cuda.c intercept/cublas.c intercept/cudnn.c \
    intercept/thunks.c intercept/cuda_handles.c intercept/cuda_mem.c intercept/est_move.c

# The argument annotations of funcs.h (vargs.h, docs/MOVING.md) and their test.
$(B)/tests/intercept_vargs_test: $(B)/obj/tests/intercept/vargs_test.o
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) -o $@ $^ $(CMOCKA_LIBS)

TESTS += $(B)/tests/intercept_vargs_test
