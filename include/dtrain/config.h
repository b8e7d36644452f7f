/* The run configuration (public API): one struct per file section, [model] [data] [train]
 * [optim] [plugin] [checkpoint], keys named as in the file (ColossalAI's names under [plugin]).
 *
 * Values come from, in order: built-in defaults (dt_config_defaults), a config file (INI/TOML
 * style), then `section.key=value` overrides. An unknown section or key, or a value that does
 * not parse ("12x" for an int, "maybe" for a bool, an unknown enum name) is an error naming
 * the file, line, section and key. Ownership: the structs are plain values (copy them; no
 * pointers inside). Thread-safety: the functions touch only the struct they are given (and
 * this thread's error message); enum-name strings are static.
 */
#ifndef DTRAIN_CONFIG_H
#define DTRAIN_CONFIG_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "dtrain/status.h"

#define DT_PATH_MAX 512

/* dit: a video diffusion transformer over clips of [frames, channels, height, width] */
typedef enum dt_arch { DT_ARCH_GPT2, DT_ARCH_LLAMA, DT_ARCH_DIT, DT_ARCH_COUNT } dt_arch;
/* The DiT's attention (model.attn): every block over the whole clip, or alternating blocks
 * within a frame (spatial, even blocks) and across frames at one position (temporal, odd). */
typedef enum dt_dit_attn {
    DT_DIT_ATTN_FULL,
    DT_DIT_ATTN_SPATIAL_TEMPORAL,
    DT_DIT_ATTN_COUNT
} dt_dit_attn;

/* The largest timestep shift a DiT takes (model.timestep_shift). */
#define DT_DIT_MAX_SHIFT 1000.0f

/* A DiT's text: at most this many tokens, embeddings at most this wide. */
enum { DT_DIT_MAX_TEXT = 1024, DT_DIT_MAX_TEXT_DIM = 16384 };
/* Where training batches come from (data.source): token shards (data.train, data.val), or
 * clips of coloured shapes bouncing in a box made on the fly from the seed (a DiT's data). */
/* tokens: token shards; bounce: clips of bouncing shapes made from the seed; clips: pixel
 * clip shards (dtrain prepare --video); latents: a VAE's latent clips in safetensors shards */
typedef enum dt_data_source {
    DT_SOURCE_TOKENS,
    DT_SOURCE_BOUNCE,
    DT_SOURCE_CLIPS,
    DT_SOURCE_LATENTS,
    DT_SOURCE_COUNT
} dt_data_source;
/* fp16: IEEE half operands with fp32 master weights and a dynamic loss scale */
typedef enum dt_precision { DT_PREC_FP32, DT_PREC_BF16, DT_PREC_FP16, DT_PREC_COUNT } dt_precision;
typedef enum dt_lr_schedule { DT_SCHED_COSINE, DT_SCHED_CONSTANT, DT_SCHED_COUNT } dt_lr_schedule;
typedef enum dt_plugin_type {
    DT_PLUGIN_NONE,
    DT_PLUGIN_DDP,
    DT_PLUGIN_ZERO1,
    DT_PLUGIN_ZERO2,
    DT_PLUGIN_ZERO3,
    DT_PLUGIN_HYBRID,
    DT_PLUGIN_COUNT
} dt_plugin_type;
/* How the sequence is split (plugin.sp_mode):
 *   all_to_all    Ulysses: sp_size ranks of their own each hold seq_len/sp tokens; an
 *                 all-to-all around attention switches to whole sequences, heads split
 *   split_gather  Megatron-SP: the tp ranks hold seq_len/tp tokens outside the tensor-
 *                 parallel regions (all-gather in, reduce-scatter out); sp_size must be 1 */
