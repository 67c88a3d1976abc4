# move/: what moves an EST's device state from GPU to GPU (docs/MOVING.md):
# the driver table it calls (drv.c: its only way to the driver), the memory
# registry (memreg.c), the swap engine (swap.c, with the checksum kernel of
# kernels/swapsum.cu), the virtual handles' registry (vhandle.c), the door
# of safe points (door.c), the move orchestrator (mover.c), time-slicing of
# a slot (tslice.c), memory pools (mempool.c); and the seam the control
# thread calls (est.c: shim/move.h, EASYSCALE_MOVE, the move signal).
# The machinery is built and tested on simcuda's driver directly
# (tests/context/); the shim links it with est.c ($(MOVE_SHIM_SRCS)).
MOVE_SRCS := move/drv.c move/memreg.c move/swap.c move/vhandle.c move/door.c move/mover.c \
    move/tslice.c move/mempool.c
MOVE_OBJS := $(patsubst %.c,$(B)/obj/%.o,$(MOVE_SRCS) $(LIB_SRCS)) $(KERNELS_SWAPSUM_OBJ) \
    $(FATBIN_OBJ)
MOVE_SHIM_SRCS := $(MOVE_SRCS) move/est.c
CT_COMMON_OBJ := $(B)/obj/tests/context/ctxtest.o
CT_LIBS := -L$(B)/sim -l:libcuda.so.1 $(CMOCKA_LIBS) $(FATBIN_LIBS) -ldl -lrt

$(B)/tests/context_memreg_test: $(B)/obj/tests/context/memreg_test.o $(CT_COMMON_OBJ) \
		$(MOVE_OBJS) | $(SIMCUDA_LIB)
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) -o $@ $(filter %.o,$^) $(CT_LIBS)

$(B)/tests/context_swap_test: $(B)/obj/tests/context/swap_test.o $(CT_COMMON_OBJ) \
		$(MOVE_OBJS) | $(SIMCUDA_LIB) $(ES_SWAPSUM_TWIN)
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) -o $@ $(filter %.o,$^) $(CT_LIBS)

$(B)/tests/context_vhandle_test: $(B)/obj/tests/context/vhandle_test.o $(CT_COMMON_OBJ) \
		$(MOVE_OBJS) | $(SIMCUDA_LIB) $(ES_SWAPSUM_TWIN) \
		$(ES_SWAPSUM_FATBIN)
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) -o $@ $(filter %.o,$^) $(CT_LIBS)

$(B)/tests/context_mover_test: $(B)/obj/tests/context/mover_test.o $(CT_COMMON_OBJ) \
		$(MOVE_OBJS) | $(SIMCUDA_LIB) $(ES_SWAPSUM_TWIN)
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) -o $@ $(filter %.o,$^) $(CT_LIBS)

$(B)/tests/context_tslice_test: $(B)/obj/tests/context/tslice_test.o $(CT_COMMON_OBJ) \
		$(MOVE_OBJS) | $(SIMCUDA_LIB) $(ES_SWAPSUM_TWIN)
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) -o $@ $(filter %.o,$^) $(CT_LIBS)

$(B)/tests/context_mempool_test: $(B)/obj/tests/context/mempool_test.o $(CT_COMMON_OBJ) \
		$(MOVE_OBJS) | $(SIMCUDA_LIB)
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) -o $@ $(filter %.o,$^) $(CT_LIBS)

# The door needs no driver.
$(B)/tests/context_door_test: $(B)/obj/tests/context/door_test.o $(B)/obj/move/door.o
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) -o $@ $(filter %.o,$^) $(CMOCKA_LIBS)

TESTS += $(B)/tests/context_memreg_test $(B)/tests/context_swap_test \
    $(B)/tests/context_vhandle_test $(B)/tests/context_door_test $(B)/tests/context_mover_test \
    $(B)/tests/context_tslice_test $(B)/tests/context_mempool_test

$(B)/bench/swap_bench: $(B)/obj/tests/context/bench_swap.o $(MOVE_OBJS) \
		| $(SIMCUDA_LIB) $(ES_SWAPSUM_TWIN)
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) -o $@ $(filter %.o,$^) $(CT_LIBS)

BENCHES += $(B)/bench/swap_bench
