/* easyscale-ctl verify: the checksum harness (controller/verify.h). Builds
 * or reads a matrix of configurations, runs the training command once per
 * configuration under `easyscale-ctl run` (this same binary), takes each
 * run's checksum from its output, judges the matrix, and prints a table
 * (or JSON). Exit status: 0 the matrix passes, 1 it does not, 2 usage. */
#include "controller/verify.h"
#include "controller/digest.h"

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <getopt.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/* ---- the matrix text ----------------------------------------------------------------- */

static void cfg_free(es_vcfg_t *c)
{
    free(c->gpus);
    free(c->schedule);
    free(c->est_mem);
    free(c->desc);
    for (int i = 0; i < c->nenv; i++)
        free(c->env[i]);
    memset(c, 0, sizeof(*c));
}

void es_vmatrix_free(es_vmatrix_t *m)
{
    for (int i = 0; i < m->n; i++)
        cfg_free(&m->c[i]);
    m->n = 0;
}

static int name_ok(const char *s)
{
    size_t n = strlen(s);
    if (n == 0 || n >= ES_VCFG_NAME_MAX)
        return 0;
    for (; *s; s++)
        if (!isalnum((unsigned char)*s) && !strchr("-_.+", *s))
            return 0;
    return 1;
}

static int var_ok(const char *s, size_t n)
{
    if (n == 0 || !(isalpha((unsigned char)s[0]) || s[0] == '_'))
        return 0;
    for (size_t i = 1; i < n; i++)
        if (!isalnum((unsigned char)s[i]) && s[i] != '_')
            return 0;
    return 1;
}

/* Next token of a line: runs of non-blanks, double quotes group blanks
 * (and are removed). Returns a malloc'ed token, NULL at the end of the
 * line; *bad on an unterminated quote or no memory. */
static char *next_token(const char **pp, int *bad)
{
    const char *p = *pp;
    while (*p == ' ' || *p == '\t')
        p++;
    if (!*p) {
        *pp = p;
        return NULL;
    }
    size_t cap = strlen(p) + 1, n = 0;
    char *t = malloc(cap);
    if (!t) {
        *bad = 1;
        return NULL;
    }
    int q = 0;
    for (; *p && (q || (*p != ' ' && *p != '\t')); p++) {
        if (*p == '"') {
            q = !q;
            continue;
        }
        t[n++] = *p;
    }
    t[n] = '\0';
    *pp = p;
    if (q) {
        free(t);
        *bad = 1;
        return NULL;
    }
    return t;
}

/* One line into c. Returns 0, 1 (blank or comment) or -EINVAL with err. */
static int parse_line(const char *line, es_vcfg_t *c, char *err, size_t errlen)
{
    const char *p = line;
    int bad = 0, rc = -EINVAL;
    char *kind = NULL, *tok = NULL;
    while (*p == ' ' || *p == '\t')
        p++;
    if (!*p || *p == '#')
        return 1;
    memset(c, 0, sizeof(*c));
    c->level = 1;
    kind = next_token(&p, &bad);
    if (!kind)
        goto out;
    if (strcmp(kind, "check") == 0)
        c->role = ES_VCFG_CHECK;
    else if (strcmp(kind, "control") == 0)
        c->role = ES_VCFG_CONTROL;
    else {
        snprintf(err, errlen, "\"%s\" is neither check nor control", kind);
        goto out;
    }
    tok = next_token(&p, &bad);
    if (!tok || !name_ok(tok)) {
        snprintf(err, errlen, "a configuration needs a NAME (letters, digits, - _ . +; at most %d)",
                 ES_VCFG_NAME_MAX - 1);
        goto out;
    }
    strcpy(c->name, tok);
    free(tok);
    while ((tok = next_token(&p, &bad))) {
        char *eq = strchr(tok, '=');
        const char *v = eq ? eq + 1 : NULL;
        if (eq)
            *eq = '\0';
        char **slot = NULL;
        if (!v) {
            if (strcmp(tok, "no-time-slicing") == 0)
                c->no_tslice = 1;
            else if (strcmp(tok, "shim-none") == 0)
                c->shim_none = 1;
            else if (strcmp(tok, "shim-off") == 0)
                c->shim_off = 1;
            else if (strcmp(tok, "moves") == 0)
                c->moves = 1;
            else {
                snprintf(err, errlen, "unknown flag \"%s\"", tok);
                goto out;
            }
        } else if (strcmp(tok, "level") == 0) {
            if (strcmp(v, "d1") == 0)
                c->level = 1;
            else if (strcmp(v, "d2") == 0)
                c->level = 2;
            else {
                snprintf(err, errlen, "level=%s: d1 or d2", v);
                goto out;
            }
        } else if (strcmp(tok, "env") == 0) {
            const char *e = strchr(v, '=');
            if (!e || !var_ok(v, (size_t)(e - v))) {
                snprintf(err, errlen, "env=%s: VAR=VALUE", v);
                goto out;
            }
            if (c->nenv == ES_VCFG_MAX_ENV) {
                snprintf(err, errlen, "more than %d env=", ES_VCFG_MAX_ENV);
                goto out;
            }
            if (!(c->env[c->nenv] = strdup(v)))
                goto oom;
            c->nenv++;
        } else if (strcmp(tok, "gpus") == 0) {
            slot = &c->gpus;
        } else if (strcmp(tok, "schedule") == 0) {
            slot = &c->schedule;
        } else if (strcmp(tok, "est-memory") == 0) {
            uint64_t sz;
            if (es_ctl_parse_size(v, &sz) < 0 || sz == 0) {
                snprintf(err, errlen, "est-memory=%s: a size (256M, 8G)", v);
                goto out;
            }
            slot = &c->est_mem;
        } else if (strcmp(tok, "ests") == 0) {
            long n;
            if (es_ctl_parse_long(v, 1, ES_CTL_MAX_ESTS, &n) < 0) {
                snprintf(err, errlen, "ests=%s: 1 to %d", v, ES_CTL_MAX_ESTS);
                goto out;
            }
            c->ests = (int)n;
        } else if (strcmp(tok, "desc") == 0) {
            slot = &c->desc;
        } else {
            snprintf(err, errlen, "unknown key \"%s\"", tok);
            goto out;
        }
        if (slot) {
            if (!*v) {
                snprintf(err, errlen, "%s= needs a value", tok);
                goto out;
            }
            free(*slot);
            if (!(*slot = strdup(v)))
                goto oom;
            for (const char *q = v; *q; q++)
                if ((unsigned char)*q < 0x20 || *q == 0x7f) {
                    snprintf(err, errlen, "%s= has a control character", tok);
                    goto out;
                }
        }
        free(tok);
        tok = NULL;
    }
    if (bad) {
        snprintf(err, errlen, "unterminated quote");
        goto out;
    }
    if (c->shim_none && c->shim_off) {
        snprintf(err, errlen, "shim-none and shim-off: one or the other");
        goto out;
    }
    rc = 0;
    goto out;
oom:
    snprintf(err, errlen, "out of memory");
out:
    free(kind);
    free(tok);
    if (rc < 0)
        cfg_free(c);
    return rc;
}

