/* Per-parameter annotations of the argument lists of shim/funcs.h
 * (docs/MOVING.md, section 4): which arguments are handles the application
 * holds as virtual handles (move/vhandle.h), and how a generated call
 * translates them.
 *
 * In an entry's argument list a parameter is written plain (`ByteCount`) or
 * annotated:
 *   V_<KIND>(name)  an input handle: the call passes the real handle
 *   O_<KIND>(name)  a pointer to an output handle: the call passes it as
 *                   is, then *name is replaced by the virtual handle
 *   R_DEV(name, bytes)  a device address the call reads or writes bytes
 *                   from: refused (the entry's invalid-value error) when
 *                   the range starts inside an allocation of the shim's
 *                   cuMemAlloc family and runs past its end, as the driver
 *                   refuses it for its own allocations; passed as is
 * KIND: CTX, STREAM, EVENT, MOD, FN, LIB, KERN, MEMH (a VMM allocation
 * handle: the registry's stand-in), BLAS, LT, DNN (cuBLAS, cuBLASLt and cuDNN
 * handles: intercept/virtual/libh.h).
 * The annotations are not macros: only the generators below read them, so
 * code that expands an argument list as is fails to compile (instead of
 * silently passing virtual handles).
 *
 *   ES_VA_CALL args   the argument list of the real call, translated
 *   ES_VA_POST(r, args)  statements run after the real call (r: its result,
 *                   0 meaning success), one per output handle
 *   ES_VA_BAD args    an expression, non-zero when an R_DEV range is refused
 *   ES_VA_COUNT args  the number of handle parameters (V_, O_; a constant)
 *   ES_VA_NAMES args  the argument list as plain names (passing the
 *                   wrapper's own parameters on, untranslated)
 *   ES_VA_PRE args    statements noting the stream, event, cuBLAS and cuDNN
 *                   handles (es_va_pre_<KIND>(x), untranslated) for the
 *                   time-slicing check (intercept/tsdefer.h)
 *
 * The expansions call es_va_in_<KIND>(x), es_va_out_<KIND>(p) and
 * es_va_range(x, bytes), which the includer defines (intercept/virtual/thunks.c: from move/vhandle.h;
 * tests: their own). At most 40 parameters.
 */
#ifndef ES_INTERCEPT_VARGS_H
#define ES_INTERCEPT_VARGS_H

/* ---- preprocessor tools ------------------------------------------------------------- */

#define ES_PP_CAT(a, b) ES_PP_CAT_(a, b)
#define ES_PP_CAT_(a, b) a##b
#define ES_PP_SECOND(...) ES_PP_SECOND_(__VA_ARGS__, , )
#define ES_PP_SECOND_(a, b, ...) b
/* 1 when x starts with an annotation (its probe expands to "~, 1"), else 0. */
#define ES_PP_IS_ANN(x) ES_PP_SECOND(ES_PP_CAT(ES_VA_PROBE_, x), 0)
#define ES_PP_IF(c) ES_PP_CAT(ES_PP_IF_, c)
#define ES_PP_IF_1(t, f) t
#define ES_PP_IF_0(t, f) f

#define ES_PP_NARGS(...) ES_PP_NARGS_(__VA_ARGS__, 40, 39, 38, 37, 36, 35, 34, 33, 32, 31, 30, 29, 28, 27, 26, 25, 24, 23, 22, 21, 20, 19, 18, 17, 16, 15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0)
#define ES_PP_NARGS_(a1, a2, a3, a4, a5, a6, a7, a8, a9, a10, a11, a12, a13, a14, a15, a16, a17, a18, a19, a20, a21, a22, a23, a24, a25, a26, a27, a28, a29, a30, a31, a32, a33, a34, a35, a36, a37, a38, a39, a40, n, ...) n
/* M(x) for every x, separated by S (ES_PP_COMMA or nothing). An empty list
 * counts as one empty argument: M must accept it. */
