# fatbin/: the reader of NVIDIA device-code containers ($(FATBIN_OBJ), defined
# in the top Makefile: compiled into simcuda's driver, the audit and the
# shim). Its unit test and the device code that test reads (compiled by nvcc
# at build time, never committed; the audit's tests read it too) are
# tests/fatbin/module.mk's.

ALL += $(FATBIN_OBJ)