int es_vmatrix_parse(const char *text, const char *origin, es_vmatrix_t *m, char *err,
                     size_t errlen)
{
    int lineno = 0, rc = 0;
    const char *p = text;
    memset(m, 0, sizeof(*m));
    while (*p) {
        const char *nl = strchr(p, '\n');
        size_t len = nl ? (size_t)(nl - p) : strlen(p);
        char line[4096], why[512] = "";
        lineno++;
        if (len >= sizeof(line)) {
            snprintf(err, errlen, "%s:%d: line too long", origin, lineno);
            rc = -EINVAL;
            break;
        }
        memcpy(line, p, len);
        line[len] = '\0';
        p = nl ? nl + 1 : p + len;
        if (m->n == ES_VCFG_MAX) {
            int blank = 1;
            for (char *q = line; *q && blank; q++)
                blank = *q == ' ' || *q == '\t';
            if (!blank && line[strspn(line, " \t")] != '#') {
                snprintf(err, errlen, "%s:%d: more than %d configurations", origin, lineno,
                         ES_VCFG_MAX);
                rc = -EINVAL;
                break;
            }
            continue;
        }
        int r = parse_line(line, &m->c[m->n], why, sizeof(why));
        if (r < 0) {
            snprintf(err, errlen, "%s:%d: %s", origin, lineno, why);
            rc = -EINVAL;
            break;
        }
        if (r == 1)
            continue;
        for (int i = 0; i < m->n; i++)
            if (strcmp(m->c[i].name, m->c[m->n].name) == 0) {
                snprintf(err, errlen, "%s:%d: a second configuration named %s", origin, lineno,
                         m->c[i].name);
                cfg_free(&m->c[m->n]);
                rc = -EINVAL;
                break;
            }
        if (rc)
            break;
        m->n++;
    }
    if (rc == 0 && m->n == 0) {
        snprintf(err, errlen, "%s: no configuration", origin);
        rc = -EINVAL;
    }
    if (rc)
        es_vmatrix_free(m);
    return rc;
}

static void put_value(es_ctl_buf_t *b, const char *key, const char *v)
{
    int quote = strpbrk(v, " \t#") != NULL;
    es_ctl_buf_printf(b, " %s=%s%s%s", key, quote ? "\"" : "", v, quote ? "\"" : "");
}

void es_vcfg_format(const es_vcfg_t *c, es_ctl_buf_t *b)
{
    es_ctl_buf_printf(b, "%-7s %-14s level=d%d", c->role == ES_VCFG_CHECK ? "check" : "control",
                      c->name, c->level);
    if (c->gpus)
        put_value(b, "gpus", c->gpus);
    for (int i = 0; i < c->nenv; i++)
        put_value(b, "env", c->env[i]);
    if (c->schedule)
        put_value(b, "schedule", c->schedule);
    if (c->est_mem)
        put_value(b, "est-memory", c->est_mem);
    if (c->ests)
        es_ctl_buf_printf(b, " ests=%d", c->ests);
    if (c->no_tslice)
        es_ctl_buf_printf(b, " no-time-slicing");
    if (c->shim_none)
        es_ctl_buf_printf(b, " shim-none");
    if (c->shim_off)
        es_ctl_buf_printf(b, " shim-off");
    if (c->moves)
        es_ctl_buf_printf(b, " moves");
    if (c->desc)
        put_value(b, "desc", c->desc);
    es_ctl_buf_printf(b, "\n");
}

/* ---- the built-in matrix ------------------------------------------------------------- */

/* "0,1,2" from ordinals. */
static void ordinals(char *out, size_t len, const es_ctl_gpu_t *g, const int *idx, int n)
{
    size_t o = 0;
    out[0] = '\0';
    for (int i = 0; i < n && o < len; i++)
        o += (size_t)snprintf(out + o, len - o, "%s%d", i ? "," : "", g[idx[i]].ordinal);
}

