# tests/: the shared harness object is built by the generic rule
# ($(TEST_HARNESS_OBJ)); test programs are added by each area's module.mk.
