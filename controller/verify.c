/* easyscale-ctl verify, its matrix and judgement (controller/verify.h):
 * the matrix text (parsing, formatting), the built-in matrix from the
 * GPUs, gpus= lists as CUDA_VISIBLE_DEVICES, a run's checksum and the
 * judgement of a matrix's results. Running the configurations and the
 * `verify` subcommand itself: controller/verify_run.c. */
#include "controller/verify.h"

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- the matrix text ----------------------------------------------------------------- */

void es_vcfg_free(es_vcfg_t *c)
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
        es_vcfg_free(&m->c[i]);
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
/* A flag of a configuration line. Returns 0 or -EINVAL with err. */
static int parse_flag(es_vcfg_t *c, const char *flag, char *err, size_t errlen)
{
    if (strcmp(flag, "no-time-slicing") == 0)
        c->no_tslice = 1;
    else if (strcmp(flag, "shim-none") == 0)
        c->shim_none = 1;
    else if (strcmp(flag, "shim-off") == 0)
        c->shim_off = 1;
    else if (strcmp(flag, "moves") == 0)
        c->moves = 1;
    else {
        snprintf(err, errlen, "unknown flag \"%s\"", flag);
        return -EINVAL;
    }
    return 0;
}

/* A string value of key: not empty, copied into *slot, no control
 * characters. Returns 0, or -EINVAL / -ENOMEM with err. */
static int set_value(char **slot, const char *key, const char *v, char *err, size_t errlen)
{
    if (!*v) {
        snprintf(err, errlen, "%s= needs a value", key);
        return -EINVAL;
    }
    free(*slot);
    if (!(*slot = strdup(v))) {
        snprintf(err, errlen, "out of memory");
        return -ENOMEM;
    }
    for (const char *q = v; *q; q++)
        if ((unsigned char)*q < 0x20 || *q == 0x7f) {
            snprintf(err, errlen, "%s= has a control character", key);
            return -EINVAL;
        }
    return 0;
}

/* env=VAR=VALUE. Returns 0, or -EINVAL / -ENOMEM with err. */
static int add_env(es_vcfg_t *c, const char *v, char *err, size_t errlen)
{
    const char *e = strchr(v, '=');
    if (!e || !var_ok(v, (size_t)(e - v))) {
        snprintf(err, errlen, "env=%s: VAR=VALUE", v);
        return -EINVAL;
    }
    if (c->nenv == ES_VCFG_MAX_ENV) {
        snprintf(err, errlen, "more than %d env=", ES_VCFG_MAX_ENV);
        return -EINVAL;
    }
    if (!(c->env[c->nenv] = strdup(v))) {
        snprintf(err, errlen, "out of memory");
        return -ENOMEM;
    }
    c->nenv++;
    return 0;
}

/* A flag (v NULL) or KEY=VALUE of a configuration line. Returns 0, or
 * -EINVAL / -ENOMEM with err. */
static int parse_item(es_vcfg_t *c, const char *key, const char *v, char *err, size_t errlen)
{
    uint64_t sz;
    long n;
    if (!v)
        return parse_flag(c, key, err, errlen);
    if (strcmp(key, "level") == 0) {
        if (strcmp(v, "d1") != 0 && strcmp(v, "d2") != 0) {
            snprintf(err, errlen, "level=%s: d1 or d2", v);
            return -EINVAL;
        }
        c->level = v[1] - '0';
        return 0;
    }
    if (strcmp(key, "env") == 0)
        return add_env(c, v, err, errlen);
    if (strcmp(key, "gpus") == 0)
        return set_value(&c->gpus, key, v, err, errlen);
    if (strcmp(key, "schedule") == 0)
        return set_value(&c->schedule, key, v, err, errlen);
    if (strcmp(key, "est-memory") == 0) {
        if (es_ctl_parse_size(v, &sz) < 0 || sz == 0) {
            snprintf(err, errlen, "est-memory=%s: a size (256M, 8G)", v);
            return -EINVAL;
        }
        return set_value(&c->est_mem, key, v, err, errlen);
    }
    if (strcmp(key, "ests") == 0) {
        if (es_ctl_parse_long(v, 1, ES_CTL_MAX_ESTS, &n) < 0) {
            snprintf(err, errlen, "ests=%s: 1 to %d", v, ES_CTL_MAX_ESTS);
            return -EINVAL;
        }
        c->ests = (int)n;
        return 0;
    }
    if (strcmp(key, "desc") == 0)
        return set_value(&c->desc, key, v, err, errlen);
    snprintf(err, errlen, "unknown key \"%s\"", key);
    return -EINVAL;
}

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
        if (eq)
            *eq = '\0';
        if (parse_item(c, tok, eq ? eq + 1 : NULL, err, errlen) < 0)
            goto out;
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
out:
    free(kind);
    free(tok);
    if (rc < 0)
        es_vcfg_free(c);
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
                es_vcfg_free(&m->c[m->n]);
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

