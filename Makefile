# EasyScale: top-level build. Each area adds its targets in its own module.mk;
# this file holds the shared flags, the aggregate targets and the test runner.
#
#   make            build everything
#   make test       build and run every test program (cmocka summaries)
#   make demo       the main job on simcuda
#   make bench      benchmarks (figures, never pass/fail on time)
#   make determinism  the checksum harness: one job on many placements
#   make soak       exact schedules with the controller killed every 6 s
#   make SAN=address test / make SAN=undefined test   sanitizer builds (build-<san>/)

CUDA_HOME ?= /usr/local/cuda
ifeq ($(wildcard $(CUDA_HOME)/include/cuda.h),)
$(error CUDA 13 toolkit not found: $(CUDA_HOME)/include/cuda.h is missing (install the toolkit or set CUDA_HOME))
endif
ifeq ($(wildcard $(CUDA_HOME)/bin/nvcc),)
$(error CUDA 13 toolkit incomplete: $(CUDA_HOME)/bin/nvcc is missing (install the toolkit or set CUDA_HOME))
endif
# cuDNN's headers: the toolkit's folder unless given (pip's nvidia-cudnn
# wheel keeps them in nvidia/cudnn/include).
CUDNN_INCLUDE ?= $(CUDA_HOME)/include
ifeq ($(wildcard $(CUDNN_INCLUDE)/cudnn.h),)
$(error cuDNN 9 headers not found: $(CUDNN_INCLUDE)/cudnn.h is missing (install cuDNN's development files or set CUDNN_INCLUDE to the folder holding cudnn.h))
endif

# The Debian packages the build needs (scripts/deps: installs them as root,
# else prints the apt-get line and stops the build). Once per make
# invocation; not for `make clean`. ES_SKIP_DEPS=1 skips the check.
ifeq ($(filter-out clean,$(or $(MAKECMDGOALS),all)),)
else ifneq ($(ES_SKIP_DEPS),1)
ES_DEPS_RC := $(shell scripts/deps --quiet >&2; echo $$?)
ifneq ($(ES_DEPS_RC),0)
$(error missing build packages (scripts/deps said which, above))
endif
ifneq ($(filter bench,$(MAKECMDGOALS)),)
# The benchmark's comparison packages are optional: without them that
# comparison is skipped, nothing else.
ES_BENCH_DEPS_RC := $(shell scripts/deps --quiet --bench >&2; echo $$?)
endif
endif

SAN ?=
B ?= build$(if $(SAN),-$(SAN))
CC ?= cc
NVCC ?= $(CUDA_HOME)/bin/nvcc
PYTHON ?= python3

CPPFLAGS := -I$(CUDA_HOME)/include $(if $(filter-out $(CUDA_HOME)/include,$(CUDNN_INCLUDE)),-I$(CUDNN_INCLUDE)) -I. -D_GNU_SOURCE
CFLAGS := -std=gnu11 -Wall -Wextra -O2 -g -fPIC -pthread
LDFLAGS := -pthread
ifneq ($(SAN),)
CFLAGS += -fsanitize=$(SAN) -fno-omit-frame-pointer -fno-sanitize-recover=all
LDFLAGS += -fsanitize=$(SAN)
endif
SO_LDFLAGS := -shared $(LDFLAGS)

CMOCKA_LIBS := -lcmocka

# Objects shared by several programs.
TEST_HARNESS_OBJ := $(B)/obj/tests/harness.o
FATBIN_OBJ := $(B)/obj/fatbin/fatbin.o
FATBIN_LIBS := -lelf -lzstd
SIMDRV_OBJ := $(B)/obj/sim/common/simdrv.o
SIMF16_OBJ := $(B)/obj/sim/common/f16.o
SIM_LIVE_OBJ := $(B)/obj/sim/common/live.o

# Filled in by the module.mk files.
ALL :=
TESTS :=
HOSTS_TESTS :=
BENCHES :=

.PHONY: all test demo bench determinism soak clean
all:

# In dependency order: a module.mk may use the variables of those above it.
# simcuda (sim/) depends on nothing of ours but the neutral fatbin reader;
# the shim's folders point one way (docs/ARCHITECTURE.md, checked by
# scripts/check-deps): intercept/ -> coll/ -> move/ -> device/ -> kernels/,
# audit/ -> shim/, wire/, lib/.
# Then the tests, one tests/<area>/ per source folder (docs/CONVENTIONS.md,
# "Tests"), after every source module: tests/ (shared test variables) first,
# tests/sim/common before the other simcuda libraries' tests, tests/fatbin
# (the device-code fixtures) before the audit's and the kernels' tests.
MODULES := fatbin \
    sim/driver sim/cucpu sim/cublas sim/cublaslt sim/cudnn sim/nccl \
    lib wire audit kernels device move coll intercept \
    examples controller \
    shim \
    tests tests/scripts tests/sim/common tests/fatbin \
    tests/sim/driver tests/sim/cucpu tests/sim/cublas tests/sim/cublaslt tests/sim/cudnn tests/sim/nccl \
    tests/wire tests/audit tests/kernels tests/device tests/move tests/coll tests/intercept \
    tests/examples tests/controller \
    tests/shim
include $(patsubst %,%/module.mk,$(MODULES))

all: $(ALL) $(B)/san

# Records which sanitizer a build directory holds (read by scripts/simenv).
.PHONY: $(B)/san
$(B)/san:
	@mkdir -p $(B)
	@if [ -n "$(SAN)" ]; then echo $(SAN) > $@; else rm -f $@; fi

# Object rule: build/obj/<path>.o from <path>.c
$(B)/obj/%.o: %.c
	@mkdir -p $(dir $@)
	$(CC) $(CPPFLAGS) $(CFLAGS) -MMD -MP -c -o $@ $<

-include $(shell find $(B)/obj -name '*.d' 2>/dev/null)

# Every test program is run even when one fails; the target fails at the end.
# First the folders' one-way dependencies (scripts/check-deps: the #include
# lines and the objects' symbols of $(B)); a violation fails the target too.
# scripts/run-tests runs 2 programs that compute at a time, the longest
# first, and beside them up to 2 that mostly wait (by their last run's CPU
# time); ES_TEST_JOBS=1 make test: one at a time, the output as it comes.
test: all $(TESTS)
	@rc=0; CUDA_HOME=$(CUDA_HOME) scripts/check-deps --build $(B) || rc=1; \
	ES_BUILD=$(B) scripts/run-tests $(TESTS) || rc=1; exit $$rc

# Builds every test program and bench without running them.
.PHONY: build-tests test-hosts
build-tests: all $(TESTS) $(HOSTS_TESTS) $(BENCHES)

# simcuda's NCCL and a job across simulated hosts alone (root; also in `make test`).
test-hosts: all $(HOSTS_TESTS)
	@ES_BUILD=$(B) scripts/run-tests $(HOSTS_TESTS)

# test-NAME builds and runs the test programs whose file name ends in NAME
# or NAME_test.
# (ES_PCT: a % that the pattern rule does not replace by the stem)
ES_PCT := %
.SECONDEXPANSION:
test-%: all $$(filter $$(ES_PCT)$$*,$$(TESTS)) $$(filter $$(ES_PCT)$$*_test,$$(TESTS))
	@ES_BUILD=$(B) scripts/run-tests $(filter %$*,$(TESTS)) $(filter %$*_test,$(TESTS))

demo: all
	@ES_BUILD=$(B) scripts/demo

bench: all $(BENCHES)
	@ES_BUILD=$(B) scripts/bench $(BENCHES)

determinism: all
	@ES_BUILD=$(B) scripts/determinism-matrix $(DETERMINISM_ARGS)

# Exact schedules under fire: 100 live events, the controller killed every
# 6 s (scripts/soak-schedule --help); minutes, never part of `make test`.
soak: all
	@ES_BUILD=$(B) scripts/soak-schedule $(SOAK_ARGS)

clean:
	rm -rf build build-*
