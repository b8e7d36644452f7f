/* Evaluating and sampling a trained model from its HuggingFace safetensors, through the
 * installed C API only (dtrain/dtrain.h).
 *
 * The weights come from a run's export (train.export, or dt_booster_export): the booster is
 * built from the run's config with the file as its initial weights, in the layout of the
 * config's [plugin], on every rank of the job; it reports the mean validation loss and prints
 * a sample after a prompt. Both are the same on any number of ranks and in any layout.
 *
 * Build against an installed dtrain:
 *     cc hf_eval_sample.c -o hf_eval_sample $(pkg-config --cflags --libs dtrain)
 * Run (the config as `dtrain train --print-config` printed it for the run):
 *     mpirun -np 2 ./hf_eval_sample run.ini model.safetensors "int main"
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <dtrain/dtrain.h>

enum { N_NEW = 60 };

static int run(dt_comm *world, const char *config, const char *weights, const char *prompt) {
    int rank = dt_comm_rank(world);
    dt_config cfg;
    dt_config_defaults(&cfg);
    dt_status st = dt_config_load_file(&cfg, config);
    if (st == DT_OK && cfg.model.vocab_size != 256)
        st = dt_err_set(DT_ERR_ARG, "%s: the prompt is bytes, so the model needs vocab_size "
                        "256 (it has %d)", config, cfg.model.vocab_size);
    dt_booster *booster = NULL;
    if (st == DT_OK)
        st = dt_booster_init(&cfg.plugin, world, &booster);
    dt_boost_spec spec = {.model = &cfg.model, .optim = &cfg.optim,
                          .train_data = cfg.data.train, .val_data = cfg.data.val,
                          .batch_size = cfg.train.batch_size,
                          .micro_batch_size = cfg.train.micro_batch_size,
                          .seq_len = cfg.train.seq_len, .seed = cfg.train.seed,
                          .init_weights = weights, .total_steps = cfg.train.steps};
    if (st == DT_OK)
        st = dt_booster_boost(booster, &spec);
    double val_loss = 0;
    if (st == DT_OK)
        st = dt_booster_eval(booster, cfg.train.eval_batches, &val_loss);
    int n_prompt = (int)strlen(prompt);
    int32_t *tokens = calloc((size_t)n_prompt + N_NEW, sizeof *tokens);
    if (st == DT_OK && !tokens)
        st = dt_err_set(DT_ERR_OOM, "no memory for %d tokens", n_prompt + N_NEW);
    for (int i = 0; st == DT_OK && i < n_prompt; i++)
        tokens[i] = (unsigned char)prompt[i];
    if (st == DT_OK)
        st = dt_booster_sample(booster, tokens, n_prompt, N_NEW, 0.8f, cfg.train.seed,
                               tokens + n_prompt);
    if (st == DT_OK && rank == 0) {
        printf("val loss %.6f over %d batches on %d ranks\n", val_loss, cfg.train.eval_batches,
               dt_comm_size(world));
        printf("--- sample ---\n");
        for (int i = 0; i < n_prompt + N_NEW; i++)
            putchar(tokens[i]);
        putchar('\n');
        fflush(stdout);
    }
    if (st != DT_OK)
        fprintf(stderr, "hf_eval_sample[rank %d]: error: %s\n", rank, dt_err_msg());
    bool stranded = st != DT_OK && booster && dt_booster_stranded(booster);
    free(tokens);
    dt_booster_free(booster);
    if (stranded) /* the other ranks may be waiting for this one */
        dt_dist_abort(world, 1);
    return st == DT_OK ? 0 : 1;
}

int main(int argc, char **argv) {
    dt_comm *world = NULL;
    if (dt_dist_init(&argc, &argv, &world) != DT_OK) {
        fprintf(stderr, "hf_eval_sample: error: %s\n", dt_err_msg());
        return 1;
    }
    int rc = 2;
    if (argc < 3 || argc > 4) {
        if (dt_comm_rank(world) == 0)
            fprintf(stderr, "usage: hf_eval_sample CONFIG.ini WEIGHTS.safetensors [PROMPT]\n"
                            "(built against dtrain %s, running with libdtrain %s)\n",
                    DTRAIN_VERSION, dt_version());
    } else {
        rc = run(world, argv[1], argv[2], argc > 3 ? argv[3] : "\n");
    }
    dt_dist_finalize(world);
    return rc;
}
