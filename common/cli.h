/* cli.h — declarative command-line options.
 *
 * A program describes its options in a table; llm_cli_parse() fills the destinations,
 * collects positional arguments, prints --help (generated from the table) and --version
 * (from `git describe` at build time), and rejects unknown or malformed options.
 * Accepted forms: --name value, --name=value, -x value, -xvalue, -- ends options,
 * "-" alone is a positional argument (stdin/stdout).
 */
#ifndef LLM_CLI_H
#define LLM_CLI_H

#include <stdint.h>
#include <stdio.h>

typedef enum {
    LLM_OPT_FLAG,    /* int*: set to 1 */
    LLM_OPT_COUNT,   /* int*: incremented each time (-v -v) */
    LLM_OPT_STR,     /* const char**: argument string (points into argv) */
    LLM_OPT_INT,     /* int*: decimal integer, range-checked against int */
    LLM_OPT_I64,     /* int64_t*: decimal integer */
    LLM_OPT_DOUBLE,  /* double*: finite floating point number */
    LLM_OPT_STRS     /* llm_strlist*: repeatable; each occurrence appended */
} llm_opt_kind;

/* A growable list of borrowed strings (positional arguments, repeatable options). */
typedef struct {
    const char **v;
    int n, cap;
} llm_strlist;

int  llm_strlist_push(llm_strlist *l, const char *s); /* 0 on success, -1 out of memory */
void llm_strlist_free(llm_strlist *l);                /* frees the array, not strings */

typedef struct {
    const char  *name;       /* long name without "--"; NULL ends the table */
    char         short_name; /* 0 when none */
    llm_opt_kind kind;
    void        *dest;
    const char  *metavar;    /* shown in --help for options taking a value */
    const char  *help;       /* one line; "(default: ...)" is the caller's to add.
                                NULL: a hidden entry, not in --help: an older short
                                spelling kept for scripts, after the entry it aliases
                                (same name and dest; --name finds the first) */
} llm_opt;

/* An environment variable a program reads, for --help (the man page's ENVIRONMENT
 * section says the rest). */
typedef struct {
    const char *name;   /* NULL ends the table */
    const char *help;   /* one line */
} llm_env;

typedef struct {
    const char    *prog;      /* "llm-shard info" */
    const char    *synopsis;  /* "[options] FILE|-" */
    const char    *summary;   /* one sentence */
    const llm_opt *opts;      /* table ending in {0}; --help and --version are implicit */
    int            min_pos;   /* positional arguments required */
    int            max_pos;   /* -1: unlimited */
    const llm_env *env;       /* NULL or a table ending in {0}: --help's "environment:" */
} llm_cli;

enum { LLM_CLI_RUN = 0, LLM_CLI_EXIT = 1, LLM_CLI_ERROR = -1 };

/* Parse argv[1..argc-1].  Returns LLM_CLI_RUN (go on), LLM_CLI_EXIT (--help or
 * --version was printed to stdout: exit 0) or LLM_CLI_ERROR (a one-line message was
 * printed to stderr: exit 64).  Positional arguments are appended to pos (may be NULL
 * when max_pos is 0); the caller frees pos with llm_strlist_free(). */
int llm_cli_parse(const llm_cli *cli, int argc, char **argv, llm_strlist *pos);

/* Which options were on the command line, for an option whose destination keeps a value
 * meaning "not given" (0: the default) that the user can type too: --seq 0 is then told
 * from no --seq and refused when 0 is no valid length.  Filled by llm_cli_parse_seen(),
 * read by llm_cli_given(). */
enum { LLM_CLI_MAX_OPTS = 64 };   /* table entries a seen record covers */
typedef struct {
    unsigned char v[LLM_CLI_MAX_OPTS];   /* by table index */
} llm_cli_seen;

/* llm_cli_parse(), and when seen is not NULL, clears it and records each option given (a
 * hidden alias counts as the entry it aliases).  A table of more than LLM_CLI_MAX_OPTS
 * entries with seen not NULL is an error (LLM_CLI_ERROR). */
int llm_cli_parse_seen(const llm_cli *cli, int argc, char **argv, llm_strlist *pos,
                       llm_cli_seen *seen);

/* 1 when --name (or a short name or alias of it) was given to the parse that filled seen,
 * else 0.  A name not in cli's table is the program's bug: a message, then abort(). */
int llm_cli_given(const llm_cli *cli, const llm_cli_seen *seen, const char *name);

/* Print the generated --help text. */
void llm_cli_help(const llm_cli *cli, FILE *f);

/* Print "PROG VERSION". */
void llm_cli_version(const char *prog, FILE *f);

/* Programs with subcommands (llm-shard info|verify|...). */
typedef struct {
    const char *name;                    /* NULL ends the table */
    const char *summary;
    int (*run)(int argc, char **argv);   /* argv[0] is the subcommand; returns an exit status */
} llm_subcmd;

/* Dispatch on argv[1]: runs the subcommand and returns its exit status; handles
 * --help/-h and --version; an unknown or missing subcommand prints a message and
 * returns 64. */
int llm_cli_dispatch(const char *prog, const char *summary, const llm_subcmd *subs,
                     int argc, char **argv);

/* Strict number parsing shared with config files: whole string, in range, finite.
 * Return 0 on success, -1 when malformed or out of range. */
int llm_parse_i64(const char *s, int64_t *out);
int llm_parse_int(const char *s, int *out);
int llm_parse_double(const char *s, double *out);
/* An option taken as text (LLM_OPT_STR) so that "not given" is NULL and no value that
 * can be typed stands for it: s as an integer in lo..hi, 0, else -1.  (For an option
 * parsed as a number, llm_cli_given() tells a typed default from none.) */
int llm_parse_i64_range(const char *s, int64_t lo, int64_t hi, int64_t *out);

/* Install SIGPIPE handling so that a closed stdout ends a program quietly: SIGPIPE is
 * ignored and llm_cli_stdout_closed(errno) tells whether a write error was EPIPE. */
void llm_cli_quiet_sigpipe(void);
int  llm_cli_stdout_closed(int err);

#endif