typedef enum dt_sp_mode { DT_SP_ALL_TO_ALL, DT_SP_SPLIT_GATHER, DT_SP_MODE_COUNT } dt_sp_mode;
/* Which tokens of a sequence each context-parallel rank holds (plugin.cp_split), the sequence
 * cut into chunks:
 *   zigzag      2 cp chunks; rank r holds chunk r and chunk 2 cp - 1 - r, so under causal
 *               attention every rank has the same work (the load-balanced default)
 *   contiguous  cp chunks; rank r holds chunk r (the last rank does the most causal work) */
typedef enum dt_cp_split { DT_CP_ZIGZAG, DT_CP_CONTIGUOUS, DT_CP_SPLIT_COUNT } dt_cp_split;
/* Activation checkpointing (plugin.ac): none; full (a checkpointed block keeps only its input
 * and reruns its forward in backward); selective (keeps the matmul outputs, recomputes the
 * attention core and the pointwise functions). */
typedef enum dt_ac_mode { DT_AC_NONE, DT_AC_FULL, DT_AC_SELECTIVE, DT_AC_COUNT } dt_ac_mode;
/* How activations saved for backward are stored (plugin.act_compress). */
typedef enum dt_act_compress {
    DT_ACT_COMPRESS_NONE,
    DT_ACT_COMPRESS_INT8,
    DT_ACT_COMPRESS_COUNT
} dt_act_compress;
/* Where the optimizer state lives (plugin.offload): in memory, or in files streamed through a
 * bounded window during the optimizer step. */
typedef enum dt_offload { DT_OFFLOAD_NONE, DT_OFFLOAD_DISK, DT_OFFLOAD_COUNT } dt_offload;

typedef struct dt_model_config {
    dt_arch arch;                   /* gpt2 | llama */
    int n_layer, n_head, n_kv_head; /* n_kv_head 0 = n_head (llama); gpt2 requires n_head */
    int n_embd, vocab_size, max_seq_len;
    int ffn_hidden;         /* llama SwiGLU width; 0 = derived (8C/3 rounded up to 64) */
    float rope_theta;       /* llama */
    float norm_eps;         /* 1e-5 */
    char init[DT_PATH_MAX]; /* safetensors to start from; "" = random init */
    /* dit: the clip [frames, channels, height, width], the patch [patch_t, patch_h, patch_w]
     * each token covers, label classes (0 = unconditional) and the attention kind; n_layer,
     * n_head and n_embd as above. A DiT's sequence is its clip's patch tokens. A DiT with
     * text_len > 0 cross-attends to a text of that many tokens: the caption's bytes through
     * its own small encoder (text_dim 0), or precomputed embeddings of width text_dim. */
    int frames, channels, height, width;
    int patch_t, patch_h, patch_w;
    int n_classes;
    dt_dit_attn attn;
    int text_len, text_dim;
    /* The rectified flow's timestep shift s (SD3's, Open-Sora 1.2's timestep transform):
     * training draws t' = s t / (1 + (s - 1) t) for the logit-normal t, and the sampler steps
     * through the same warped times. s > 1 trains and samples more at high noise, where the
     * layout of a clip that repeats its content over many pixels is still undecided; 1 (or
     * 0) = no shift. */
    float timestep_shift;
} dt_model_config;

typedef struct dt_data_config {
    char train[DT_PATH_MAX], val[DT_PATH_MAX]; /* token shards (.bin), or clip shard folders */
    bool shuffle;
    dt_data_source source;
    int shapes; /* bounce: shapes per clip */
    /* a DiT's buckets of clip shape, "FxHxW:BATCH[:WEIGHT], ..." (e.g. "8x24x24:16:2,
     * 4x32x32:8"): each step trains on one bucket's shape with its own global batch, drawn by
     * weight from the seed; "" = the one shape model.frames x height x width, train.batch_size */
    char buckets[DT_PATH_MAX];
    float label_dropout;         /* chance a training clip gets the null condition: the null label
                                  * (a model with classes) and the null text (a model with text), for
                                  * classifier-free guidance */
    char tokenizer[DT_PATH_MAX]; /* the BPE file the shards' ids come from ("": bytes or
                                  * unknown): the end-of-run sample is printed as its text */
    /* Documents kept apart in packed sequences: attention stops at document boundaries and
     * positions restart at each document. A document ends with the end-of-document id
     * eot_token (-1: the tokenizer's, when data.tokenizer names one) and where a Megatron
     * dataset's document index starts another. */
    bool doc_mask;
    int eot_token;
    int doc_len; /* the mean document length dtrain plan assumes for doc_mask's attention
                  * time; 0: unknown (documents as long as the sequence) */
} dt_data_config;

