# device/: the devices an EST sees: d2's canonical device identity
# (device.c), the shim's own device memory made ahead (devmem.c), placement
# and virtual devices (vdev.c). The shim compiles $(DEVICE_SRCS).
DEVICE_SRCS := device/device.c device/devmem.c device/vdev.c