/* The built-in matrix as it is built. */
typedef struct vm_build {
    const es_ctl_gpu_t *g;
    int ngpus;
    const es_vmatrix_opts_t *o;
    es_ctl_buf_t *b;
    char models[ES_CTL_MAX_GPUS][16]; /* the GPUs' models, in the order they first appear */
    int nmodels, count[ES_CTL_MAX_GPUS], of[ES_CTL_MAX_GPUS]; /* GPUs per model; GPU's model */
    int A;                       /* the model with the most GPUs */
    int a[ES_CTL_MAX_GPUS], na;  /* its GPUs */
    int N, K, h;                 /* ESTs; GPUs of A used, min(N, na); K / 2 */
    char spec[512], one[512];    /* the K GPUs; the first */
    const char *ma;              /* A's name */
    long S;                      /* the job's steps (0: unknown) */
} vm_build_t;

/* Groups the GPUs by model; A, the model with the most. */
static void vm_group(vm_build_t *v)
{
    for (int i = 0; i < v->ngpus; i++) {
        const char *m = v->g[i].model[0] ? v->g[i].model : "unknown";
        int k = 0;
        while (k < v->nmodels && strcmp(v->models[k], m) != 0)
            k++;
        if (k == v->nmodels)
            snprintf(v->models[v->nmodels++], sizeof(v->models[0]), "%s", m);
        v->of[i] = k;
        v->count[k]++;
    }
    v->A = 0;
    for (int k = 1; k < v->nmodels; k++)
        if (v->count[k] > v->count[v->A])
            v->A = k;
    for (int i = 0; i < v->ngpus; i++)
        if (v->of[i] == v->A)
            v->a[v->na++] = i;
    v->N = v->o->nests;
    v->K = v->na < v->N ? v->na : v->N;
    v->h = v->K / 2;
    ordinals(v->spec, sizeof(v->spec), v->g, v->a, v->K);
    ordinals(v->one, sizeof(v->one), v->g, v->a, 1);
    v->ma = v->models[v->A];
    v->S = v->o->job_steps;
}

/* The header and d1's placements: K, K/2 and 1 GPUs, K in reverse order. */
static void vm_d1(vm_build_t *v)
{
    es_ctl_buf_t *b = v->b;
    char half[512], rspec[512];
    int N = v->N, K = v->K, h = v->h;
    es_ctl_buf_printf(b, "# easyscale-ctl verify: %d ESTs; %d GPU%s", N, v->ngpus,
                      v->ngpus == 1 ? "" : "s");
    for (int k = 0; k < v->nmodels; k++)
        es_ctl_buf_printf(b, "%s %d %s", k ? "," : ":", v->count[k], v->models[k]);
    es_ctl_buf_printf(b, "\n# d1: every check must give the same checksum; controls must differ\n");
    es_ctl_buf_printf(b, "check   d1-%don%d level=d1 gpus=%s desc=\"%d ESTs on %d %s\"\n", N, K,
                      v->spec, N, K, v->ma);
    if (!v->o->reduced && h >= 2 && h < K) {
        ordinals(half, sizeof(half), v->g, v->a, h);
        es_ctl_buf_printf(b, "check   d1-%don%d level=d1 gpus=%s desc=\"%d ESTs on %d %s\"\n", N,
                          h, half, N, h, v->ma);
    }
    if (K > 1)
        es_ctl_buf_printf(b, "check   d1-%don1 level=d1 gpus=%s desc=\"%d ESTs on 1 %s\"\n", N,
                          v->one, N, v->ma);
    if (K > 1) {
        /* the same GPUs, numbered the other way round */
        int rev[ES_CTL_MAX_GPUS];
        for (int i = 0; i < K; i++)
            rev[i] = v->a[K - 1 - i];
        ordinals(rspec, sizeof(rspec), v->g, rev, K);
        es_ctl_buf_printf(b, "check   d1-order level=d1 gpus=%s desc=\"%d ESTs on %d %s in "
                          "reverse order\"\n", rspec, N, K, v->ma);
    }
}

