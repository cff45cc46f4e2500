/* llm-quantize — rewrite a checkpoint's weights as bf16/f16/q8_0/q4_0 and report the
 * error (man 1 llm-quantize). */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "common/afile.h"
#include "common/cli.h"
#include "common/log.h"
#include "common/quantize.h"

int main(int argc, char **argv)
{
    const char *type = NULL;
    int report = 0, json = 0, threads = 0, quiet = 0, verbose = 0;
    llm_strlist keep = {0}, pos = {0};
    const llm_opt opts[] = {
        {"type", 0, LLM_OPT_STR, &type, "TYPE", "bf16, f16, q8_0 or q4_0 (required)"},
        {"keep", 0, LLM_OPT_STRS, &keep, "GLOB", "leave tensors whose names match GLOB as they are (repeatable)"},
        {"report", 0, LLM_OPT_FLAG, &report, NULL, "per-tensor sizes and error (RMSE, max, relative) and totals"},
        {"json", 0, LLM_OPT_FLAG, &json, NULL, "the report as one JSON document"},
        {"threads", 'j', LLM_OPT_INT, &threads, "N", "threads (default: 0, all cores)"},
        {"threads", 't', LLM_OPT_INT, &threads, "N", NULL},   /* the earlier spelling */
        {"quiet", 'q', LLM_OPT_FLAG, &quiet, NULL, "errors only on stderr"},
        {"verbose", 'v', LLM_OPT_COUNT, &verbose, NULL, "more diagnostics"},
        {0},
    };
    const llm_cli cli = {"llm-quantize", "IN.llmk OUT.llmk --type TYPE [options]",
                         "Rewrite a model file's weights in a smaller format and report the error.",
                         opts, 2, 2, NULL};
    int r = llm_cli_parse(&cli, argc, argv, &pos);
    if (r != LLM_CLI_RUN) {
        llm_strlist_free(&keep);
        llm_strlist_free(&pos);
        return r == LLM_CLI_EXIT ? 0 : 64;
    }
    llm_log lg = llm_log_make("llm-quantize", quiet, verbose);
    llm_dtype dt = LLM_DT_F32;
    const char *bad = NULL;
    if (!type)
        bad = "--type is required";
    else if (llm_dtype_from_name(type, &dt) || !llm_quant_is_weight_dtype(dt) || dt == LLM_DT_F32)
        bad = "unknown --type (use bf16, f16, q8_0 or q4_0)";
    else if (threads < 0)
        bad = "--threads must be >= 0";
    if (bad) {
        llm_error(&lg, "%s%s%s%s (see --help)", bad, type && !strncmp(bad, "unknown", 7) ? ": '" : "",
                  type && !strncmp(bad, "unknown", 7) ? type : "", type && !strncmp(bad, "unknown", 7) ? "'" : "");
        llm_strlist_free(&keep);
        llm_strlist_free(&pos);
        return 64;
    }
    llm_status st = {0};
    if (llm_afile_env_check(&st)) {   /* before the model is read and converted */
        llm_error(&lg, "%s", st.msg);
        llm_strlist_free(&keep);
        llm_strlist_free(&pos);
        return 64;
    }
    llm_cli_quiet_sigpipe();
    llm_afile_remove_on_signal();
    llm_quantize_opts o = {.type = dt, .keep = keep.v, .nkeep = keep.n,
                           .stats = report || json, .threads = threads};
    llm_qz_report rep;
    int rc = llm_quantize_file(pos.v[0], pos.v[1], &o, &rep, &st);
    if (rc) {
        llm_error(&lg, "%s", st.msg);
    } else {
        if (rep.dropped)
            llm_info(&lg, "notice: dropped %d optimizer tensor(s) (%.1f MB)%s", rep.dropped,
                     rep.dropped_bytes / 1e6, rep.train_dropped ? " and the train: section" : "");
        else if (rep.train_dropped)
            llm_info(&lg, "notice: dropped the train: section");
        if (rep.shard_cut)
            llm_info(&lg, "notice: %d tensor(s) of this shard stay as they were: llm-shard split cut "
                     "their rows below a multiple of 32 (the whole tensors' are), and a merge keeps them so; "
                     "split with a smaller --tp to convert them", rep.shard_cut);
        /* data goes to stdout, unless the model itself is written there */
        FILE *rf = strcmp(pos.v[1], "-") == 0 ? stderr : stdout;
        if (report || json)
            llm_quantize_report_print(&rep, rf, json);
        else {
            char kept[96] = "";
            if (rep.kept)   /* a model already in the type: say so rather than "0 tensors" alone */
                snprintf(kept, sizeof kept, " (%d already %s, copied as they are)", rep.kept, type);
            llm_info(&lg, "%s: %d tensor(s) to %s%s, %.1f MB -> %.1f MB of tensors, %.2f s",
                     pos.v[1], rep.converted, type, kept, rep.bytes_in / 1e6, rep.bytes_out / 1e6,
                     rep.seconds);
        }
        if (fflush(rf) != 0 || ferror(rf))
            if (!llm_cli_stdout_closed(errno)) {
                llm_error(&lg, "writing the report: %s", strerror(errno));
                rc = LLM_EIO;
            }
    }
    llm_quantize_report_free(&rep);
    llm_strlist_free(&keep);
    llm_strlist_free(&pos);
    return llm_exit_code(rc);
}