#define ES_PP_EACH(M, S, ...) ES_PP_CAT(ES_PP_EACH_, ES_PP_NARGS(__VA_ARGS__))(M, S, __VA_ARGS__)
#define ES_PP_EACH_1(M, S, a) M(a)
#define ES_PP_EACH_2(M, S, a, ...) M(a) S() ES_PP_EACH_1(M, S, __VA_ARGS__)
#define ES_PP_EACH_3(M, S, a, ...) M(a) S() ES_PP_EACH_2(M, S, __VA_ARGS__)
#define ES_PP_EACH_4(M, S, a, ...) M(a) S() ES_PP_EACH_3(M, S, __VA_ARGS__)
#define ES_PP_EACH_5(M, S, a, ...) M(a) S() ES_PP_EACH_4(M, S, __VA_ARGS__)
#define ES_PP_EACH_6(M, S, a, ...) M(a) S() ES_PP_EACH_5(M, S, __VA_ARGS__)
#define ES_PP_EACH_7(M, S, a, ...) M(a) S() ES_PP_EACH_6(M, S, __VA_ARGS__)
#define ES_PP_EACH_8(M, S, a, ...) M(a) S() ES_PP_EACH_7(M, S, __VA_ARGS__)
#define ES_PP_EACH_9(M, S, a, ...) M(a) S() ES_PP_EACH_8(M, S, __VA_ARGS__)
#define ES_PP_EACH_10(M, S, a, ...) M(a) S() ES_PP_EACH_9(M, S, __VA_ARGS__)
#define ES_PP_EACH_11(M, S, a, ...) M(a) S() ES_PP_EACH_10(M, S, __VA_ARGS__)
#define ES_PP_EACH_12(M, S, a, ...) M(a) S() ES_PP_EACH_11(M, S, __VA_ARGS__)
#define ES_PP_EACH_13(M, S, a, ...) M(a) S() ES_PP_EACH_12(M, S, __VA_ARGS__)
#define ES_PP_EACH_14(M, S, a, ...) M(a) S() ES_PP_EACH_13(M, S, __VA_ARGS__)
#define ES_PP_EACH_15(M, S, a, ...) M(a) S() ES_PP_EACH_14(M, S, __VA_ARGS__)
#define ES_PP_EACH_16(M, S, a, ...) M(a) S() ES_PP_EACH_15(M, S, __VA_ARGS__)
#define ES_PP_EACH_17(M, S, a, ...) M(a) S() ES_PP_EACH_16(M, S, __VA_ARGS__)
#define ES_PP_EACH_18(M, S, a, ...) M(a) S() ES_PP_EACH_17(M, S, __VA_ARGS__)
#define ES_PP_EACH_19(M, S, a, ...) M(a) S() ES_PP_EACH_18(M, S, __VA_ARGS__)
#define ES_PP_EACH_20(M, S, a, ...) M(a) S() ES_PP_EACH_19(M, S, __VA_ARGS__)
#define ES_PP_EACH_21(M, S, a, ...) M(a) S() ES_PP_EACH_20(M, S, __VA_ARGS__)
#define ES_PP_EACH_22(M, S, a, ...) M(a) S() ES_PP_EACH_21(M, S, __VA_ARGS__)
#define ES_PP_EACH_23(M, S, a, ...) M(a) S() ES_PP_EACH_22(M, S, __VA_ARGS__)
#define ES_PP_EACH_24(M, S, a, ...) M(a) S() ES_PP_EACH_23(M, S, __VA_ARGS__)
#define ES_PP_EACH_25(M, S, a, ...) M(a) S() ES_PP_EACH_24(M, S, __VA_ARGS__)
#define ES_PP_EACH_26(M, S, a, ...) M(a) S() ES_PP_EACH_25(M, S, __VA_ARGS__)
#define ES_PP_EACH_27(M, S, a, ...) M(a) S() ES_PP_EACH_26(M, S, __VA_ARGS__)
#define ES_PP_EACH_28(M, S, a, ...) M(a) S() ES_PP_EACH_27(M, S, __VA_ARGS__)
#define ES_PP_EACH_29(M, S, a, ...) M(a) S() ES_PP_EACH_28(M, S, __VA_ARGS__)
#define ES_PP_EACH_30(M, S, a, ...) M(a) S() ES_PP_EACH_29(M, S, __VA_ARGS__)
#define ES_PP_EACH_31(M, S, a, ...) M(a) S() ES_PP_EACH_30(M, S, __VA_ARGS__)
#define ES_PP_EACH_32(M, S, a, ...) M(a) S() ES_PP_EACH_31(M, S, __VA_ARGS__)
#define ES_PP_EACH_33(M, S, a, ...) M(a) S() ES_PP_EACH_32(M, S, __VA_ARGS__)
#define ES_PP_EACH_34(M, S, a, ...) M(a) S() ES_PP_EACH_33(M, S, __VA_ARGS__)
#define ES_PP_EACH_35(M, S, a, ...) M(a) S() ES_PP_EACH_34(M, S, __VA_ARGS__)
#define ES_PP_EACH_36(M, S, a, ...) M(a) S() ES_PP_EACH_35(M, S, __VA_ARGS__)
#define ES_PP_EACH_37(M, S, a, ...) M(a) S() ES_PP_EACH_36(M, S, __VA_ARGS__)
#define ES_PP_EACH_38(M, S, a, ...) M(a) S() ES_PP_EACH_37(M, S, __VA_ARGS__)
#define ES_PP_EACH_39(M, S, a, ...) M(a) S() ES_PP_EACH_38(M, S, __VA_ARGS__)
#define ES_PP_EACH_40(M, S, a, ...) M(a) S() ES_PP_EACH_39(M, S, __VA_ARGS__)
#define ES_PP_COMMA() ,
#define ES_PP_NOTHING()

