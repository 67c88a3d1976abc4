# examples/: the data-parallel trainer's device code, single source
# (kernels.cu -> the fatbin loaded by examples/train.py, and the same
# kernels for simcuda through the CUDA-on-CPU layer, sim/cucpu/module.mk).
# The trainer's tests are tests/examples/module.mk's.

EX_FATBIN := $(B)/examples/kernels.fatbin
EX_TWINS := $(B)/sim/twins/libsimtwin_examples.so

$(eval $(call cucpu_cu,examples/kernels.cu,$(EX_FATBIN),$(EX_TWINS),examples/es_kmath.h))

ALL += $(EX_FATBIN) $(EX_TWINS)
