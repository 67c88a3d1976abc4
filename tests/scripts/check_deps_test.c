/* Tests of scripts/check-deps, the folders' one-way dependencies: the real
 * tree and build pass; a forbidden #include planted in a copy of the sources
 * is named by file and line; a symbol dependency planted in a fake build
 * (objects compiled here, no #include at all) is named with the object that
 * defines it; the spine's seams (shim/hooks.h, shim/move.h) are read from
 * those headers; move/ never references es_real_*; a build directory
 * without objects is a setup error (exit 2). Each case that expects a pass
 * has its failing twin and the reverse, so that every one can fail. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tests/harness.h"

#define TMO 120 /* a loaded 2-core machine: the script itself takes seconds */

static char tmpdir[256];

static int setup_tmp(void **state)
{
    (void)state;
    snprintf(tmpdir, sizeof tmpdir, "%s/es_check_deps.XXXXXX",
             getenv("TMPDIR") && *getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
    return mkdtemp(tmpdir) ? 0 : -1;
}

static int teardown_tmp(void **state)
{
    (void)state;
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
    return system(cmd) == 0 ? 0 : -1;
}

/* Runs a shell command line; returns its exit status, its output in *out
 * (free). */
static int sh(const char *cmd, char **out)
{
    es_proc_result_t r;
    assert_int_equal(es_run_sh(cmd, NULL, TMO, &r), 0);
    assert_false(r.timed_out);
    if (out)
        *out = r.out;
    else
        es_proc_result_free(&r);
    return r.status;
}

/* scripts/check-deps ARGS: exit status, output in *out (free). */
static int check_deps(const char *args, char **out)
{
    char cmd[2048];
    snprintf(cmd, sizeof cmd, "'%s' %s 2>&1", es_root_path("scripts/check-deps"), args);
    int rc = sh(cmd, out);
    print_message("check-deps %s -> %d\n%s", args, rc, *out);
    return rc;
}

static void write_file(const char *rel, const char *text)
{
    char path[1024], cmd[1200];
    snprintf(path, sizeof path, "%s/%s", tmpdir, rel);
    snprintf(cmd, sizeof cmd, "mkdir -p \"$(dirname '%s')\"", path);
    assert_int_equal(sh(cmd, NULL), 0);
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs(text, f);
    assert_int_equal(fclose(f), 0);
}

/* Appends a line to a file of the copy; returns the line's number. */
static int append_line(const char *rel, const char *line)
{
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", tmpdir, rel);
    FILE *f = fopen(path, "r");
    assert_non_null(f);
    int n = 0, c, last = '\n';
    while ((c = fgetc(f)) != EOF) {
        if (c == '\n')
            n++;
        last = c;
    }
    fclose(f);
    f = fopen(path, "a");
    assert_non_null(f);
    if (last != '\n') { /* the last line had no line break */
        fputc('\n', f);
        n++;
    }
    fprintf(f, "%s\n", line);
    assert_int_equal(fclose(f), 0);
    return n + 1;
}

/* Compiles SRC (relative to the fake tree) into build/obj/<SRC minus .c>.o */
static void compile(const char *src)
{
    char cmd[2048];
    snprintf(cmd, sizeof cmd,
             "cd '%s' && o=build/obj/%.*s.o && mkdir -p \"$(dirname $o)\" && "
             "${CC:-cc} -std=gnu11 -Wall -c -o $o %s",
             tmpdir, (int)(strlen(src) - 2), src, src);
    char *out;
    int rc = sh(cmd, &out);
    if (rc != 0)
        fail_msg("compiling %s: %s", src, out);
    free(out);
}

/* A fake tree: the spine's two seam headers and the headers move/ must not
 * take (the table names them). */
static void fake_tree(const char *hooks_h, const char *move_h)
{
    write_file("shim/hooks.h", hooks_h);
    write_file("shim/move.h", move_h);
    write_file("shim/real.h", "extern int es_real_cuda;\nextern int es_state_fake;\n");
    write_file("shim/funcs.h", "/* the list */\n");
}

static int check_fake(char **out)
{
    char args[1200];
    snprintf(args, sizeof args, "--root '%s' --build '%s/build'", tmpdir, tmpdir);
    return check_deps(args, out);
}

/* ---- the real tree and build ---------------------------------------------- */

static void test_real_tree_passes(void **state)
{
    (void)state;
    char args[8192], *out;
    es_need_built("obj/shim/init.o");
    snprintf(args, sizeof args, "--root '%s' --build '%s'", es_root_path(""), es_build_path(""));
    int rc = check_deps(args, &out);
    assert_int_equal(rc, 0);
    assert_non_null(strstr(out, "check-deps: ok:"));
    free(out);
}

static void test_help(void **state)
{
    (void)state;
    char *out;
    assert_int_equal(check_deps("--help", &out), 0);
    assert_non_null(strstr(out, "usage:"));
    assert_non_null(strstr(out, "--build"));
    free(out);
    assert_int_equal(check_deps("--no-such-option", &out), 2);
    free(out);
}

/* ---- includes: a copy of the sources ---------------------------------------- */

static void copy_sources(void)
{
    char cmd[4096];
    snprintf(cmd, sizeof cmd,
             "cd '%s' && find . -path './build*' -prune -o -path ./.git -prune -o "
             "\\( -name '*.c' -o -name '*.h' -o -name '*.cu' \\) -print0 | "
             "tar --null -T - -cf - | tar -C '%s' -xf -",
             es_root_path(""), tmpdir);
    assert_int_equal(sh(cmd, NULL), 0);
}

static void test_planted_include(void **state)
{
    (void)state;
    char args[600], *out, want[200];
    copy_sources();
    snprintf(args, sizeof args, "--root '%s' --includes-only", tmpdir);
    /* the copy as it is passes: what fails below is the planted line */
    assert_int_equal(check_deps(args, &out), 0);
    free(out);

    int l1 = append_line("shim/log.c", "#include \"intercept/enter.h\"");
    assert_int_equal(check_deps(args, &out), 1);
    snprintf(want, sizeof want, "shim/log.c:%d: includes \"intercept/enter.h\"", l1);
    assert_non_null(strstr(out, want));
    assert_non_null(strstr(out, "shim/ may not include it"));
    assert_non_null(strstr(out, "1 violations"));
    free(out);

    /* move/ never includes coll/, by its path or a relative one */
    int l2 = append_line("move/mover.c", "#include \"coll/coll.h\"");
    int l3 = append_line("move/door.c", "#include \"../coll/coll.h\"");
    assert_int_equal(check_deps(args, &out), 1);
    snprintf(want, sizeof want, "move/mover.c:%d: includes \"coll/coll.h\"", l2);
    assert_non_null(strstr(out, want));
    snprintf(want, sizeof want, "move/door.c:%d: includes \"../coll/coll.h\" (coll/coll.h)", l3);
    assert_non_null(strstr(out, want));
    assert_non_null(strstr(out, "3 violations (3 includes"));
    free(out);
}

/* A folder with sources and no line in the table is a violation too. */
static void test_unknown_folder(void **state)
{
    (void)state;
    char args[600], *out;
    fake_tree("int es_h(void);\n", "void es_m(void);\n");
    snprintf(args, sizeof args, "--root '%s' --includes-only", tmpdir);
    assert_int_equal(check_deps(args, &out), 0);
    free(out);
    write_file("newfolder/a.c", "int es_a;\n");
    assert_int_equal(check_deps(args, &out), 1);
    assert_non_null(strstr(out, "newfolder/a.c: folder newfolder/ has no line in the table"));
    free(out);
}

/* ---- symbols: a fake build ---------------------------------------------------- */

static void test_planted_symbol(void **state)
{
    (void)state;
    char *out;
    fake_tree("int es_fake_hook(int n);\n", "void es_fake_seam(void);\n");
    write_file("wire/w.c", "int es_wire_fn(void) { return 2; }\n");
    write_file("intercept/y.c", "int es_planted_fn(void) { return 1; }\n");
    compile("wire/w.c");
    compile("intercept/y.c");
    /* shim/ may use wire/: passes */
    write_file("shim/x.c", "int es_wire_fn(void);\nint es_x(void) { return es_wire_fn(); }\n");
    compile("shim/x.c");
    assert_int_equal(check_fake(&out), 0);
    free(out);
    /* a local declaration of intercept/'s function, no #include: fails */
    write_file("shim/x.c", "int es_planted_fn(void);\nint es_x(void) { return es_planted_fn(); }\n");
    compile("shim/x.c");
    assert_int_equal(check_fake(&out), 1);
    assert_non_null(strstr(out, "obj/shim/x.o: uses es_planted_fn, defined in "));
    assert_non_null(strstr(out, "obj/intercept/y.o: shim/ may not use intercept/"));
    assert_non_null(strstr(out, "(0 includes, 1 symbols)"));
    free(out);
}

/* The spine may leave undefined what shim/hooks.h and shim/move.h declare,
 * read from those headers: with the declaration gone, the same objects fail. */
static void test_seams_from_headers(void **state)
{
    (void)state;
    char *out;
    fake_tree("#include <stddef.h>\n/* the hook */\nint es_fake_hook(int n);\n",
              "void es_fake_seam(void);\n");
    write_file("shim/x.c", "int es_fake_hook(int n);\nvoid es_fake_seam(void);\n"
                           "int es_x(void) { es_fake_seam(); return es_fake_hook(1); }\n");
    write_file("intercept/y.c", "int es_fake_hook(int n) { return n; }\n"
                                "void es_fake_seam(void) { }\n");
    compile("shim/x.c");
    compile("intercept/y.c");
    assert_int_equal(check_fake(&out), 0);
    free(out);

    fake_tree("int es_other_hook(int n);\n", "void es_fake_seam(void);\n");
    assert_int_equal(check_fake(&out), 1);
    assert_non_null(strstr(out, "uses es_fake_hook, defined in "));
    assert_null(strstr(out, "uses es_fake_seam"));
    free(out);

    fake_tree("int es_fake_hook(int n);\n", "void es_other_seam(void);\n");
    assert_int_equal(check_fake(&out), 1);
    assert_non_null(strstr(out, "uses es_fake_seam, defined in "));
    assert_null(strstr(out, "uses es_fake_hook"));
    free(out);
}

/* move/ reaches the driver only through move/drv.h: an es_real_* reference
 * fails wherever it is defined, and so does a name of shim/real.h, though
 * move/ may use the rest of shim/. */
static void test_move_real(void **state)
{
    (void)state;
    char *out;
    fake_tree("int es_fake_hook(int n);\n", "void es_fake_seam(void);\n");
    write_file("shim/r.c", "int es_real_cuda;\nint es_cfg_fake;\nint es_state_fake;\n");
    compile("shim/r.c");
    write_file("move/z.c", "extern int es_cfg_fake;\nint es_z(void) { return es_cfg_fake; }\n");
    compile("move/z.c");
    assert_int_equal(check_fake(&out), 0);
    free(out);
    write_file("move/z.c", "extern int es_real_cuda;\nint es_z(void) { return es_real_cuda; }\n");
    compile("move/z.c");
    assert_int_equal(check_fake(&out), 1);
    assert_non_null(strstr(out, "obj/move/z.o: references es_real_cuda: move/ must not "
                                "reference es_real_*"));
    assert_non_null(strstr(out, "1 violations"));
    free(out);
    /* defined nowhere among the objects: still refused */
    write_file("shim/r.c", "int es_cfg_fake;\nint es_state_fake;\n");
    compile("shim/r.c");
    assert_int_equal(check_fake(&out), 1);
    assert_non_null(strstr(out, "references es_real_cuda: move/ must not"));
    free(out);
    /* a name of shim/real.h that no pattern catches */
    write_file("move/z.c", "extern int es_state_fake;\n"
                           "int es_z(void) { return es_state_fake; }\n");
    compile("move/z.c");
    assert_int_equal(check_fake(&out), 1);
    assert_non_null(strstr(out, "obj/move/z.o: uses es_state_fake, defined in "));
    assert_non_null(strstr(out, "obj/shim/r.o: move/ may not use the names of shim/real.h"));
    free(out);
}

/* No objects: a setup error (2), not a pass and not a violation. */
static void test_no_objects(void **state)
{
    (void)state;
    char *out;
    fake_tree("int es_fake_hook(int n);\n", "void es_fake_seam(void);\n");
    write_file("build/obj/shim/x.d", "\n"); /* a build directory, no objects */
    assert_int_equal(check_fake(&out), 2);
    assert_non_null(strstr(out, "no objects"));
    free(out);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_help),
        cmocka_unit_test(test_real_tree_passes),
        cmocka_unit_test_setup_teardown(test_planted_include, setup_tmp, teardown_tmp),
        cmocka_unit_test_setup_teardown(test_unknown_folder, setup_tmp, teardown_tmp),
        cmocka_unit_test_setup_teardown(test_planted_symbol, setup_tmp, teardown_tmp),
        cmocka_unit_test_setup_teardown(test_seams_from_headers, setup_tmp, teardown_tmp),
        cmocka_unit_test_setup_teardown(test_move_real, setup_tmp, teardown_tmp),
        cmocka_unit_test_setup_teardown(test_no_objects, setup_tmp, teardown_tmp),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
