# tests/: the shared harness object is built by the generic rule
# ($(TEST_HARNESS_OBJ), tests/harness.h: the process runner every area's
# tests use). Test programs are registered by each area's
# tests/<area>/module.mk (docs/CONVENTIONS.md, "Tests"); tests/clients/
# holds the NVIDIA-header-only client programs several areas run (built by
# the areas that register them). Included first of the tests/ modules:
# what it defines here, several areas use.

# simcuda's libraries the shim's clients link (tests/shim, tests/intercept,
# tests/kernels).
ES_SIMLIBS := $(B)/sim/libcuda.so.1 $(B)/sim/libcublas.so.13 $(B)/sim/libcudnn.so.9

# Clients run under the shim, written against NVIDIA's headers only (plus
# the tests' own helpers): linked with simcuda's libraries like any user
# program (tests/coll, tests/device).
TEST_CLIENT_CC = $(CC) -I$(CUDA_HOME)/include -I. -std=gnu11 -Wall -Wextra -g -O2 \
	-ffp-contract=off $(filter -fsanitize=%,$(CFLAGS))
