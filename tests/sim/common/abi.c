/* ELF interface check of simcuda's libraries against NVIDIA's (abi.h). */
#include "tests/sim/common/abi.h"

#include "tests/harness.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Runs cmd; 0 when it exited 0 and printed nothing, else -1 with its output
 * (prefixed by what) in why. */
static int run_quiet(const char *cmd, const char *what, char *why, size_t len)
{
    es_proc_result_t r = {0};
    int rc = -1;
    if (es_run_sh(cmd, NULL, 60, &r) != 0) {
        snprintf(why, len, "%s: cannot run the check", what);
        goto out;
    }
    if (r.status != 0 || r.out_len) {
        snprintf(why, len, "%s (status %d):\n%s", what, r.status, r.out ? r.out : "");
        goto out;
    }
    rc = 0;
out:
    es_proc_result_free(&r);
    return rc;
}

int sim_abi_check(const char *rel, const char *soname, const char *version, char *why,
                  size_t len)
{
    char cmd[8192], nv[1024];
    const char *lib = es_build_path(rel);
    const char *cuda = getenv("CUDA_HOME");
    int rc = -1;
    why[0] = '\0';
    snprintf(cmd, sizeof(cmd),
             "readelf -d '%s' | grep -q 'Library soname: \\[%s\\]' || echo 'soname is not %s'; "
             "readelf -d '%s' | grep NEEDED | grep libcuda || true",
             lib, soname, soname, lib);
    if (run_quiet(cmd, "soname / NEEDED", why, len))
        goto out;
    /* No driver function is imported: every one comes from cuGetProcAddress
     * (the only path a shim must then catch besides dlsym). */
    snprintf(cmd, sizeof(cmd), "nm -D --undefined-only '%s' | awk '{print $2}' | grep '^cu' || true",
             lib);
    if (run_quiet(cmd, "driver functions imported by name", why, len))
        goto out;
    /* The version definition itself shows as an absolute symbol named after
     * the version: it is not an export. */
    if (version)
        snprintf(cmd, sizeof(cmd),
                 "nm -D --defined-only '%s' | awk '{print $3}' | grep -v '@@%s$' "
                 "| grep -vx '%s' || true",
                 lib, version, version);
    else
        snprintf(cmd, sizeof(cmd), "nm -D --defined-only '%s' | awk '{print $3}' | grep '@' || true",
                 lib);
    if (run_quiet(cmd, "exports without NVIDIA's symbol version", why, len))
        goto out;
    snprintf(nv, sizeof(nv), "%s/lib64/%s", cuda && *cuda ? cuda : "/usr/local/cuda", soname);
    if (access(nv, R_OK) == 0) {
        snprintf(cmd, sizeof(cmd),
                 "comm -23 <(nm -D --defined-only '%s' | awk '{print $3}' | sort -u) "
                 "<(nm -D --defined-only '%s' | awk '{print $3}' | sort -u)",
                 lib, nv);
        if (run_quiet(cmd, "exports (name@version) NVIDIA's library lacks", why, len))
            goto out;
    }
    rc = 0;
out:
    return rc;
}
