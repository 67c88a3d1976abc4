# tests/device/: the tests of device/: placement and virtual devices
# (device_vdev_test, with vdev_probe.c, a cuda.h-only program run under the
# shim) and d2's device identity (device_identity_test: the canonical device
# and the lowering in the test's process, and callers of each kind through
# id_client.c and id_caller.c built as three libraries).

$(B)/tests/device/vdev_probe: tests/device/vdev_probe.c $(B)/sim/libcuda.so.1
	@mkdir -p $(dir $@)
	$(TEST_CLIENT_CC) $< -L$(B)/sim -l:libcuda.so.1 $(LDFLAGS) -o $@

$(B)/tests/device_vdev_test: $(B)/obj/tests/device/vdev_test.o $(TEST_HARNESS_OBJ) \
		| $(B)/lib/libeasyscale.so $(B)/tests/device/vdev_probe
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) -o $@ $(filter %.o,$^) $(CMOCKA_LIBS)

TESTS += $(B)/tests/device_vdev_test

# d2's device identity as seen by callers of each kind
# (tests/device/identity_test.c): one library under three file names.
ES_IDLIBS := $(addprefix $(B)/tests/device/idlib/,libnvrtc-estest.so triton/cuda_utils.so \
	libplain-estest.so)
$(ES_IDLIBS): tests/device/id_caller.c $(B)/sim/libcuda.so.1
	@mkdir -p $(dir $@)
	$(CC) $(CPPFLAGS) $(CFLAGS) $(SO_LDFLAGS) -o $@ $< -L$(B)/sim -l:libcuda.so.1
$(B)/tests/device/id_client: $(B)/obj/tests/device/id_client.o $(B)/sim/libcuda.so.1
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) -o $@ $< -L$(B)/sim -l:libcuda.so.1 -ldl

# d2's device identity: the canonical device, lowering only, callers.
$(B)/tests/device_identity_test: $(B)/obj/tests/device/identity_test.o $(B)/obj/device/device.o \
		$(TEST_HARNESS_OBJ) | $(B)/lib/libeasyscale.so $(B)/tests/device/id_client $(ES_IDLIBS)
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) -o $@ $(filter %.o,$^) $(CMOCKA_LIBS) -ldl

TESTS += $(B)/tests/device_identity_test