int es_vmatrix_builtin(const es_ctl_gpu_t *g, int ngpus, const es_vmatrix_opts_t *o,
                       es_ctl_buf_t *b)
{
    if (ngpus <= 0)
        return -ENOENT;
    /* group the GPUs by model, in the order they first appear */
    char models[ES_CTL_MAX_GPUS][16];
    int nmodels = 0, count[ES_CTL_MAX_GPUS] = { 0 }, of[ES_CTL_MAX_GPUS];
    for (int i = 0; i < ngpus; i++) {
        const char *m = g[i].model[0] ? g[i].model : "unknown";
        int k = 0;
        while (k < nmodels && strcmp(models[k], m) != 0)
            k++;
        if (k == nmodels)
            snprintf(models[nmodels++], sizeof(models[0]), "%s", m);
        of[i] = k;
        count[k]++;
    }
    int A = 0;
    for (int k = 1; k < nmodels; k++)
        if (count[k] > count[A])
            A = k;
    int a[ES_CTL_MAX_GPUS], na = 0;
    for (int i = 0; i < ngpus; i++)
        if (of[i] == A)
            a[na++] = i;
    int N = o->nests, K = na < N ? na : N;
    char spec[512], spec2[512], half[512], one[512];
    ordinals(spec, sizeof(spec), g, a, K);
    ordinals(one, sizeof(one), g, a, 1);
    const char *ma = models[A];
    long S = o->job_steps;

    es_ctl_buf_printf(b, "# easyscale-ctl verify: %d ESTs; %d GPU%s", N, ngpus,
                      ngpus == 1 ? "" : "s");
    for (int k = 0; k < nmodels; k++)
        es_ctl_buf_printf(b, "%s %d %s", k ? "," : ":", count[k], models[k]);
    es_ctl_buf_printf(b, "\n# d1: every check must give the same checksum; controls must differ\n");
    es_ctl_buf_printf(b, "check   d1-%don%d level=d1 gpus=%s desc=\"%d ESTs on %d %s\"\n", N, K,
                      spec, N, K, ma);
    int h = K / 2;
    if (!o->reduced && h >= 2 && h < K) {
        ordinals(half, sizeof(half), g, a, h);
        es_ctl_buf_printf(b, "check   d1-%don%d level=d1 gpus=%s desc=\"%d ESTs on %d %s\"\n", N,
                          h, half, N, h, ma);
    }
    if (K > 1)
        es_ctl_buf_printf(b, "check   d1-%don1 level=d1 gpus=%s desc=\"%d ESTs on 1 %s\"\n", N,
                          one, N, ma);
    if (K > 1) {
        /* the same GPUs, numbered the other way round */
        int rev[ES_CTL_MAX_GPUS];
        for (int i = 0; i < K; i++)
            rev[i] = a[K - 1 - i];
        ordinals(spec2, sizeof(spec2), g, rev, K);
        es_ctl_buf_printf(b, "check   d1-order level=d1 gpus=%s desc=\"%d ESTs on %d %s in "
                          "reverse order\"\n", spec2, N, K, ma);
    }
    /* moves: scale events, swap out and back, migrations, time-slicing */
    /* (a schedule's GPUs are positions in the configuration's gpus= list) */
    if (S > 0 && K > 1) {
        int hh = h >= 1 ? h : 1;
        es_ctl_buf_printf(b,
                          "check   d1-scale level=d1 gpus=%s schedule=\"step %ld scale 0-%d; step "
                          "%ld scale 0; step %ld scale all\" moves desc=\"%d ESTs: %d %s, then "
                          "%d, 1, %d again\"\n",
                          spec, S / 6, hh - 1, S / 3, S / 2, N, K, ma, hh, K);
    }
    if (S > 0 && !o->reduced) {
        /* a parked EST holds the others at the next collective: it comes
         * back at the same step (the ESTs wait there for both events) */
        es_ctl_buf_printf(b,
                          "check   d1-swap level=d1 gpus=%s schedule=\"step %ld swap-out %d; step %ld "
                          "swap-in %d 0\" moves desc=\"%d ESTs on 1 %s, EST %d swapped out to host "
                          "memory and back\"\n",
                          one, S / 3, N - 1, S / 3, N - 1, N, ma, N - 1);
    }
    if (S > 0 && K > 1) {
        int two[2] = { a[0], a[1] };
        ordinals(spec2, sizeof(spec2), g, two, 2);
        es_ctl_buf_printf(b, "check   d1-migrate level=d1 gpus=%s schedule=\"", spec2);
        /* three, a sixth of the job apart, all in its first half (the
         * ESTs wait at each event's step until it is done, so they happen
         * there however short the job) */
        for (int e = 1; e <= 3; e++)
            es_ctl_buf_printf(b, "%sstep %ld migrate %d %d", e > 1 ? "; " : "", S * e / 6,
                              (e - 1) % N, e % 2);
        es_ctl_buf_printf(b, "\" moves desc=\"%d ESTs on 2 %s, one migrating every %ld steps\"\n",
                          N, ma, S / 6);
    }
    /* time-slicing: the shim's rotation (one EST resident at a time, each
     * parked in host memory at every collective), on one GPU */
    es_ctl_buf_printf(b,
                      "check   d1-tslice level=d1 gpus=%s env=EASYSCALE_TIME_SLICE=on "
                      "est-memory=%lluK moves desc=\"%d ESTs time-sliced on 1 %s with memory "
                      "for one (one resident at a time)\"\n",
                      one, (unsigned long long)(g[a[0]].mem >> 10), N, ma);
    /* d2: every model of the machine, canonical device = all of them */
    if (nmodels > 1) {
        char canon[256];
        size_t co = 0;
        canon[0] = '\0';
        for (int k = 0; k < nmodels; k++)
            co += (size_t)snprintf(canon + co, sizeof(canon) - co, "%s%s", k ? "," : "",
                                   models[k]);
        es_ctl_buf_printf(b, "# d2: the same job across GPU models (canonical device %s)\n",
                          canon);
        es_ctl_buf_printf(b,
                          "check   d2-%s level=d2 gpus=%s env=EASYSCALE_CANONICAL_DEVICE=%s "
                          "desc=\"%d ESTs on %d %s\"\n",
                          ma, spec, canon, N, K, ma);
        for (int k = 0; k < nmodels; k++) {
            if (k == A)
                continue;
            int bi[ES_CTL_MAX_GPUS], nb = 0;
            for (int i = 0; i < ngpus; i++)
                if (of[i] == k && nb < N)
                    bi[nb++] = i;
            if (!o->reduced) {
                ordinals(spec2, sizeof(spec2), g, bi, nb);
                es_ctl_buf_printf(b,
                                  "check   d2-%s level=d2 gpus=%s env=EASYSCALE_CANONICAL_DEVICE=%s "
                                  "desc=\"%d ESTs on %d %s\"\n",
                                  models[k], spec2, canon, N, nb, models[k]);
            }
            /* a mix: half of K from A, the rest from this model */
            int mix[ES_CTL_MAX_GPUS], nm = 0, ka = K / 2 > 0 ? K / 2 : 1;
            for (int i = 0; i < ka; i++)
                mix[nm++] = a[i];
            for (int i = 0; i < nb && nm < (K > 1 ? K : 2); i++)
                mix[nm++] = bi[i];
            ordinals(spec2, sizeof(spec2), g, mix, nm);
            es_ctl_buf_printf(b,
                              "check   d2-mix-%s level=d2 gpus=%s env=EASYSCALE_CANONICAL_DEVICE=%s "
                              "desc=\"%d ESTs on %d %s + %d %s\"\n",
                              models[k], spec2, canon, N, ka, ma, nm - ka, models[k]);
            if (o->reduced)
                break;
        }
    }
    es_ctl_buf_printf(b, "# negative controls: without EasyScale the checksum must differ\n");
    if (K >= N) /* NCCL takes one rank per GPU */
        es_ctl_buf_printf(b,
                          "control off level=d1 gpus=%s shim-none desc=\"%d ESTs on %d %s, "
                          "libeasyscale.so not loaded\"\n",
                          spec, N, K, ma);
    if (K >= N)
        es_ctl_buf_printf(b,
                          "control nccl level=d1 gpus=%s env=EASYSCALE_COLLECTIVES=nccl "
                          "desc=\"%d ESTs on %d %s, NCCL's own collectives\"\n",
                          spec, N, K, ma);
    /* elastic training without EasyScale: the job shrinks to its GPUs */
    int ke = K < N ? K : h;
    if (ke >= 1 && ke < N) {
        ordinals(half, sizeof(half), g, a, ke);
        es_ctl_buf_printf(b,
                          "control elastic level=d1 gpus=%s ests=%d shim-none desc=\"the job "
                          "shrunk to %d worker%s on %d %s, libeasyscale.so not loaded\"\n",
                          half, ke, ke, ke == 1 ? "" : "s", ke, ma);
    }
    return b->oom ? -ENOMEM : 0;
}

int es_verify_gpus_visible(const char *list, const es_ctl_gpu_t *g, int ng, char *out,
                           size_t len, char *err, size_t errlen)
{
    char *dup = strdup(list), *save = NULL;
    int used[ES_CTL_MAX_GPUS] = { 0 }, rc = 0, n = 0;
    size_t o = 0;
    if (!dup)
        return -ENOMEM;
    out[0] = '\0';
    for (char *t = strtok_r(dup, ",", &save); t && rc == 0; t = strtok_r(NULL, ",", &save)) {
        int lo, hi;
        char *dash = strncmp(t, "GPU-", 4) != 0 ? strchr(t, '-') : NULL;
        if (dash) {
            long a, b;
            *dash = '\0';
            if (es_ctl_parse_long(t, 0, ES_CTL_MAX_GPUS - 1, &a) < 0 ||
                es_ctl_parse_long(dash + 1, 0, ES_CTL_MAX_GPUS - 1, &b) < 0 || a > b) {
                snprintf(err, errlen, "gpus=%s: bad range (a-b, a <= b)", list);
                rc = -EINVAL;
                break;
            }
            lo = (int)a;
            hi = (int)b;
        } else {
            lo = hi = -1;
        }
        for (int v = lo; rc == 0 && (dash ? v <= hi : v == -1); v++) {
            char tok[64];
            if (dash)
                snprintf(tok, sizeof(tok), "%d", v);
            int i = es_ctl_gpu_lookup(g, ng, dash ? tok : t);
            if (i < 0) {
                snprintf(err, errlen, "gpus=%s: %s GPU \"%s\" (%d visible)", list,
                         i == -EINVAL ? "bad" : "no such", dash ? tok : t, ng);
                rc = i == -EINVAL ? -EINVAL : -ENOENT;
                break;
            }
            if (used[i]) {
                snprintf(err, errlen, "gpus=%s: GPU %d listed twice", list, g[i].ordinal);
                rc = -EINVAL;
                break;
            }
            used[i] = 1;
            int w = snprintf(out + o, len - o, "%s%s", n++ ? "," : "", g[i].uuid);
            if (w < 0 || (size_t)w >= len - o) {
                snprintf(err, errlen, "gpus=%s: too many GPUs", list);
                rc = -EINVAL;
                break;
            }
            o += (size_t)w;
            if (!dash)
                break;
        }
    }
    free(dup);
    return rc;
}

/* ---- checksums and the judgement ---------------------------------------------------- */

