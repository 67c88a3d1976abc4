# context/: the state of an EST that outlives any one GPU. Today: the
# canonical device identity of d2 (device.c). The shim compiles
# $(CONTEXT_SHIM_SRCS).

CONTEXT_SHIM_SRCS := context/device.c context/devmem.c

# ---- moving an EST (docs/MOVING.md) ------------------------------------------
# The machinery in context/ that moves an EST's device state: the driver
# table it calls (drv.c), the memory registry (memreg.c), the swap engine
# (swap.c, with the checksum kernel of kernels/swapsum.cu), the virtual
# handles (vhandle.c), the door of safe points (door.c), the move
# orchestrator (mover.c), time-slicing of a slot (tslice.c), memory pools
# (mempool.c); built and tested
# on simcuda's driver directly (tests/context/), and linked into the shim.
CONTEXT_MOVE_SRCS := context/drv.c context/hmap.c context/memreg.c context/swap.c \
    context/vhandle.c context/door.c context/mover.c context/tslice.c context/mempool.c
CONTEXT_MOVE_OBJS := $(patsubst %.c,$(B)/obj/%.o,$(CONTEXT_MOVE_SRCS)) $(KERNELS_SWAPSUM_OBJ) \
    $(FATBIN_OBJ)
# Linked into the shim as well.
CONTEXT_SHIM_SRCS += $(CONTEXT_MOVE_SRCS)
CT_COMMON_OBJ := $(B)/obj/tests/context/ctxtest.o
CT_LIBS := -L$(B)/sim -l:libcuda.so.1 $(CMOCKA_LIBS) $(FATBIN_LIBS) -ldl -lrt

$(B)/tests/context_memreg_test: $(B)/obj/tests/context/memreg_test.o $(CT_COMMON_OBJ) \
		$(CONTEXT_MOVE_OBJS) | $(SIMCUDA_LIB)
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) -o $@ $(filter %.o,$^) $(CT_LIBS)

$(B)/tests/context_swap_test: $(B)/obj/tests/context/swap_test.o $(CT_COMMON_OBJ) \
		$(CONTEXT_MOVE_OBJS) | $(SIMCUDA_LIB) $(ES_SWAPSUM_TWIN)
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) -o $@ $(filter %.o,$^) $(CT_LIBS)

$(B)/tests/context_vhandle_test: $(B)/obj/tests/context/vhandle_test.o $(CT_COMMON_OBJ) \
		$(CONTEXT_MOVE_OBJS) | $(SIMCUDA_LIB) $(ES_SWAPSUM_TWIN) \
		$(ES_SWAPSUM_FATBIN)
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) -o $@ $(filter %.o,$^) $(CT_LIBS)

$(B)/tests/context_mover_test: $(B)/obj/tests/context/mover_test.o $(CT_COMMON_OBJ) \
		$(CONTEXT_MOVE_OBJS) | $(SIMCUDA_LIB) $(ES_SWAPSUM_TWIN)
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) -o $@ $(filter %.o,$^) $(CT_LIBS)

$(B)/tests/context_tslice_test: $(B)/obj/tests/context/tslice_test.o $(CT_COMMON_OBJ) \
		$(CONTEXT_MOVE_OBJS) | $(SIMCUDA_LIB) $(ES_SWAPSUM_TWIN)
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) -o $@ $(filter %.o,$^) $(CT_LIBS)

$(B)/tests/context_mempool_test: $(B)/obj/tests/context/mempool_test.o $(CT_COMMON_OBJ) \
		$(CONTEXT_MOVE_OBJS) | $(SIMCUDA_LIB)
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) -o $@ $(filter %.o,$^) $(CT_LIBS)

# The door needs no driver.
$(B)/tests/context_door_test: $(B)/obj/tests/context/door_test.o $(B)/obj/context/door.o
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) -o $@ $(filter %.o,$^) $(CMOCKA_LIBS)

TESTS += $(B)/tests/context_memreg_test $(B)/tests/context_swap_test \
    $(B)/tests/context_vhandle_test $(B)/tests/context_door_test $(B)/tests/context_mover_test \
    $(B)/tests/context_tslice_test $(B)/tests/context_mempool_test

$(B)/bench/swap_bench: $(B)/obj/tests/context/bench_swap.o $(CONTEXT_MOVE_OBJS) \
		| $(SIMCUDA_LIB) $(ES_SWAPSUM_TWIN)
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) -o $@ $(filter %.o,$^) $(CT_LIBS)

BENCHES += $(B)/bench/swap_bench