typedef struct dt_train_config {
    int batch_size;       /* global batch, in sequences */
    int micro_batch_size; /* sequences per forward/backward; 0 = batch_size (no accumulation) */
    int seq_len, steps;
    uint64_t seed;
    int log_every, eval_every, eval_batches; /* eval_every 0 = off */
    int sample_tokens; /* characters printed as a sample at the end; 0 = off */
    char metrics[DT_PATH_MAX], export_path[DT_PATH_MAX], mem_report[DT_PATH_MAX];
    char trace[DT_PATH_MAX];        /* Chrome-trace JSON of every step's timeline; "" = off */
    char mem_timeline[DT_PATH_MAX]; /* JSON log of allocations and saved sets per rank; "" = off */
    int comm_timeout; /* seconds a collective or pipeline receive may wait; 0 = no watchdog */
    float ema_decay;  /* > 0: keep an exponential moving average of the weights, saved in
                       * checkpoints and exported beside them (train.export's name with .ema
                       * before its extension); 0 = none */
    /* > 0: every rebalance_every steps, the pipeline's chunks are timed (each unit's compute)
     * and, when the slowest is more than rebalance_margin (a share) above their mean, the
     * layer boundaries move to the split whose slowest chunk is fastest at those times;
     * 0 = never */
    int rebalance_every;
    float rebalance_margin;
} dt_train_config;

typedef struct dt_optim_config {
    float lr, min_lr;
    int warmup_steps;
    dt_lr_schedule schedule;
    float beta1, beta2, eps, weight_decay;
} dt_optim_config;

typedef struct dt_plugin_config {
    dt_plugin_type type;
    dt_precision precision;
    float grad_clip; /* 0 = off */
    int tp_size, sp_size, pp_size, zero_stage;
    dt_sp_mode sp_mode;
    /* pipeline: micro-batches per step per dp rank (0 = batch rows / train.micro_batch_size),
     * layers per stage ("3,3,2"; "" = even), schedule (gpipe | 1f1b | interleaved | zbh1 |
     * file:PATH) and model chunks per rank (interleaved) */
    int microbatches;
    char pp_layers[DT_PATH_MAX], pp_schedule[DT_PATH_MAX];
    int pp_chunks;
    /* tp > 1 without Megatron-SP, where every tp rank holds the whole boundary: each sends its
     * 1/tp piece to the next stage, whose tp group all-gathers it (Narayanan et al. 2021's
     * scatter/gather: the messages between machines shrink tp-fold). Not for a DiT with text,
     * whose text gradient is partial over tp: it sends whole. */
    bool pp_scatter;
    float bucket_mb;
    bool overlap; /* reduce gradients while backward runs (false: after it, for comparison) */
    dt_ac_mode ac;
    int ac_every; /* checkpoint block l (0-based) when l % ac_every == 0; 1 = every block */
    dt_act_compress act_compress;
    dt_offload offload;
    char offload_dir[DT_PATH_MAX];
    /* where the activations kept for the backward live: memory, or a file per rank under
     * act_offload_dir, written as the forward makes them and read back ahead of the backward */
    dt_offload act_offload;
    char act_offload_dir[DT_PATH_MAX];
    int loss_scale_window;   /* fp16: clean steps before the loss scale doubles */
    float initial_scale;     /* fp16: the loss scale of the first step (65536) */
    float offload_window_mb; /* offload=disk: memory window the moments stream through */
    /* context parallelism (ring attention): cp_size ranks of their own each hold seq_len/cp
     * tokens of every sequence through the whole model; attention passes keys and values
     * around the ring (Ulysses, sp_size, runs inside each ring rank) */
    int cp_size;
    dt_cp_split cp_split;
} dt_plugin_config;