int es_verify_checksum(const char *text, size_t len, const regex_t *re, char *sum,
                       size_t sumlen, int *nmatch, int *ndistinct)
{
    char first[ES_VSUM_MAX * 2] = "", other[16][ES_VSUM_MAX];
    int nother = 0;
    *nmatch = 0;
    *ndistinct = 0;
    const char *p = text, *end = text + len;
    char line[8192];
    while (p < end) {
        const char *nl = memchr(p, '\n', (size_t)(end - p));
        size_t l = nl ? (size_t)(nl - p) : (size_t)(end - p);
        size_t cl = l < sizeof(line) - 1 ? l : sizeof(line) - 1;
        memcpy(line, p, cl);
        line[cl] = '\0';
        p += l + (nl ? 1 : 0);
        regmatch_t mt[2];
        if (regexec(re, line, 2, mt, 0) != 0)
            continue;
        int k = re->re_nsub >= 1 && mt[1].rm_so >= 0 ? 1 : 0;
        size_t ml = (size_t)(mt[k].rm_eo - mt[k].rm_so);
        char v[ES_VSUM_MAX];
        if (ml >= sizeof(v))
            ml = sizeof(v) - 1;
        memcpy(v, line + mt[k].rm_so, ml);
        v[ml] = '\0';
        if (ml == 0)
            continue;
        if (*nmatch == 0) {
            snprintf(first, sizeof(first), "%s", v);
            *ndistinct = 1;
        } else if (strcmp(v, first) != 0) {
            int seen = 0;
            for (int i = 0; i < nother && !seen; i++)
                seen = strcmp(other[i], v) == 0;
            if (!seen) {
                if (nother < 16)
                    snprintf(other[nother++], sizeof(other[0]), "%s", v);
                (*ndistinct)++;
            }
        }
        (*nmatch)++;
    }
    if (*nmatch == 0) {
        if (sumlen)
            sum[0] = '\0';
        return -ENOENT;
    }
    snprintf(sum, sumlen, "%s", first);
    return 0;
}

int es_verify_judge(const es_vmatrix_t *m, es_vresult_t *r, char *summary, size_t len)
{
    int ref[3] = { -1, -1, -1 }, pass = 1, nchecks[3] = { 0 }, nmatch[3] = { 0 };
    int controls_ran = 0, controls_differ = 0, skipped = 0, bad_checks = 0, bad_controls = 0;
    for (int i = 0; i < m->n; i++) {
        r[i].reference = 0;
        r[i].good = 0;
        if (m->c[i].role == ES_VCFG_CHECK && r[i].state == ES_VRUN_OK && r[i].ndistinct == 1 &&
            ref[m->c[i].level] < 0) {
            ref[m->c[i].level] = i;
            r[i].reference = 1;
        }
    }
    for (int i = 0; i < m->n; i++) {
        const es_vcfg_t *c = &m->c[i];
        es_vresult_t *x = &r[i];
        int lv = c->level, rf = ref[lv];
        if (x->state == ES_VRUN_NOT_RUN) {
            snprintf(x->verdict, sizeof(x->verdict), "skipped");
            x->good = 1;
            skipped++;
            continue;
        }
        if (c->role == ES_VCFG_CHECK)
            nchecks[lv]++;
        if (x->state != ES_VRUN_OK) {
            snprintf(x->verdict, sizeof(x->verdict), "FAILED");
        } else if (x->ndistinct > 1) {
            snprintf(x->verdict, sizeof(x->verdict), "RANKS DISAGREE");
        } else if (c->role == ES_VCFG_CHECK) {
            if (x->reference) {
                snprintf(x->verdict, sizeof(x->verdict), "reference");
                x->good = 1;
                nmatch[lv]++;
            } else if (strcmp(x->sum, r[rf].sum) == 0) {
                snprintf(x->verdict, sizeof(x->verdict), "match");
                x->good = 1;
                nmatch[lv]++;
            } else {
                snprintf(x->verdict, sizeof(x->verdict), "MISMATCH");
            }
        } else if (rf < 0) {
            snprintf(x->verdict, sizeof(x->verdict), "no reference");
        } else if (strcmp(x->sum, r[rf].sum) != 0) {
            snprintf(x->verdict, sizeof(x->verdict), "differs (expected)");
            x->good = 1;
        } else {
            snprintf(x->verdict, sizeof(x->verdict), "SAME AS REFERENCE");
        }
        if (c->role == ES_VCFG_CONTROL) {
            controls_ran++;
            controls_differ += x->good;
            bad_controls += !x->good;
        } else {
            bad_checks += !x->good;
        }
        if (!x->good)
            pass = 0;
    }
    size_t o = 0;
    if (summary && len)
        summary[0] = '\0';
    for (int lv = 1; lv <= 2; lv++) {
        if (!nchecks[lv])
            continue;
        if (ref[lv] < 0) {
            pass = 0;
            if (summary && o < len)
                o += (size_t)snprintf(summary + o, len - o, "d%d: no check gave a checksum; ", lv);
            continue;
        }
        if (summary && o < len)
            o += (size_t)snprintf(summary + o, len - o, "d%d: %d of %d checks give %.16s; ", lv,
                                  nmatch[lv], nchecks[lv], r[ref[lv]].sum);
    }
    if (controls_ran == 0)
        pass = 0;
    if (summary && o < len)
        o += (size_t)snprintf(summary + o, len - o, "controls: %d of %d differ%s; ",
                              controls_differ, controls_ran,
                              controls_ran == 0 ? " (none ran: nothing shows a difference would "
                                                  "be seen)"
                                                : "");
    if (summary && o < len && skipped)
        o += (size_t)snprintf(summary + o, len - o, "%d skipped; ", skipped);
    if (summary && o < len)
        snprintf(summary + o, len - o, "%s", pass ? "PASS" : "FAIL");
    (void)bad_checks;
    (void)bad_controls;
    return pass;
}

/* ---- running the configurations ------------------------------------------------------- */

static const char *const usage =
    "usage: easyscale-ctl verify [--ests N] [--steps N] [--calls-per-step K]\n"
    "           [--matrix FILE | --reduced] [--only NAMES] [--pattern REGEX] [--json]\n"
    "           [--list] [--workdir DIR] [--timeout SECONDS] [--no-digest] [-- CMD ARGS...]\n"
    "Runs CMD (default: examples/train.py --steps N --deterministic-kernels) under\n"
    "'easyscale-ctl run --ests N' once per configuration of a matrix (built from the\n"
    "GPUs it sees, or --matrix FILE; --list prints it), takes each run's checksum\n"
    "from its output with REGEX, and prints a table of configuration, checksum,\n"
    "steps/s and verdict (--json: one JSON object). Passes when every check of a\n"
    "determinism level gives the same checksum and every negative control (shim\n"
    "not loaded, NCCL's own collectives) gives another.\n"
    "  --ests N            ESTs of the job (4)\n"
    "  --steps N           training steps: passed to the default trainer (200); with\n"
    "                      CMD, how many it runs (for steps/s and scheduled events)\n"
    "  --calls-per-step K  all-reduce calls per training step (the controller's step\n"
    "                      unit; 3 for the default trainer, else 1)\n"
    "  --matrix FILE       the configurations (format: controller/verify.h, --list)\n"
    "  --reduced           the built-in matrix's short form (what CI runs)\n"
    "  --only NAMES        run only these configurations (comma-separated)\n"
    "  --pattern REGEX     the checksum in the output, POSIX extended; its first\n"
    "                      group when it has one (default 'checksum ([0-9a-f]+)')\n"
    "  --workdir DIR       keep each run's output (NAME.log) and digests there\n"
    "                      (default: a temporary directory, kept when it fails)\n"
    "  --timeout SECONDS   per configuration (600)\n"
    "  --no-digest         no collective digests (EASYSCALE_DIGEST) for explaining\n"
    "                      mismatches\n"
    "Exit status: 0 pass, 1 fail, 2 usage.\n";

