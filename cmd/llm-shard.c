/* llm-shard — inspect, verify (and later split, merge, convert) .llmk checkpoints.
 * Each subcommand is one entry in the table below: an option table and one call into
 * common/.  To add one, write a cmd_NAME() like cmd_info() and add a row. */
#include <errno.h>
#include <stdio.h>

#include <string.h>

#include "common/cli.h"
#include "common/llmc.h"
#include "common/shard_info.h"
#include "common/status.h"

/* Report st and map it to an exit status; a closed stdout ends quietly. */
static int done(int rc, const llm_status *st)
{
    if (rc == LLM_OK)
        return 0;
    if (rc == LLM_EIO && llm_cli_stdout_closed(errno))
        return 0;
    fprintf(stderr, "llm-shard: %s\n", st->msg);
    return llm_exit_code(rc);
}

static int cmd_info(int argc, char **argv)
{
    int json = 0;
    const llm_opt opts[] = {
        {"json", 'j', LLM_OPT_FLAG, &json, NULL, "print one JSON document instead of text"},
        {0}};
    const llm_cli cli = {"llm-shard info", "[options] FILE|-",
                         "Print the header sections and the tensor table of a .llmk checkpoint.", opts, 1, 1};
    llm_strlist pos = {0};
    int r = llm_cli_parse(&cli, argc, argv, &pos);
    if (r != LLM_CLI_RUN) {
        llm_strlist_free(&pos);
        return r == LLM_CLI_EXIT ? 0 : 64;
    }
    llm_status st = {0};
    int rc = llm_shard_info(pos.v[0], json, stdout, &st);
    llm_strlist_free(&pos);
    return done(rc, &st);
}

static int cmd_verify(int argc, char **argv)
{
    int quiet = 0;
    const llm_opt opts[] = {
        {"quiet", 'q', LLM_OPT_FLAG, &quiet, NULL, "print nothing when the file is sound"},
        {0}};
    const llm_cli cli = {"llm-shard verify", "[options] FILE|-",
                         "Check the structure and every crc32 of a .llmk checkpoint.", opts, 1, 1};
    llm_strlist pos = {0};
    int r = llm_cli_parse(&cli, argc, argv, &pos);
    if (r != LLM_CLI_RUN) {
        llm_strlist_free(&pos);
        return r == LLM_CLI_EXIT ? 0 : 64;
    }
    llm_status st = {0};
    int rc = llm_shard_verify(pos.v[0], quiet, stdout, &st);
    llm_strlist_free(&pos);
    return done(rc, &st);
}

static int cmd_convert(int argc, char **argv)
{
    const char *from = NULL, *to = NULL, *out = NULL;
    const llm_opt opts[] = {
        {"from", 0, LLM_OPT_STR, &from, "FMT", "read FILE in format FMT (llmc) and write .llmk"},
        {"to", 0, LLM_OPT_STR, &to, "FMT", "read the .llmk FILE and write format FMT (llmc)"},
        {"output", 'o', LLM_OPT_STR, &out, "OUT", "output file, - for stdout (required)"},
        {0}};
    const llm_cli cli = {"llm-shard convert", "--from llmc|--to llmc [options] FILE|- -o OUT",
                         "Convert llm.c GPT-2 checkpoints to and from .llmk.", opts, 1, 1};
    llm_strlist pos = {0};
    int r = llm_cli_parse(&cli, argc, argv, &pos);
    if (r != LLM_CLI_RUN) {
        llm_strlist_free(&pos);
        return r == LLM_CLI_EXIT ? 0 : 64;
    }
    const char *fmt = from ? from : to;
    if (!out || (from && to) || !fmt || strcmp(fmt, "llmc") != 0) {
        fprintf(stderr, "llm-shard convert: %s\n",
                !out ? "-o OUT is required"
                     : (from && to) || !fmt ? "give exactly one of --from llmc and --to llmc"
                                            : "unknown format (the one format is 'llmc')");
        llm_strlist_free(&pos);
        return 64;
    }
    llm_status st = {0};
    int rc = from ? llm_llmc_import(pos.v[0], out, &st) : llm_llmc_export(pos.v[0], out, &st);
    llm_strlist_free(&pos);
    return done(rc, &st);
}

static const llm_subcmd subcmds[] = {
    {"info", "print the header and tensor table of a checkpoint", cmd_info},
    {"verify", "check a checkpoint's structure and every crc32", cmd_verify},
    {"convert", "convert llm.c GPT-2 checkpoints to and from .llmk", cmd_convert},
    {0},
};

int main(int argc, char **argv)
{
    llm_cli_quiet_sigpipe();
    return llm_cli_dispatch("llm-shard", "Inspect, verify and convert .llmk checkpoints.", subcmds, argc, argv);
}
