# move/: what moves an EST's device state from GPU to GPU (docs/MOVING.md):
# the driver table it calls (drv.c: its only way to the driver), the memory
# registry (memreg.c), the swap engine (swap.c, with the checksum kernel of
# kernels/swapsum.cu), the virtual handles' registry (vhandle.c), the door
# of safe points (door.c), the move orchestrator (mover.c), time-slicing of
# a slot (tslice.c), memory pools (mempool.c); and the seam the control
# thread calls (est.c: shim/move.h, EASYSCALE_MOVE, the move signal).
# The machinery is built and tested on simcuda's driver directly
# (tests/move/module.mk links $(MOVE_OBJS)); the shim links it with est.c
# ($(MOVE_SHIM_SRCS)).
MOVE_SRCS := move/drv.c move/memreg.c move/swap.c move/vhandle.c move/door.c move/mover.c \
    move/tslice.c move/mempool.c
MOVE_OBJS := $(patsubst %.c,$(B)/obj/%.o,$(MOVE_SRCS) $(LIB_SRCS)) $(KERNELS_SWAPSUM_OBJ) \
    $(FATBIN_OBJ)
MOVE_SHIM_SRCS := $(MOVE_SRCS) move/est.c