typedef struct dt_checkpoint_config {
    char dir[DT_PATH_MAX];
    int every;                /* 0 = off */
    char resume[DT_PATH_MAX]; /* "" = start fresh, "auto" = newest in dir, or a step folder */
    int keep;                 /* newest folders to keep; 0 = all */
    bool async;               /* write shards from a background thread while training goes on */
} dt_checkpoint_config;

typedef struct dt_config {
    dt_model_config model;
    dt_data_config data;
    dt_train_config train;
    dt_optim_config optim;
    dt_plugin_config plugin;
    dt_checkpoint_config checkpoint;
} dt_config;

/* The built-in default: the small character-level GPT trained on the fortunes text. */
DT_API void dt_config_defaults(dt_config *c);
/* Read a file over *c (keys not in the file keep their values). */
DT_API dt_status dt_config_load_file(dt_config *c, const char *path);
/* Which file set each key, over several loads (--config A --config B): a key a later file
 * sets again warns, naming both files (the last one wins), as a key given twice on the
 * command line does. Zero-initialise; the paths are borrowed. */
typedef struct dt_config_sources {
    const char *by[160];
} dt_config_sources;
DT_API dt_status dt_config_load_file_from(dt_config *c, const char *path, dt_config_sources *s);
/* Parse from a string (the same grammar); `origin` names it in errors. */
DT_API dt_status dt_config_load_string(dt_config *c, const char *text, const char *origin);
/* One "section.key=value" (the leading "--" already stripped). */
DT_API dt_status dt_config_set(dt_config *c, const char *assignment);
/* Cross-field checks (positive sizes, n_embd % n_head, batch % micro_batch, ...);
 * the message names every offending key. */
DT_API dt_status dt_config_validate(const dt_config *c);
/* Full config as a parseable file (written into checkpoints and printed with --verbose). */
DT_API void dt_config_print(const dt_config *c, FILE *f);

/* The ZeRO stage in effect: plugin.type zero1/zero2/zero3 imply 1/2/3; otherwise
 * plugin.zero_stage (validate rejects a zero_stage that contradicts the type). */
DT_API int dt_config_zero_stage(const dt_config *c);
/* Fills what other keys decide: a DiT's train.seq_len and model.max_seq_len are the patch
 * tokens of its clip (frames/patch_t x height/patch_h x width/patch_w, when those divide).
 * Call after the file and the overrides, before dt_config_validate. */
DT_API void dt_config_derive(dt_config *c);
/* The first key ("section.key", a static string) whose value differs between a and b, or
 * NULL when every key agrees (string fields compare up to their terminator, floats bitwise).
 * Used by the tests' print/parse round trip and to report a resume with a changed config. */
DT_API const char *dt_config_diff(const dt_config *a, const dt_config *b);

DT_API const char *dt_arch_name(dt_arch a);
DT_API const char *dt_precision_name(dt_precision p);
DT_API const char *dt_plugin_type_name(dt_plugin_type t);
DT_API const char *dt_lr_schedule_name(dt_lr_schedule s);
DT_API const char *dt_sp_mode_name(dt_sp_mode m);
DT_API const char *dt_cp_split_name(dt_cp_split s);
DT_API const char *dt_ac_mode_name(dt_ac_mode m);
DT_API const char *dt_act_compress_name(dt_act_compress m);
DT_API const char *dt_offload_name(dt_offload m);
DT_API const char *dt_dit_attn_name(dt_dit_attn a);
DT_API const char *dt_data_source_name(dt_data_source s);

#endif