/* d1's moves: scale events, swap out and back, migrations, time-slicing
 * (a schedule's GPUs are positions in the configuration's gpus= list). */
static void vm_moves(vm_build_t *v)
{
    es_ctl_buf_t *b = v->b;
    int N = v->N, K = v->K;
    long S = v->S;
    if (S > 0 && K > 1) {
        int hh = v->h >= 1 ? v->h : 1;
        es_ctl_buf_printf(b,
                          "check   d1-scale level=d1 gpus=%s schedule=\"step %ld scale 0-%d; step "
                          "%ld scale 0; step %ld scale all\" moves desc=\"%d ESTs: %d %s, then "
                          "%d, 1, %d again\"\n",
                          v->spec, S / 6, hh - 1, S / 3, S / 2, N, K, v->ma, hh, K);
    }
    if (S > 0 && !v->o->reduced) {
        /* a parked EST holds the others at the next collective: it comes
         * back at the same step (the ESTs wait there for both events) */
        es_ctl_buf_printf(b,
                          "check   d1-swap level=d1 gpus=%s schedule=\"step %ld swap-out %d; step %ld "
                          "swap-in %d 0\" moves desc=\"%d ESTs on 1 %s, EST %d swapped out to host "
                          "memory and back\"\n",
                          v->one, S / 3, N - 1, S / 3, N - 1, N, v->ma, N - 1);
    }
    if (S > 0 && K > 1) {
        int two[2] = { v->a[0], v->a[1] };
        char spec2[512];
        ordinals(spec2, sizeof(spec2), v->g, two, 2);
        es_ctl_buf_printf(b, "check   d1-migrate level=d1 gpus=%s schedule=\"", spec2);
        /* three, a sixth of the job apart, all in its first half (the
         * ESTs wait at each event's step until it is done, so they happen
         * there however short the job) */
        for (int e = 1; e <= 3; e++)
            es_ctl_buf_printf(b, "%sstep %ld migrate %d %d", e > 1 ? "; " : "", S * e / 6,
                              (e - 1) % N, e % 2);
        es_ctl_buf_printf(b, "\" moves desc=\"%d ESTs on 2 %s, one migrating every %ld steps\"\n",
                          N, v->ma, S / 6);
    }
    /* time-slicing: the shim's rotation (one EST resident at a time, each
     * parked in host memory at every collective), on one GPU */
    es_ctl_buf_printf(b,
                      "check   d1-tslice level=d1 gpus=%s env=EASYSCALE_TIME_SLICE=on "
                      "est-memory=%lluK moves desc=\"%d ESTs time-sliced on 1 %s with memory "
                      "for one (one resident at a time)\"\n",
                      v->one, (unsigned long long)(v->g[v->a[0]].mem >> 10), N, v->ma);
}

/* d2 on model k (not A) and on a mix of A and k; canon: the canonical
 * device. */
