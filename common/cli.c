#include "common/cli.h"
#include "common/version.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>


int llm_strlist_push(llm_strlist *l, const char *s)
{
    if (l->n == l->cap) {
        int cap = l->cap ? 2 * l->cap : 8;
        const char **v = realloc(l->v, (size_t)cap * sizeof *v);
        if (!v)
            return -1;
        l->v = v;
        l->cap = cap;
    }
    l->v[l->n++] = s;
    return 0;
}

void llm_strlist_free(llm_strlist *l)
{
    free(l->v);
    l->v = NULL;
    l->n = l->cap = 0;
}

int llm_parse_i64(const char *s, int64_t *out)
{
    if (!s || !*s)
        return -1;
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (errno || *end || end == s)
        return -1;
    *out = v;
    return 0;
}

int llm_parse_i64_range(const char *s, int64_t lo, int64_t hi, int64_t *out)
{
    int64_t v;
    if (llm_parse_i64(s, &v) || v < lo || v > hi)
        return -1;
    *out = v;
    return 0;
}

int llm_parse_int(const char *s, int *out)
{
    int64_t v;
    if (llm_parse_i64(s, &v) || v < INT_MIN || v > INT_MAX)
        return -1;
    *out = (int)v;
    return 0;
}

int llm_parse_double(const char *s, double *out)
{
    /* decimal only: strtod also takes hex floats (0x1p-3), spaces, "infinity" and locale
     * forms, which YAML readers take as strings */
    if (!s || !*s || s[strspn(s, "+-0123456789.eE")])
        return -1;
    char *end;
    double v = strtod(s, &end);
    /* ERANGE on underflow still gives a usable (tiny or zero) value, which a checkpoint
     * may hold; overflow is inf */
    if (*end || end == s || !isfinite(v))
        return -1;
    *out = v;
    return 0;
}

void llm_cli_version(const char *prog, FILE *f)
{
    fprintf(f, "%s (llmkit) %s\n", prog, llm_version());
}

/* One --help line: lhs in a 26-column field, then text; a longer lhs on a line of its own */
static void help_row(FILE *f, const char *lhs, const char *text)
{
    if (strlen(lhs) > 26)
        fprintf(f, "  %s\n  %-26s  %s\n", lhs, "", text);
    else
        fprintf(f, "  %-26s  %s\n", lhs, text);
}

void llm_cli_help(const llm_cli *cli, FILE *f)
{
    fprintf(f, "usage: %s %s\n\n%s\n\noptions:\n", cli->prog, cli->synopsis ? cli->synopsis : "",
            cli->summary ? cli->summary : "");
    for (const llm_opt *o = cli->opts; o && o->name; o++) {
        if (!o->help)
            continue;
        char lhs[96];
        int takes = o->kind != LLM_OPT_FLAG && o->kind != LLM_OPT_COUNT;
        if (o->short_name)
            snprintf(lhs, sizeof lhs, "-%c, --%s%s%s", o->short_name, o->name, takes ? " " : "",
                     takes ? (o->metavar ? o->metavar : "VALUE") : "");
        else
            snprintf(lhs, sizeof lhs, "    --%s%s%s", o->name, takes ? " " : "",
                     takes ? (o->metavar ? o->metavar : "VALUE") : "");
        help_row(f, lhs, o->help);
    }
    help_row(f, "-h, --help", "show this help and exit");
    help_row(f, "    --version", "show the version and exit");
    if (cli->env && cli->env->name) {
        fprintf(f, "\nenvironment (details in the man page):\n");
        for (const llm_env *e = cli->env; e->name; e++)
            help_row(f, e->name, e->help);
    }
}

static int usage_error(const llm_cli *cli, const char *fmt, const char *a, const char *b)
{
    fprintf(stderr, "%s: ", cli->prog);
    fprintf(stderr, fmt, a, b);
    fprintf(stderr, " (try '%s --help')\n", cli->prog);
    return LLM_CLI_ERROR;
}

static int set_value(const llm_cli *cli, const llm_opt *o, const char *val)
{
    switch (o->kind) {
    case LLM_OPT_STR:
        *(const char **)o->dest = val;
        return 0;
    case LLM_OPT_STRS:
        if (llm_strlist_push(o->dest, val))
            return usage_error(cli, "out of memory%s%s", "", "");
        return 0;
    case LLM_OPT_INT:
        if (llm_parse_int(val, o->dest))
            return usage_error(cli, "invalid integer '%s' for --%s", val, o->name);
        return 0;
    case LLM_OPT_I64:
        if (llm_parse_i64(val, o->dest))
            return usage_error(cli, "invalid integer '%s' for --%s", val, o->name);
        return 0;
    case LLM_OPT_DOUBLE:
        if (llm_parse_double(val, o->dest))
            return usage_error(cli, "invalid number '%s' for --%s", val, o->name);
        return 0;
    default:
        return 0;
    }
}

/* The table index of the first entry named name (--name finds it; a hidden alias after
 * it has the same name), -1 when none */
static int opt_index(const llm_cli *cli, const char *name)
{
    int i = 0;
    for (const llm_opt *p = cli->opts; p && p->name; p++, i++)
        if (!strcmp(p->name, name))
            return i;
    return -1;
}

