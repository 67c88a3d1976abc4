# tests/sim/common/: what the tests of simcuda's libraries share (no test
# program of its own): the library tests' ELF interface check against
# NVIDIA's libraries (abi.h, $(SIM_TEST_ABI_OBJ)). Included before the
# other tests/sim/ folders.
SIM_TEST_ABI_OBJ := $(B)/obj/tests/sim/common/abi.o
