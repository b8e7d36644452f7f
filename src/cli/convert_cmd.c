/* dtrain convert --from PATH --to PATH [--seed S]: a step folder (sharded checkpoint) ->
 * FILE.safetensors (HuggingFace, the weights), or FILE.safetensors -> DIR/step-0 (a sharded
 * checkpoint with zero moments that any layout resumes with checkpoint.dir=DIR). */
#include "cli/convert_cmd.h"

#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>

#include "cli/args.h"
#include "cli/help.h"
#include "core/log.h"
#include "train/checkpoint.h"

static int usage(void) {
    fprintf(stderr, "usage: dtrain convert --from STEP_FOLDER --to FILE.safetensors\n"
                    "       dtrain convert --from FILE.safetensors --to CHECKPOINT_DIR "
                    "[--seed S]   (writes CHECKPOINT_DIR/step-0)\n");
    return DT_EXIT_USAGE;
}

int dt_cli_convert(int argc, char **argv) {
    const char *from = NULL, *to = NULL, *v;
    uint64_t seed = 1337;
    for (int i = 2; i < argc; i++) {
        if ((v = dt_cli_option(argc, argv, &i, "--from")))
            from = v;
        else if ((v = dt_cli_option(argc, argv, &i, "--to")))
            to = v;
        else if ((v = dt_cli_option(argc, argv, &i, "--seed"))) {
            if (!dt_cli_seed("convert: --seed", v, &seed)) {
                dt_error("%s", dt_err_msg());
                return 2;
            }
        } else
            return usage();
    }
    if (!from || !to || !from[0] || !to[0]) {
        dt_error("convert needs --from PATH and --to PATH");
        return usage();
    }
    struct stat sb;
    if (stat(from, &sb) != 0) {
        dt_error("convert: %s does not exist", from);
        return 1;
    }
    dt_status st;
    if (S_ISDIR(sb.st_mode)) {
        if (!dt_ckpt_is_sharded(from)) {
            dt_error("convert: %s is not a sharded checkpoint folder (no manifest.json)", from);
            return 1;
        }
        st = dt_ckpt_convert_to_hf(from, to);
    } else {
        st = dt_ckpt_convert_from_hf(from, to, seed);
    }
    if (st != DT_OK) {
        dt_error("%s", dt_err_msg());
        return 1;
    }
    dt_info("convert: %s -> %s%s", from, to, S_ISDIR(sb.st_mode) ? "" : "/step-0");
    return 0;
}
