# context/: the state of an EST that outlives any one GPU. Today: the
# canonical device identity of d2 (device.c). The shim compiles
# $(CONTEXT_SHIM_SRCS).

CONTEXT_SHIM_SRCS := context/device.c context/devmem.c