typedef struct vrun_ctx {
    const char *self;
    char **visible;      /* per configuration: CUDA_VISIBLE_DEVICES for gpus=, or NULL */
    char **cmd;
    int ncmd;
    int nests;
    long steps;          /* training steps (0: unknown) */
    double timeout;
    const char *workdir;
    int digest;
    int json;
    int moves_avail;     /* -1 unknown, 0 no, 1 yes */
    int no_digest;       /* a difference had no digests to explain it */
} vrun_ctx_t;

static volatile sig_atomic_t g_stop;
static void on_stop(int sig) { g_stop = sig; }

static char *read_all(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    char *buf = NULL;
    size_t n = 0, cap = 0;
    if (!f)
        return NULL;
    for (;;) {
        if (cap - n < 65536) {
            size_t nc = cap ? cap * 2 : 131072;
            char *nb = realloc(buf, nc + 1);
            if (!nb) {
                free(buf);
                fclose(f);
                return NULL;
            }
            buf = nb;
            cap = nc;
        }
        size_t r = fread(buf + n, 1, cap - n, f);
        n += r;
        if (r == 0)
            break;
    }
    fclose(f);
    buf[n] = '\0';
    *len = n;
    return buf;
}

/* The first line of the log that says why the run failed. */
static void failure_line(const char *log, char *out, size_t len)
{
    static const char *const keys[] = { "not supported", "Duplicate GPU", "the job failed",
                                        "did not happen", "failed", "error", "refused", NULL };
    out[0] = '\0';
    for (int k = 0; keys[k] && !out[0]; k++) {
        const char *p = strstr(log, keys[k]);
        if (!p)
            continue;
        const char *b = p, *e = strchr(p, '\n');
        while (b > log && b[-1] != '\n')
            b--;
        size_t l = e ? (size_t)(e - b) : strlen(b);
        /* an EST's line: without run's "[RANK] " and NCCL's "host:pid:tid [dev] NCCL WARN " */
        if (*b == '[') {
            const char *q = b + 1;
            while (q < b + l && isdigit((unsigned char)*q))
                q++;
            if (q < b + l - 1 && q[0] == ']' && q[1] == ' ') {
                l -= (size_t)(q + 2 - b);
                b = q + 2;
            }
        }
        const char *w = strstr(b, "NCCL WARN ");
        if (w && w < b + l) {
            l -= (size_t)(w + 10 - b);
            b = w + 10;
        }
        while (l && (*b == ' ' || *b == '\t')) {
            b++;
            l--;
        }
        if (l >= len)
            l = len - 1;
        memcpy(out, b, l);
        out[l] = '\0';
    }
}

static int write_schedule(const char *path, const char *events)
{
    FILE *f = fopen(path, "w");
    if (!f)
        return -errno;
    for (const char *p = events; *p;) {
        const char *semi = strchr(p, ';');
        size_t l = semi ? (size_t)(semi - p) : strlen(p);
        while (l && (*p == ' ' || *p == '\t')) {
            p++;
            l--;
        }
        fprintf(f, "%.*s\n", (int)l, p);
        p += l + (semi ? 1 : 0);
    }
    return fclose(f) ? -errno : 0;
}