int llm_cli_given(const llm_cli *cli, const llm_cli_seen *seen, const char *name)
{
    int i = opt_index(cli, name);
    if (i < 0 || i >= LLM_CLI_MAX_OPTS) {
        fprintf(stderr, "%s: llm_cli_given: no option --%s in the table\n", cli->prog, name);
        abort();
    }
    return seen->v[i];
}

int llm_cli_parse(const llm_cli *cli, int argc, char **argv, llm_strlist *pos)
{
    return llm_cli_parse_seen(cli, argc, argv, pos, NULL);
}

int llm_cli_parse_seen(const llm_cli *cli, int argc, char **argv, llm_strlist *pos,
                       llm_cli_seen *seen)
{
    int npos = 0, only_pos = 0;
    if (seen) {
        memset(seen, 0, sizeof *seen);
        int n = 0;
        for (const llm_opt *p = cli->opts; p && p->name; p++)
            n++;
        if (n > LLM_CLI_MAX_OPTS) {
            char max[16];
            snprintf(max, sizeof max, "%d", LLM_CLI_MAX_OPTS);
            return usage_error(cli, "internal error: more than %s options to record%s", max, "");
        }
    }
    for (int i = 1; i < argc; i++) {
        char *a = argv[i];
        if (only_pos || a[0] != '-' || a[1] == '\0') {
            if (cli->max_pos >= 0 && npos >= cli->max_pos)
                return usage_error(cli, "unexpected argument '%s'%s", a, "");
            if (pos && llm_strlist_push(pos, a))
                return usage_error(cli, "out of memory%s%s", "", "");
            npos++;
            continue;
        }
        if (!strcmp(a, "--")) {
            only_pos = 1;
            continue;
        }
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            llm_cli_help(cli, stdout);
            return LLM_CLI_EXIT;
        }
        if (!strcmp(a, "--version")) {
            llm_cli_version(cli->prog, stdout);
            return LLM_CLI_EXIT;
        }
        const llm_opt *o = NULL;
        const char *val = NULL;
        if (a[1] == '-') {
            const char *name = a + 2;
            const char *eq = strchr(name, '=');
            size_t len = eq ? (size_t)(eq - name) : strlen(name);
            for (const llm_opt *p = cli->opts; p && p->name; p++)
                if (strlen(p->name) == len && !strncmp(p->name, name, len)) {
                    o = p;
                    break;
                }
            if (!o)
                return usage_error(cli, "unknown option '%s'%s", a, "");
            if (eq) {
                if (o->kind == LLM_OPT_FLAG || o->kind == LLM_OPT_COUNT)
                    return usage_error(cli, "option --%s takes no value%s", o->name, "");
                val = eq + 1;
            }
        } else {
            for (const llm_opt *p = cli->opts; p && p->name; p++)
                if (p->short_name && p->short_name == a[1]) {
                    o = p;
                    break;
                }
            if (!o)
                return usage_error(cli, "unknown option '%s'%s", a, "");
            if (a[2]) {
                if (o->kind == LLM_OPT_FLAG || o->kind == LLM_OPT_COUNT)
                    return usage_error(cli, "unknown option '%s'%s", a, "");
                val = a + 2;
            }
        }
        if (seen)
            seen->v[opt_index(cli, o->name)] = 1;
        if (o->kind == LLM_OPT_FLAG) {
            *(int *)o->dest = 1;
            continue;
        }
        if (o->kind == LLM_OPT_COUNT) {
            (*(int *)o->dest)++;
            continue;
        }
        if (!val) {
            if (i + 1 >= argc)
                return usage_error(cli, "option --%s needs a value%s", o->name, "");
            val = argv[++i];
        }
        if (set_value(cli, o, val) != 0)
            return LLM_CLI_ERROR;
    }
    if (npos < cli->min_pos)
        return usage_error(cli, "missing argument%s%s", cli->min_pos - npos > 1 ? "s" : "", "");
    return LLM_CLI_RUN;
}

int llm_cli_dispatch(const char *prog, const char *summary, const llm_subcmd *subs,
                     int argc, char **argv)
{
    const char *cmd = argc > 1 ? argv[1] : NULL;
    if (cmd && (!strcmp(cmd, "--help") || !strcmp(cmd, "-h"))) {
        printf("usage: %s COMMAND [options] ...\n\n%s\n\ncommands:\n", prog, summary);
        for (const llm_subcmd *s = subs; s->name; s++)
            printf("  %-12s  %s\n", s->name, s->summary);
        printf("\n'%s COMMAND --help' shows the options of a command.\n", prog);
        printf("  %-26s  %s\n", "-h, --help", "show this help and exit");
        printf("  %-26s  %s\n", "    --version", "show the version and exit");
        return 0;
    }
    if (cmd && !strcmp(cmd, "--version")) {
        llm_cli_version(prog, stdout);
        return 0;
    }
    if (!cmd) {
        fprintf(stderr, "%s: missing command (try '%s --help')\n", prog, prog);
        return 64;
    }
    for (const llm_subcmd *s = subs; s->name; s++)
        if (!strcmp(cmd, s->name))
            return s->run(argc - 1, argv + 1);
    fprintf(stderr, "%s: unknown command '%s' (try '%s --help')\n", prog, cmd, prog);
    return 64;
}

void llm_cli_quiet_sigpipe(void)
{
    signal(SIGPIPE, SIG_IGN);
}

int llm_cli_stdout_closed(int err)
{
    return err == EPIPE;
}