/* ---- the annotations ------------------------------------------------------------------ */

#define ES_VA_KINDS(Y) Y(CTX) Y(STREAM) Y(EVENT) Y(MOD) Y(FN) Y(LIB) Y(KERN) Y(MEMH) Y(BLAS) Y(LT) Y(DNN)

/* probes: V_X(...) and O_X(...) expand to "~, 1" after the ES_VA_PROBE_ prefix */
#define ES_VA_PROBE_V_CTX(x) ~, 1
#define ES_VA_PROBE_V_STREAM(x) ~, 1
#define ES_VA_PROBE_V_EVENT(x) ~, 1
#define ES_VA_PROBE_V_MOD(x) ~, 1
#define ES_VA_PROBE_V_FN(x) ~, 1
#define ES_VA_PROBE_V_LIB(x) ~, 1
#define ES_VA_PROBE_V_KERN(x) ~, 1
#define ES_VA_PROBE_V_MEMH(x) ~, 1
#define ES_VA_PROBE_V_BLAS(x) ~, 1
#define ES_VA_PROBE_V_LT(x) ~, 1
#define ES_VA_PROBE_V_DNN(x) ~, 1
#define ES_VA_PROBE_O_CTX(x) ~, 1
#define ES_VA_PROBE_O_STREAM(x) ~, 1
#define ES_VA_PROBE_O_EVENT(x) ~, 1
#define ES_VA_PROBE_O_MOD(x) ~, 1
#define ES_VA_PROBE_O_FN(x) ~, 1
#define ES_VA_PROBE_O_LIB(x) ~, 1
#define ES_VA_PROBE_O_KERN(x) ~, 1
#define ES_VA_PROBE_O_MEMH(x) ~, 1
#define ES_VA_PROBE_O_BLAS(x) ~, 1
#define ES_VA_PROBE_O_LT(x) ~, 1
#define ES_VA_PROBE_O_DNN(x) ~, 1
#define ES_VA_PROBE_R_DEV(x, n) ~, 1

/* the call's argument */
#define ES_VA_ARG_V_CTX(x) es_va_in_CTX(x)
#define ES_VA_ARG_V_STREAM(x) es_va_in_STREAM(x)
#define ES_VA_ARG_V_EVENT(x) es_va_in_EVENT(x)
#define ES_VA_ARG_V_MOD(x) es_va_in_MOD(x)
#define ES_VA_ARG_V_FN(x) es_va_in_FN(x)
#define ES_VA_ARG_V_LIB(x) es_va_in_LIB(x)
#define ES_VA_ARG_V_KERN(x) es_va_in_KERN(x)
#define ES_VA_ARG_V_MEMH(x) es_va_in_MEMH(x)
#define ES_VA_ARG_V_BLAS(x) es_va_in_BLAS(x)
#define ES_VA_ARG_V_LT(x) es_va_in_LT(x)
#define ES_VA_ARG_V_DNN(x) es_va_in_DNN(x)
#define ES_VA_ARG_O_CTX(x) x
#define ES_VA_ARG_O_STREAM(x) x
#define ES_VA_ARG_O_EVENT(x) x
#define ES_VA_ARG_O_MOD(x) x
#define ES_VA_ARG_O_FN(x) x
#define ES_VA_ARG_O_LIB(x) x
#define ES_VA_ARG_O_KERN(x) x
#define ES_VA_ARG_O_MEMH(x) x
#define ES_VA_ARG_O_BLAS(x) x
#define ES_VA_ARG_O_LT(x) x
#define ES_VA_ARG_O_DNN(x) x
#define ES_VA_ARG_R_DEV(x, n) x