/* Runs one configuration; fills r (state, exit status, log text). */
static void run_config(vrun_ctx_t *x, const es_vcfg_t *c, const char *visible,
                       const regex_t *re, es_vresult_t *r)
{
    char logp[PATH_MAX], schedp[PATH_MAX], digp[PATH_MAX], nests[16];
    char *argv[64 + 256];
    int a = 0;
    memset(r, 0, sizeof(*r));
    if (c->moves && x->moves_avail == 0) {
        r->state = ES_VRUN_NOT_RUN;
        snprintf(r->why, sizeof(r->why), "moves not available (shown by an earlier run)");
        return;
    }
    if (snprintf(logp, sizeof(logp), "%s/%s.log", x->workdir, c->name) >= (int)sizeof(logp) ||
        snprintf(schedp, sizeof(schedp), "%s/%s.schedule", x->workdir, c->name) >=
            (int)sizeof(schedp) ||
        snprintf(digp, sizeof(digp), "%s/%s.digest", x->workdir, c->name) >= (int)sizeof(digp)) {
        r->state = ES_VRUN_FAILED;
        snprintf(r->why, sizeof(r->why), "the work directory's path is too long");
        return;
    }
    snprintf(nests, sizeof(nests), "%d", c->ests ? c->ests : x->nests);
    argv[a++] = (char *)x->self;
    argv[a++] = "run";
    argv[a++] = "--ests";
    argv[a++] = nests;
    argv[a++] = "--determinism";
    argv[a++] = c->shim_off ? "off" : c->level == 2 ? "d2" : "d1";
    argv[a++] = "--progress";
    argv[a++] = "off";
    if (c->schedule) {
        int w = write_schedule(schedp, c->schedule);
        if (w < 0) {
            r->state = ES_VRUN_FAILED;
            snprintf(r->why, sizeof(r->why), "cannot write the schedule: %s", strerror(-w));
            return;
        }
        argv[a++] = "--schedule";
        argv[a++] = schedp;
    }
    if (c->est_mem) {
        argv[a++] = "--est-memory";
        argv[a++] = c->est_mem;
    }
    if (c->no_tslice)
        argv[a++] = "--no-time-slicing";
    if (c->shim_none) {
        argv[a++] = "--shim";
        argv[a++] = "none";
    }
    argv[a++] = "--";
    for (int i = 0; i < x->ncmd && a < (int)(sizeof(argv) / sizeof(argv[0])) - 1; i++)
        argv[a++] = x->cmd[i];
    argv[a] = NULL;

    uint64_t t0 = es_ctl_now_ns();
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    if (pid < 0) {
        r->state = ES_VRUN_FAILED;
        snprintf(r->why, sizeof(r->why), "fork: %s", strerror(errno));
        return;
    }
    if (pid == 0) {
        int fd = open(logp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
        if (fd < 0)
            _exit(126);
        dup2(fd, 1);
        dup2(fd, 2);
        int nul = open("/dev/null", O_RDONLY);
        if (nul >= 0)
            dup2(nul, 0);
        signal(SIGINT, SIG_DFL);
        signal(SIGTERM, SIG_DFL);
        if (visible)
            setenv("CUDA_VISIBLE_DEVICES", visible, 1);
        /* a schedule's steps are seen through heartbeats: make them frequent */
        if (c->schedule)
            setenv("EASYSCALE_HEARTBEAT_MS", "100", 0);
        for (int i = 0; i < c->nenv; i++)
            putenv(c->env[i]);
        if (x->digest && !c->shim_none)
            setenv("EASYSCALE_DIGEST", digp, 1);
        else
            unsetenv("EASYSCALE_DIGEST");
        execv(x->self, argv);
        _exit(127);
    }
    int st = 0, killed = 0;
    uint64_t deadline = t0 + (uint64_t)(x->timeout * 1e9), kill_at = 0;
    for (;;) {
        pid_t w = waitpid(pid, &st, WNOHANG);
        if (w == pid)
            break;
        if (w < 0 && errno != EINTR) {
            st = 0x7f00;
            break;
        }
        uint64_t now = es_ctl_now_ns();
        if ((g_stop || now > deadline) && !killed) {
            kill(pid, SIGTERM); /* run stops its ESTs */
            killed = g_stop ? 2 : 1;
            kill_at = now + 20000000000ull;
        } else if (killed && kill_at && now > kill_at) {
            kill(pid, SIGKILL);
            kill_at = 0;
        }
        struct timespec ts = { 0, 50000000 };
        nanosleep(&ts, NULL);
    }
    r->seconds = (double)(es_ctl_now_ns() - t0) / 1e9;
    r->exit_status = WIFEXITED(st) ? WEXITSTATUS(st) : -(WIFSIGNALED(st) ? WTERMSIG(st) : 1);
    size_t len = 0;
    char *log = read_all(logp, &len);
    if (!log) {
        r->state = ES_VRUN_FAILED;
        snprintf(r->why, sizeof(r->why), "cannot read the run's output (%s.log)", c->name);
        return;
    }
    int have = es_verify_checksum(log, len, re, r->sum, sizeof(r->sum), &r->nmatch,
                                  &r->ndistinct) == 0;
    if (killed) {
        r->state = ES_VRUN_FAILED;
        snprintf(r->why, sizeof(r->why), killed == 2 ? "interrupted" : "timed out after %.0f s",
                 x->timeout);
    } else if (r->exit_status != 0 || !have) {
        char line[400];
        failure_line(log, line, sizeof(line));
        if (c->moves && strstr(log, "not supported")) {
            r->state = ES_VRUN_NOT_RUN;
            r->sum[0] = '\0';
            r->nmatch = r->ndistinct = 0;
            x->moves_avail = 0;
            snprintf(r->why, sizeof(r->why), "moves not available: %s", line);
        } else {
            r->state = ES_VRUN_FAILED;
            if (r->exit_status != 0)
                snprintf(r->why, sizeof(r->why), "exit %d: %s", r->exit_status,
                         line[0] ? line : "(see the log)");
            else
                snprintf(r->why, sizeof(r->why), "no checksum in the output");
        }
    } else {
        r->state = ES_VRUN_OK;
        if (c->moves && c->schedule)
            x->moves_avail = 1;
    }
    free(log);
}

/* ---- output --------------------------------------------------------------------------- */

static double steps_per_s(const vrun_ctx_t *x, const es_vresult_t *r)
{
    return x->steps > 0 && r->state == ES_VRUN_OK && r->seconds > 0 ? (double)x->steps / r->seconds
                                                                      : 0;
}

static void print_table(const vrun_ctx_t *x, const es_vmatrix_t *m, const es_vresult_t *r,
                        const char *summary, int pass)
{
    printf("%-16s %-5s %-7s %-18s %8s %7s  %s\n", "configuration", "level", "kind", "checksum",
           "steps/s", "time", "verdict");
    for (int i = 0; i < m->n; i++) {
        const es_vcfg_t *c = &m->c[i];
        const es_vresult_t *y = &r[i];
        char sps[32] = "-", tm[32] = "-", sum[20] = "-";
        double s = steps_per_s(x, y);
        if (s > 0)
            snprintf(sps, sizeof(sps), "%.1f", s);
        if (y->state != ES_VRUN_NOT_RUN)
            snprintf(tm, sizeof(tm), "%.1fs", y->seconds);
        if (y->sum[0])
            snprintf(sum, sizeof(sum), "%.16s", y->sum);
        printf("%-16s d%-4d %-7s %-18s %8s %7s  %s%s%s\n", c->name, c->level,
               c->role == ES_VCFG_CHECK ? "check" : "control", sum, sps, tm, y->verdict,
               y->why[0] ? ": " : "", y->why);
        if (y->explain[0])
            printf("%-16s %s\n", "", y->explain);
    }
    if (x->no_digest)
        printf("verify: no collective digests to explain the differences (this "
               "libeasyscale.so writes none)\n");
    printf("verify: %s\n", summary);
    if (!pass)
        printf("verify: each run's output is in %s/NAME.log\n", x->workdir);
}

static void print_json(const vrun_ctx_t *x, const es_vmatrix_t *m, const es_vresult_t *r,
                       const char *summary, int pass, const char *pattern)
{
    es_ctl_buf_t b = { 0 };
    es_ctl_buf_printf(&b, "{\"pass\":%s,\"summary\":", pass ? "true" : "false");
    es_ctl_buf_json_str(&b, summary);
    es_ctl_buf_printf(&b, ",\"ests\":%d,\"pattern\":", x->nests);
    es_ctl_buf_json_str(&b, pattern);
    es_ctl_buf_printf(&b, ",\"workdir\":");
    es_ctl_buf_json_str(&b, x->workdir);
    es_ctl_buf_printf(&b, ",\"command\":[");
    for (int i = 0; i < x->ncmd; i++) {
        es_ctl_buf_printf(&b, "%s", i ? "," : "");
        es_ctl_buf_json_str(&b, x->cmd[i]);
    }
    es_ctl_buf_printf(&b, "],\"configs\":[");
    for (int i = 0; i < m->n; i++) {
        const es_vcfg_t *c = &m->c[i];
        const es_vresult_t *y = &r[i];
        es_ctl_buf_printf(&b, "%s{\"name\":", i ? "," : "");
        es_ctl_buf_json_str(&b, c->name);
        es_ctl_buf_printf(&b, ",\"kind\":\"%s\",\"level\":\"d%d\",\"gpus\":",
                          c->role == ES_VCFG_CHECK ? "check" : "control", c->level);
        es_ctl_buf_json_str(&b, c->gpus ? c->gpus : "all");
        es_ctl_buf_printf(&b, ",\"env\":[");
        for (int k = 0; k < c->nenv; k++) {
            es_ctl_buf_printf(&b, "%s", k ? "," : "");
            es_ctl_buf_json_str(&b, c->env[k]);
        }
        es_ctl_buf_printf(&b, "],\"schedule\":");
        if (c->schedule)
            es_ctl_buf_json_str(&b, c->schedule);
        else
            es_ctl_buf_printf(&b, "null");
        es_ctl_buf_printf(&b, ",\"description\":");
        es_ctl_buf_json_str(&b, c->desc ? c->desc : "");
        es_ctl_buf_printf(&b, ",\"state\":\"%s\",\"exit\":%d,\"checksum\":",
                          y->state == ES_VRUN_OK ? "ok" : y->state == ES_VRUN_FAILED ? "failed"
                                                                                     : "skipped",
                          y->exit_status);
        if (y->sum[0])
            es_ctl_buf_json_str(&b, y->sum);
        else
            es_ctl_buf_printf(&b, "null");
        es_ctl_buf_printf(&b, ",\"ranks_agree\":%s,\"seconds\":%.3f,\"steps_per_s\":",
                          y->ndistinct <= 1 ? "true" : "false", y->seconds);
        double s = steps_per_s(x, y);
        if (s > 0)
            es_ctl_buf_printf(&b, "%.3f", s);
        else
            es_ctl_buf_printf(&b, "null");
        es_ctl_buf_printf(&b, ",\"reference\":%s,\"good\":%s,\"verdict\":",
                          y->reference ? "true" : "false", y->good ? "true" : "false");
        es_ctl_buf_json_str(&b, y->verdict);
        es_ctl_buf_printf(&b, ",\"why\":");
        es_ctl_buf_json_str(&b, y->why);
        es_ctl_buf_printf(&b, ",\"divergence\":");
        es_ctl_buf_json_str(&b, y->explain);
        es_ctl_buf_printf(&b, "}");
    }
    es_ctl_buf_printf(&b, "]}\n");
    if (b.p)
        fputs(b.p, stdout);
    es_ctl_buf_free(&b);
}

static int rm_entry(const char *p, const struct stat *s, int f, struct FTW *w)
{
    (void)s;
    (void)f;
    (void)w;
    remove(p);
    return 0;
}

/* The repository root for the default command: $ES_ROOT, else two levels
 * above this binary (build/bin/easyscale-ctl). */
static int default_trainer(const char *self, char *out, size_t len)
{
    const char *root = getenv("ES_ROOT");
    char buf[PATH_MAX];
    if (root && *root) {
        if (snprintf(out, len, "%s/examples/train.py", root) >= (int)len)
            return -ENAMETOOLONG;
    } else {
        snprintf(buf, sizeof(buf), "%s", self);
        for (int up = 0; up < 3; up++) {
            char *s = strrchr(buf, '/');
            if (!s)
                return -ENOENT;
            *s = '\0';
        }
        if (snprintf(out, len, "%s/examples/train.py", buf) >= (int)len)
            return -ENAMETOOLONG;
    }
    return access(out, R_OK) == 0 ? 0 : -ENOENT;
}

int es_ctl_verify_main(int argc, char **argv)
{
    static const struct option opts[] = {
        { "ests", required_argument, NULL, 'n' },    { "steps", required_argument, NULL, 's' },
        { "calls-per-step", required_argument, NULL, 'k' },
        { "matrix", required_argument, NULL, 'm' },  { "reduced", no_argument, NULL, 'r' },
        { "only", required_argument, NULL, 'o' },    { "pattern", required_argument, NULL, 'p' },
        { "json", no_argument, NULL, 'j' },          { "list", no_argument, NULL, 'l' },
        { "workdir", required_argument, NULL, 'w' }, { "timeout", required_argument, NULL, 't' },
        { "no-digest", no_argument, NULL, 'D' },     { "help", no_argument, NULL, 'h' },
        { NULL, 0, NULL, 0 }
    };
    long nests = 4, steps = -1, cps = -1;
    const char *matrix = NULL, *only = NULL, *pattern = "checksum ([0-9a-f]+)", *workdir = NULL;
    int reduced = 0, json = 0, list = 0, c, rc = ES_CTL_EXIT_FAIL, have_re = 0, made_dir = 0;
    double timeout = 600;
    int digest = 1;
    char self[PATH_MAX], trainer[PATH_MAX], steps_s[32], wd[PATH_MAX], err[1024];
    char *mtext = NULL, *defcmd[8];
    es_vmatrix_t *m = NULL;
    es_vresult_t *res = NULL;
    regex_t re;
    es_ctl_buf_t b = { 0 };
    vrun_ctx_t x = { 0 };
    struct sigaction sa_old_int, sa_old_term;
    int sig_set = 0, probe_rc = -ENOENT, ngp = 0;
    es_ctl_gpu_t *gp = NULL;
    char probe_err[512] = "no GPU probe";

    optind = 1;
    opterr = 0;
    while ((c = getopt_long(argc, argv, "+h", opts, NULL)) != -1) {
        switch (c) {
        case 'n':
            if (es_ctl_parse_long(optarg, 1, ES_CTL_MAX_ESTS, &nests) < 0)
                goto usage_bad;
            break;
        case 's':
            if (es_ctl_parse_long(optarg, 1, 100000000, &steps) < 0)
                goto usage_bad;
            break;
        case 'k':
            if (es_ctl_parse_long(optarg, 1, 100000, &cps) < 0)
                goto usage_bad;
            break;
        case 'm': matrix = optarg; break;
        case 'r': reduced = 1; break;
        case 'o': only = optarg; break;
        case 'p': pattern = optarg; break;
        case 'j': json = 1; break;
        case 'l': list = 1; break;
        case 'w': workdir = optarg; break;
        case 't':
            if (es_ctl_parse_seconds(optarg, 1, 86400, &timeout) < 0)
                goto usage_bad;
            break;
        case 'D': digest = 0; break;
        case 'h': fputs(usage, stdout); return ES_CTL_EXIT_OK;
        default:
            es_ctl_err("unknown or incomplete option \"%s\"", argv[optind - 1]);
            fputs(usage, stderr);
            return ES_CTL_EXIT_USAGE;
        }
    }
    if (optind < argc && strcmp(argv[optind - 1], "--") != 0) {
        es_ctl_err("unexpected argument \"%s\" (the command goes after --)", argv[optind]);
        fputs(usage, stderr);
        return ES_CTL_EXIT_USAGE;
    }
    if (matrix && reduced) {
        es_ctl_err("--reduced is a form of the built-in matrix: not with --matrix");
        return ES_CTL_EXIT_USAGE;
    }
    ssize_t sl = readlink("/proc/self/exe", self, sizeof(self) - 1);
    if (sl <= 0) {
        es_ctl_err("cannot find this program (/proc/self/exe)");
        return ES_CTL_EXIT_FAIL;
    }
    self[sl] = '\0';
    int rerr = regcomp(&re, pattern, REG_EXTENDED);
    if (rerr) {
        regerror(rerr, &re, err, sizeof(err));
        es_ctl_err("bad --pattern \"%s\": %s", pattern, err);
        return ES_CTL_EXIT_USAGE;
    }
    have_re = 1;

    x = (vrun_ctx_t){ .self = self, .nests = (int)nests, .timeout = timeout, .digest = digest,
                     .json = json, .moves_avail = -1 };
    if (optind < argc) {
        x.cmd = argv + optind;
        x.ncmd = argc - optind;
        x.steps = steps > 0 ? steps : 0;
        if (cps < 0)
            cps = 1;
    } else {
        if (default_trainer(self, trainer, sizeof(trainer)) < 0) {
            es_ctl_err("no default command (examples/train.py not found from $ES_ROOT or beside "
                       "this binary): give one after --");
            rc = ES_CTL_EXIT_USAGE;
            goto out;
        }
        if (steps < 0)
            steps = 200;
        if (cps < 0)
            cps = 3; /* train.py's 3 gradient buckets at its default --bucket-kb */
        snprintf(steps_s, sizeof(steps_s), "%ld", steps);
        int d = 0;
        defcmd[d++] = "python3";
        defcmd[d++] = trainer;
        defcmd[d++] = "--steps";
        defcmd[d++] = steps_s;
        defcmd[d++] = "--log-every";
        defcmd[d++] = "1000000";
        defcmd[d++] = "--deterministic-kernels";
        defcmd[d] = NULL;
        x.cmd = defcmd;
        x.ncmd = d;
        x.steps = steps;
    }

    m = calloc(1, sizeof(*m));
    gp = calloc(ES_CTL_MAX_GPUS, sizeof(*gp));
    if (!m || !gp) {
        es_ctl_err("out of memory");
        goto out;
    }
    probe_rc = es_ctl_gpus_probe(gp, ES_CTL_MAX_GPUS, &ngp, probe_err, sizeof(probe_err));
    if (matrix) {
        size_t len;
        mtext = read_all(matrix, &len);
        if (!mtext) {
            es_ctl_err("cannot read the matrix %s: %s", matrix, strerror(errno));
            rc = ES_CTL_EXIT_USAGE;
            goto out;
        }
        if (es_vmatrix_parse(mtext, matrix, m, err, sizeof(err)) < 0) {
            es_ctl_err("%s", err);
            rc = ES_CTL_EXIT_USAGE;
            goto out;
        }
    } else {
        if (probe_rc < 0) {
            es_ctl_err("%s", probe_err);
            goto out;
        }
        es_vmatrix_opts_t mo = { .nests = (int)nests,
                                 .job_steps = x.steps > 0 ? x.steps * cps : 0,
                                 .reduced = reduced };
        int br = es_vmatrix_builtin(gp, ngp, &mo, &b);
        if (br < 0) {
            es_ctl_err("no GPU to build a matrix on");
            goto out;
        }
        if (es_vmatrix_parse(b.p, "built-in matrix", m, err, sizeof(err)) < 0) {
            es_ctl_err("%s", err);
            goto out;
        }
    }
    if (only) {
        /* keep the named ones, in matrix order; every name must exist */
        char *dup = strdup(only), *save = NULL;
        int keep[ES_VCFG_MAX] = { 0 }, bad = 0;
        if (!dup) {
            es_ctl_err("out of memory");
            goto out;
        }
        for (char *t = strtok_r(dup, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
            int f = 0;
            for (int i = 0; i < m->n; i++)
                if (strcmp(m->c[i].name, t) == 0)
                    keep[i] = f = 1;
            if (!f) {
                es_ctl_err("--only: no configuration named \"%s\" (--list shows them)", t);
                bad = 1;
            }
        }
        free(dup);
        if (bad) {
            rc = ES_CTL_EXIT_USAGE;
            goto out;
        }
        int n = 0;
        for (int i = 0; i < m->n; i++) {
            if (keep[i])
                m->c[n++] = m->c[i];
            else
                cfg_free(&m->c[i]);
        }
        for (int i = n; i < m->n; i++)
            memset(&m->c[i], 0, sizeof(m->c[i]));
        m->n = n;
    }
    /* every gpus= resolved before anything runs */
    x.visible = calloc((size_t)m->n, sizeof(char *));
    if (!x.visible) {
        es_ctl_err("out of memory");
        goto out;
    }
    for (int i = 0; i < m->n; i++) {
        if (!m->c[i].gpus)
            continue;
        if (probe_rc < 0) {
            es_ctl_err("configuration %s: gpus= needs the GPUs: %s", m->c[i].name, probe_err);
            goto out;
        }
        size_t vl = (size_t)ngp * 48 + 1;
        x.visible[i] = malloc(vl);
        if (!x.visible[i]) {
            es_ctl_err("out of memory");
            goto out;
        }
        if (es_verify_gpus_visible(m->c[i].gpus, gp, ngp, x.visible[i], vl, err, sizeof(err)) < 0) {
            es_ctl_err("configuration %s: %s", m->c[i].name, err);
            rc = ES_CTL_EXIT_USAGE;
            goto out;
        }
    }
    if (list) {
        es_ctl_buf_t l = { 0 };
        for (int i = 0; i < m->n; i++)
            es_vcfg_format(&m->c[i], &l);
        if (l.p)
            fputs(l.p, stdout);
        es_ctl_buf_free(&l);
        rc = ES_CTL_EXIT_OK;
        goto out;
    }

    if (workdir) {
        if (mkdir(workdir, 0700) < 0 && errno != EEXIST) {
            es_ctl_err("cannot create --workdir %s: %s", workdir, strerror(errno));
            goto out;
        }
        snprintf(wd, sizeof(wd), "%s", workdir);
    } else {
        const char *tmp = getenv("TMPDIR");
        snprintf(wd, sizeof(wd), "%s/es-verify.XXXXXX", tmp && *tmp ? tmp : "/tmp");
        if (!mkdtemp(wd)) {
            es_ctl_err("cannot create a temporary directory: %s", strerror(errno));
            goto out;
        }
        made_dir = 1;
    }
    x.workdir = wd;
    res = calloc((size_t)m->n, sizeof(*res));
    if (!res) {
        es_ctl_err("out of memory");
        goto out;
    }
    struct sigaction sa = { 0 };
    sa.sa_handler = on_stop;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, &sa_old_int);
    sigaction(SIGTERM, &sa, &sa_old_term);
    sig_set = 1;

    fprintf(stderr, "verify: %d configuration%s, %ld ESTs, command:", m->n, m->n == 1 ? "" : "s",
            nests);
    for (int i = 0; i < x.ncmd; i++)
        fprintf(stderr, " %s", x.cmd[i]);
    fprintf(stderr, "\n");
    for (int i = 0; i < m->n && !g_stop; i++) {
        fprintf(stderr, "verify: [%d/%d] %s (%s) ...", i + 1, m->n, m->c[i].name,
                m->c[i].desc ? m->c[i].desc : "");
        fflush(stderr);
        run_config(&x, &m->c[i], x.visible[i], &re, &res[i]);
        if (res[i].state == ES_VRUN_OK)
            fprintf(stderr, " %.1f s, checksum %.16s%s\n", res[i].seconds, res[i].sum,
                    res[i].ndistinct > 1 ? " (ranks disagree)" : "");
        else
            fprintf(stderr, " %s\n", res[i].why);
    }
    if (g_stop)
        for (int i = 0; i < m->n; i++)
            if (!res[i].seconds && res[i].state == ES_VRUN_NOT_RUN && !res[i].why[0])
                snprintf(res[i].why, sizeof(res[i].why), "interrupted");
    char summary[1024];
    int pass = es_verify_judge(m, res, summary, sizeof(summary));
    if (g_stop)
        pass = 0;
    /* explain each mismatch with the collectives' digests */
    int no_digest = 0;
    for (int i = 0; i < m->n && x.digest; i++) {
        if (strcmp(res[i].verdict, "MISMATCH") != 0 && strcmp(res[i].verdict, "SAME AS REFERENCE") != 0 &&
            strcmp(res[i].verdict, "differs (expected)") != 0)
            continue;
        int rf = -1;
        for (int k = 0; k < m->n; k++)
            if (res[k].reference && m->c[k].level == m->c[i].level)
                rf = k;
        if (rf < 0 || m->c[i].shim_none)
            continue;
        char pa[PATH_MAX], pb[PATH_MAX];
        if (snprintf(pa, sizeof(pa), "%s/%s.digest", wd, m->c[rf].name) >= (int)sizeof(pa) ||
            snprintf(pb, sizeof(pb), "%s/%s.digest", wd, m->c[i].name) >= (int)sizeof(pb))
            continue;
        struct stat st;
        if (stat(pa, &st) != 0 && stat(pb, &st) != 0) {
            no_digest++; /* this libeasyscale.so writes none */
            continue;
        }
        es_digest_explain(pa, pb, res[i].explain, sizeof(res[i].explain));
    }
    x.no_digest = no_digest > 0;
    if (json)
        print_json(&x, m, res, summary, pass, pattern);
    else
        print_table(&x, m, res, summary, pass);
    rc = pass ? ES_CTL_EXIT_OK : ES_CTL_EXIT_FAIL;
    if (made_dir && pass)
        nftw(wd, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
    goto out;

usage_bad:
    es_ctl_err("bad value \"%s\" for %s", optarg, argv[optind - 1]);
    fputs(usage, stderr);
    return ES_CTL_EXIT_USAGE;
out:
    if (sig_set) {
        sigaction(SIGINT, &sa_old_int, NULL);
        sigaction(SIGTERM, &sa_old_term, NULL);
    }
    if (have_re)
        regfree(&re);
    if (x.visible && m)
        for (int i = 0; i < m->n; i++)
            free(x.visible[i]);
    free(x.visible);
    free(gp);
    if (m)
        es_vmatrix_free(m);
    free(m);
    free(res);
    free(mtext);
    es_ctl_buf_free(&b);
    return rc;
}
