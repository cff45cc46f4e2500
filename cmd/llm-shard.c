/* llm-shard — inspect, verify (and later split, merge, convert) .llmk checkpoints.
 * Each subcommand is one entry in the table below: an option table and one call into
 * common/.  To add one, write a cmd_NAME() like cmd_info() and add a row. */
#include <errno.h>
#include <stdio.h>

#include <string.h>

#include "common/afile.h"
#include "common/cli.h"
#include "common/gguf.h"
#include "common/llmc.h"
#include "common/safetensors.h"
#include "common/shard.h"
#include "common/shard_info.h"
#include "common/status.h"

/* Free the positional arguments, report st and map it to an exit status; a closed
 * stdout ends quietly. */
static int done(int rc, const llm_status *st, llm_strlist *pos)
{
    llm_strlist_free(pos);
    if (rc == LLM_OK)
        return 0;
    if (rc == LLM_EIO && llm_cli_stdout_closed(errno))
        return 0;
    fprintf(stderr, "llm-shard: %s\n", st->msg);
    return llm_exit_code(rc);
}

/* For the subcommands that write: LLM_FAULT_WRITE_LIMIT refused (64) before split or
 * export makes a folder.  0 with *ret the exit status when the subcommand should not run. */
static int env_ok(llm_strlist *pos, int *ret)
{
    llm_status st = {0};
    if (!llm_afile_env_check(&st))
        return 1;
    *ret = done(st.code, &st, pos);
    return 0;
}

/* Parse the options; 0 with *ret the exit status (0 after --help, 64 on usage errors)
 * when the subcommand should not run.  seen (may be NULL) gets the options given. */
static int parse_seen(const llm_cli *cli, int argc, char **argv, llm_strlist *pos, int *ret,
                      llm_cli_seen *seen)
{
    int r = llm_cli_parse_seen(cli, argc, argv, pos, seen);
    if (r == LLM_CLI_RUN)
        return 1;
    llm_strlist_free(pos);
    *ret = r == LLM_CLI_EXIT ? 0 : 64;
    return 0;
}

static int parse(const llm_cli *cli, int argc, char **argv, llm_strlist *pos, int *ret)
{
    return parse_seen(cli, argc, argv, pos, ret, NULL);
}

static int cmd_info(int argc, char **argv)
{
    int json = 0;
    const llm_opt opts[] = {
        {"json", 'j', LLM_OPT_FLAG, &json, NULL, "print one JSON document instead of text"},
        {0}};
    const llm_cli cli = {"llm-shard info", "[options] FILE|-",
                         "Print the header sections and the tensor table of a .llmk checkpoint.", opts, 1, 1, NULL};
    llm_strlist pos = {0};
    int ret;
    if (!parse(&cli, argc, argv, &pos, &ret))
        return ret;
    llm_status st = {0};
    int rc = llm_shard_info(pos.v[0], json, stdout, &st);
    return done(rc, &st, &pos);
}

static int cmd_verify(int argc, char **argv)
{
    int quiet = 0;
    const llm_opt opts[] = {
        {"quiet", 'q', LLM_OPT_FLAG, &quiet, NULL, "print nothing when the file is sound"},
        {0}};
    const llm_cli cli = {"llm-shard verify", "[options] FILE|-",
                         "Check the structure and every crc32 of a .llmk checkpoint.", opts, 1, 1, NULL};
    llm_strlist pos = {0};
    int ret;
    if (!parse(&cli, argc, argv, &pos, &ret))
        return ret;
    llm_status st = {0};
    int rc = llm_shard_verify(pos.v[0], quiet, stdout, &st);
    return done(rc, &st, &pos);
}

static int cmd_convert(int argc, char **argv)
{
    const char *from = NULL, *to = NULL, *out = NULL;
    const llm_opt opts[] = {
        {"from", 0, LLM_OPT_STR, &from, "FMT", "read FILE in format FMT (llmc, safetensors: a directory) and write .llmk"},
        {"to", 0, LLM_OPT_STR, &to, "FMT", "read the .llmk FILE and write format FMT (llmc: bf16 when any parameter is, else f32)"},
        {"output", 'o', LLM_OPT_STR, &out, "OUT", "output file, - for stdout (required)"},
        {0}};
    const llm_cli cli = {"llm-shard convert", "--from llmc|safetensors|--to llmc [options] FILE|DIR -o OUT",
                         "Convert llm.c and Hugging Face GPT-2 checkpoints to and from .llmk.", opts, 1, 1, NULL};
    llm_strlist pos = {0};
    int ret;
    if (!parse(&cli, argc, argv, &pos, &ret))
        return ret;
    if (!env_ok(&pos, &ret))
        return ret;
    const char *fmt = from ? from : to;
    int st_in = from && !strcmp(from, "safetensors");
    if (!out || (from && to) || !fmt || (strcmp(fmt, "llmc") != 0 && !st_in)) {
        fprintf(stderr, "llm-shard convert: %s\n",
                !out ? "-o OUT is required"
                     : (from && to) || !fmt ? "give exactly one of --from FMT and --to FMT"
                                            : "unknown format (--from llmc|safetensors, --to llmc; "
                                              "use export for gguf and safetensors output)");
        llm_strlist_free(&pos);
        return 64;
    }
    llm_status st = {0};
    char note[LLM_MSG_MAX] = "";
    int rc = st_in  ? llm_hf_import(pos.v[0], out, &st)
             : from ? llm_llmc_import(pos.v[0], out, &st)
                    : llm_llmc_export(pos.v[0], out, note, sizeof note, &st);
    if (!rc && note[0])
        fprintf(stderr, "llm-shard convert: note: %s\n", note);
    return done(rc, &st, &pos);
}