/* the statement after the call */
#define ES_VA_AFTER_V_CTX(x)
#define ES_VA_AFTER_V_STREAM(x)
#define ES_VA_AFTER_V_EVENT(x)
#define ES_VA_AFTER_V_MOD(x)
#define ES_VA_AFTER_V_FN(x)
#define ES_VA_AFTER_V_LIB(x)
#define ES_VA_AFTER_V_KERN(x)
#define ES_VA_AFTER_V_MEMH(x)
#define ES_VA_AFTER_V_BLAS(x)
#define ES_VA_AFTER_V_LT(x)
#define ES_VA_AFTER_V_DNN(x)
#define ES_VA_AFTER_O_CTX(x) es_va_out_CTX(x);
#define ES_VA_AFTER_O_STREAM(x) es_va_out_STREAM(x);
#define ES_VA_AFTER_O_EVENT(x) es_va_out_EVENT(x);
#define ES_VA_AFTER_O_MOD(x) es_va_out_MOD(x);
#define ES_VA_AFTER_O_FN(x) es_va_out_FN(x);
#define ES_VA_AFTER_O_LIB(x) es_va_out_LIB(x);
#define ES_VA_AFTER_O_KERN(x) es_va_out_KERN(x);
#define ES_VA_AFTER_O_MEMH(x) es_va_out_MEMH(x);
#define ES_VA_AFTER_O_BLAS(x) es_va_out_BLAS(x);
#define ES_VA_AFTER_O_LT(x) es_va_out_LT(x);
#define ES_VA_AFTER_O_DNN(x) es_va_out_DNN(x);
#define ES_VA_AFTER_R_DEV(x, n)

/* the parameter's name */
#define ES_VA_NAME_V_CTX(x) x
#define ES_VA_NAME_V_STREAM(x) x
#define ES_VA_NAME_V_EVENT(x) x
#define ES_VA_NAME_V_MOD(x) x
#define ES_VA_NAME_V_FN(x) x
#define ES_VA_NAME_V_LIB(x) x
#define ES_VA_NAME_V_KERN(x) x
#define ES_VA_NAME_V_MEMH(x) x
#define ES_VA_NAME_V_BLAS(x) x
#define ES_VA_NAME_V_LT(x) x
#define ES_VA_NAME_V_DNN(x) x
#define ES_VA_NAME_O_CTX(x) x
#define ES_VA_NAME_O_STREAM(x) x
#define ES_VA_NAME_O_EVENT(x) x
#define ES_VA_NAME_O_MOD(x) x
#define ES_VA_NAME_O_FN(x) x
#define ES_VA_NAME_O_LIB(x) x
#define ES_VA_NAME_O_KERN(x) x
#define ES_VA_NAME_O_MEMH(x) x
#define ES_VA_NAME_O_BLAS(x) x
#define ES_VA_NAME_O_LT(x) x
#define ES_VA_NAME_O_DNN(x) x
#define ES_VA_NAME_R_DEV(x, n) x

/* the range check (handles: none) and whether it is a handle */
#define ES_VA_BAD_R_DEV(x, n) || es_va_range(x, n)
#define ES_VA_HANDLE_R_DEV(x, n) 0
#define ES_VA_BAD_V_CTX(x)
#define ES_VA_HANDLE_V_CTX(x) 1
#define ES_VA_BAD_V_STREAM(x)
#define ES_VA_HANDLE_V_STREAM(x) 1
#define ES_VA_BAD_V_EVENT(x)
#define ES_VA_HANDLE_V_EVENT(x) 1
#define ES_VA_BAD_V_MOD(x)
#define ES_VA_HANDLE_V_MOD(x) 1
#define ES_VA_BAD_V_FN(x)
#define ES_VA_HANDLE_V_FN(x) 1
#define ES_VA_BAD_V_LIB(x)
#define ES_VA_HANDLE_V_LIB(x) 1
#define ES_VA_BAD_V_KERN(x)
#define ES_VA_HANDLE_V_KERN(x) 1
#define ES_VA_BAD_V_MEMH(x)
#define ES_VA_HANDLE_V_MEMH(x) 1
#define ES_VA_BAD_V_BLAS(x)
#define ES_VA_BAD_V_LT(x)
#define ES_VA_HANDLE_V_BLAS(x) 1
#define ES_VA_HANDLE_V_LT(x) 1
#define ES_VA_BAD_V_DNN(x)
#define ES_VA_HANDLE_V_DNN(x) 1
#define ES_VA_BAD_O_CTX(x)
#define ES_VA_HANDLE_O_CTX(x) 1
#define ES_VA_BAD_O_STREAM(x)
#define ES_VA_HANDLE_O_STREAM(x) 1
#define ES_VA_BAD_O_EVENT(x)
#define ES_VA_HANDLE_O_EVENT(x) 1
#define ES_VA_BAD_O_MOD(x)
#define ES_VA_HANDLE_O_MOD(x) 1
#define ES_VA_BAD_O_FN(x)
#define ES_VA_HANDLE_O_FN(x) 1
#define ES_VA_BAD_O_LIB(x)
#define ES_VA_HANDLE_O_LIB(x) 1
#define ES_VA_BAD_O_KERN(x)
#define ES_VA_HANDLE_O_KERN(x) 1
#define ES_VA_BAD_O_MEMH(x)
#define ES_VA_HANDLE_O_MEMH(x) 1
#define ES_VA_BAD_O_BLAS(x)
#define ES_VA_BAD_O_LT(x)
#define ES_VA_HANDLE_O_BLAS(x) 1
#define ES_VA_HANDLE_O_LT(x) 1
#define ES_VA_BAD_O_DNN(x)
#define ES_VA_HANDLE_O_DNN(x) 1