static void vm_d2_model(vm_build_t *v, int k, const char *canon)
{
    es_ctl_buf_t *b = v->b;
    int N = v->N, K = v->K, bi[ES_CTL_MAX_GPUS], nb = 0;
    char spec2[512];
    for (int i = 0; i < v->ngpus; i++)
        if (v->of[i] == k && nb < N)
            bi[nb++] = i;
    if (!v->o->reduced) {
        ordinals(spec2, sizeof(spec2), v->g, bi, nb);
        es_ctl_buf_printf(b,
                          "check   d2-%s level=d2 gpus=%s env=EASYSCALE_CANONICAL_DEVICE=%s "
                          "desc=\"%d ESTs on %d %s\"\n",
                          v->models[k], spec2, canon, N, nb, v->models[k]);
    }
    /* a mix: half of K from A, the rest from this model */
    int mix[ES_CTL_MAX_GPUS], nm = 0, ka = K / 2 > 0 ? K / 2 : 1;
    for (int i = 0; i < ka; i++)
        mix[nm++] = v->a[i];
    for (int i = 0; i < nb && nm < (K > 1 ? K : 2); i++)
        mix[nm++] = bi[i];
    ordinals(spec2, sizeof(spec2), v->g, mix, nm);
    es_ctl_buf_printf(b,
                      "check   d2-mix-%s level=d2 gpus=%s env=EASYSCALE_CANONICAL_DEVICE=%s "
                      "desc=\"%d ESTs on %d %s + %d %s\"\n",
                      v->models[k], spec2, canon, N, ka, v->ma, nm - ka, v->models[k]);
}

/* d2: every model of the machine, canonical device = all of them. */
static void vm_d2(vm_build_t *v)
{
    char canon[256];
    size_t co = 0;
    if (v->nmodels <= 1)
        return;
    canon[0] = '\0';
    for (int k = 0; k < v->nmodels; k++)
        co += (size_t)snprintf(canon + co, sizeof(canon) - co, "%s%s", k ? "," : "",
                               v->models[k]);
    es_ctl_buf_printf(v->b, "# d2: the same job across GPU models (canonical device %s)\n",
                      canon);
    es_ctl_buf_printf(v->b,
                      "check   d2-%s level=d2 gpus=%s env=EASYSCALE_CANONICAL_DEVICE=%s "
                      "desc=\"%d ESTs on %d %s\"\n",
                      v->ma, v->spec, canon, v->N, v->K, v->ma);
    for (int k = 0; k < v->nmodels; k++) {
        if (k == v->A)
            continue;
        vm_d2_model(v, k, canon);
        if (v->o->reduced)
            break;
    }
}

/* The negative controls: without EasyScale the checksum must differ. */
static void vm_controls(vm_build_t *v)
{
    es_ctl_buf_t *b = v->b;
    int N = v->N, K = v->K;
    es_ctl_buf_printf(b, "# negative controls: without EasyScale the checksum must differ\n");
    if (K >= N) /* NCCL takes one rank per GPU */
        es_ctl_buf_printf(b,
                          "control off level=d1 gpus=%s shim-none desc=\"%d ESTs on %d %s, "
                          "libeasyscale.so not loaded\"\n",
                          v->spec, N, K, v->ma);
    if (K >= N)
        es_ctl_buf_printf(b,
                          "control nccl level=d1 gpus=%s env=EASYSCALE_COLLECTIVES=nccl "
                          "desc=\"%d ESTs on %d %s, NCCL's own collectives\"\n",
                          v->spec, N, K, v->ma);
    /* elastic training without EasyScale: the job shrinks to its GPUs */
    int ke = K < N ? K : v->h;
    if (ke >= 1 && ke < N) {
        char half[512];
        ordinals(half, sizeof(half), v->g, v->a, ke);
        es_ctl_buf_printf(b,
                          "control elastic level=d1 gpus=%s ests=%d shim-none desc=\"the job "
                          "shrunk to %d worker%s on %d %s, libeasyscale.so not loaded\"\n",
                          half, ke, ke, ke == 1 ? "" : "s", ke, v->ma);
    }
}

int es_vmatrix_builtin(const es_ctl_gpu_t *g, int ngpus, const es_vmatrix_opts_t *o,
                       es_ctl_buf_t *b)
{
    vm_build_t v = { .g = g, .ngpus = ngpus, .o = o, .b = b };
    if (ngpus <= 0)
        return -ENOENT;
    vm_group(&v);
    vm_d1(&v);
    vm_moves(&v);
    vm_d2(&v);
    vm_controls(&v);
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