static int cmd_export(int argc, char **argv)
{
    const char *to = NULL, *out = NULL;
    const llm_opt opts[] = {
        {"to", 0, LLM_OPT_STR, &to, "FMT", "gguf (a file) or safetensors (a directory; tokenizer files when the checkpoint has a tokenizer) (required)"},
        {"output", 'o', LLM_OPT_STR, &out, "OUT", "the GGUF file or the Hugging Face directory (required)"},
        {0}};
    const llm_cli cli = {"llm-shard export", "--to gguf|safetensors FILE -o OUT",
                         "Export a GPT-2 checkpoint for llama.cpp (GGUF) or Hugging Face (safetensors).", opts, 1, 1, NULL};
    llm_strlist pos = {0};
    int ret;
    if (!parse(&cli, argc, argv, &pos, &ret))
        return ret;
    if (!env_ok(&pos, &ret))
        return ret;
    llm_status st = {0};
    char note[LLM_MSG_MAX] = "";
    int rc;
    if (!to || !out)
        rc = llm_err(&st, LLM_EUSAGE, "--to FMT and -o OUT are required");
    else if (!strcmp(to, "gguf"))
        rc = llm_gguf_export(pos.v[0], out, &st);
    else if (!strcmp(to, "safetensors"))
        rc = llm_hf_export(pos.v[0], out, note, sizeof note, &st);
    else
        rc = llm_err(&st, LLM_EUSAGE, "unknown export format '%s' (gguf, safetensors)", to);
    if (!rc && note[0])
        fprintf(stderr, "llm-shard export: warning: %s\n", note);
    return done(rc, &st, &pos);
}

static int cmd_split(int argc, char **argv)
{
    int tp = 1, pp = 1, ret, layers[LLM_SHARD_MAX_PP], nl = 0;
    const char *out = NULL, *ppl = NULL;
    const llm_opt opts[] = {
        {"tp", 0, LLM_OPT_INT, &tp, "N", "tensor-parallel ranks (default: 1)"},
        {"pp", 0, LLM_OPT_INT, &pp, "M", "pipeline stages (default: 1, or the --pp-layers count)"},
        {"pp-layers", 0, LLM_OPT_STR, &ppl, "L1,L2,...", "layers per pipeline stage (default: even)"},
        {"output", 'o', LLM_OPT_STR, &out, "PREFIX", "write PREFIX-tp{i}-pp{j}.llmk (required)"},
        {0}};
    const llm_cli cli = {"llm-shard split", "--tp N [--pp M] [--pp-layers L,...] FILE -o PREFIX",
                         "Split a checkpoint into tensor- and pipeline-parallel shards.", opts, 1, 1, NULL};
    llm_strlist pos = {0};
    llm_cli_seen seen;
    if (!parse_seen(&cli, argc, argv, &pos, &ret, &seen))
        return ret;
    if (!env_ok(&pos, &ret))
        return ret;
    llm_status st = {0};
    int rc = LLM_OK;
    /* --pp, when given, is checked against --pp-layers, whatever its value (0 too) */
    int pp_given = llm_cli_given(&cli, &seen, "pp");
    if (!out)
        rc = llm_err(&st, LLM_EUSAGE, "-o PREFIX is required");
    else if (ppl && !(rc = llm_shard_parse_layers(ppl, layers, LLM_SHARD_MAX_PP, &nl, &st)) && pp_given && pp != nl)
        rc = llm_err(&st, LLM_EUSAGE, "--pp %d but --pp-layers lists %d stages", pp, nl);
    if (!rc)
        rc = llm_shard_split(pos.v[0], tp, ppl ? nl : pp, ppl ? layers : NULL, out, &st);
    return done(rc, &st, &pos);
}

static int cmd_merge(int argc, char **argv)
{
    const char *out = NULL;
    int ret;
    const llm_opt opts[] = {
        {"output", 'o', LLM_OPT_STR, &out, "OUT", "the merged checkpoint, - for stdout (required)"},
        {0}};
    const llm_cli cli = {"llm-shard merge", "SHARD... -o OUT", "Reassemble the shards of a split.", opts, 1, -1, NULL};
    llm_strlist pos = {0};
    if (!parse(&cli, argc, argv, &pos, &ret))
        return ret;
    if (!env_ok(&pos, &ret))
        return ret;
    llm_status st = {0};
    int rc = out ? llm_shard_merge(pos.v, pos.n, out, &st) : llm_err(&st, LLM_EUSAGE, "-o OUT is required");
    return done(rc, &st, &pos);
}

static const llm_subcmd subcmds[] = {
    {"info", "print the header and tensor table of a checkpoint", cmd_info},
    {"verify", "check a checkpoint's structure and every crc32", cmd_verify},
    {"convert", "convert llm.c and Hugging Face GPT-2 checkpoints to and from .llmk", cmd_convert},
    {"export", "export a checkpoint as GGUF (llama.cpp) or safetensors (Hugging Face)", cmd_export},
    {"split", "split a checkpoint into tensor/pipeline-parallel shards", cmd_split},
    {"merge", "reassemble shards into one checkpoint", cmd_merge},
    {0},
};

int main(int argc, char **argv)
{
    llm_cli_quiet_sigpipe();
    llm_afile_remove_on_signal();
    return llm_cli_dispatch("llm-shard", "Inspect, verify, split, merge, convert and export .llmk checkpoints.", subcmds, argc, argv);
}