/* before the call: handles noted for the time-slicing check
 * (intercept/tsdefer.h; cuBLASLt handles name no stream: their calls do) */
#define ES_VA_PRE_V_STREAM(x) es_va_pre_STREAM(x);
#define ES_VA_PRE_V_EVENT(x) es_va_pre_EVENT(x);
#define ES_VA_PRE_V_BLAS(x) es_va_pre_BLAS(x);
#define ES_VA_PRE_V_DNN(x) es_va_pre_DNN(x);
#define ES_VA_PRE_V_CTX(x)
#define ES_VA_PRE_V_MOD(x)
#define ES_VA_PRE_V_FN(x)
#define ES_VA_PRE_V_LIB(x)
#define ES_VA_PRE_V_KERN(x)
#define ES_VA_PRE_V_MEMH(x)
#define ES_VA_PRE_V_LT(x)
#define ES_VA_PRE_O_CTX(x)
#define ES_VA_PRE_O_STREAM(x)
#define ES_VA_PRE_O_EVENT(x)
#define ES_VA_PRE_O_MOD(x)
#define ES_VA_PRE_O_FN(x)
#define ES_VA_PRE_O_LIB(x)
#define ES_VA_PRE_O_KERN(x)
#define ES_VA_PRE_O_MEMH(x)
#define ES_VA_PRE_O_BLAS(x)
#define ES_VA_PRE_O_LT(x)
#define ES_VA_PRE_O_DNN(x)
#define ES_VA_PRE_R_DEV(x, n)

/* ---- generators -------------------------------------------------------------------------- */

#define ES_VA_ONE_ARG(x) ES_PP_IF(ES_PP_IS_ANN(x))(ES_PP_CAT(ES_VA_ARG_, x), x)
#define ES_VA_ONE_AFTER(x) ES_PP_IF(ES_PP_IS_ANN(x))(ES_PP_CAT(ES_VA_AFTER_, x), )
#define ES_VA_ONE_COUNT(x) +ES_PP_IF(ES_PP_IS_ANN(x))(ES_PP_CAT(ES_VA_HANDLE_, x), 0)
#define ES_VA_ONE_BAD(x) ES_PP_IF(ES_PP_IS_ANN(x))(ES_PP_CAT(ES_VA_BAD_, x), )
#define ES_VA_ONE_NAME(x) ES_PP_IF(ES_PP_IS_ANN(x))(ES_PP_CAT(ES_VA_NAME_, x), x)
#define ES_VA_ONE_PRE(x) ES_PP_IF(ES_PP_IS_ANN(x))(ES_PP_CAT(ES_VA_PRE_, x), )

#define ES_VA_CALL(...) (ES_PP_EACH(ES_VA_ONE_ARG, ES_PP_COMMA, __VA_ARGS__))
#define ES_VA_POST(r, args)                                                                    \
    do {                                                                                       \
        if ((r) == 0) {                                                                        \
            ES_PP_EACH(ES_VA_ONE_AFTER, ES_PP_NOTHING, ES_VA_UNPAREN args)                     \
        }                                                                                      \
    } while (0)
#define ES_VA_COUNT(...) (0 ES_PP_EACH(ES_VA_ONE_COUNT, ES_PP_NOTHING, __VA_ARGS__))
#define ES_VA_BAD(...) (0 ES_PP_EACH(ES_VA_ONE_BAD, ES_PP_NOTHING, __VA_ARGS__))
#define ES_VA_NAMES(...) (ES_PP_EACH(ES_VA_ONE_NAME, ES_PP_COMMA, __VA_ARGS__))
#define ES_VA_UNPAREN(...) __VA_ARGS__
#define ES_VA_PRE(...) ES_PP_EACH(ES_VA_ONE_PRE, ES_PP_NOTHING, __VA_ARGS__)

#endif
