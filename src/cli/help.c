/* The help of every dtrain command. See help.h.
 *
 * One table holds each command's name and text, so `dtrain --help`, `dtrain help COMMAND`,
 * `dtrain COMMAND --help` and the commands an error lists cannot drift apart.
 */
#include "cli/help.h"

#include <string.h>

#include "core/log.h"
#include "dtrain/version.h"

typedef struct command_help {
    const char *name, *summary, *text;
} command_help;

static const command_help commands[] = {
    {"train", "train a model (one process or under mpirun/srun)",
     "usage: dtrain train [--config FILE] [--section.key=value ...] [--print-config]\n"
     "\n"
     "Trains the model of the config on the ranks of the job. Values come from the built-in\n"
     "defaults, then FILE, then the overrides (which win wherever they stand). With no\n"
     "config: the small character-level GPT on the text of Debian's fortunes package\n"
     "(prepared into data/fortunes on first use).\n"
     "\n"
     "  --config FILE         an INI file with sections [model] [data] [train] [optim]\n"
     "                        [plugin] [checkpoint] (see configs/default.ini)\n"
     "  --section.key=value   one key, e.g. --train.steps=100 --plugin.tp_size=2\n"
     "  --print-config        print the resolved config (file + overrides) in the config\n"
     "                        format and exit; the output is itself a valid --config FILE\n"
     "\n"
     "Under mpirun or srun every rank runs the same command line.\n"},
    {"prepare", "tokenise text into token shards, or cut videos into clips",
     "usage: dtrain prepare --input FILE|DIR --out DIR [--val-fraction 0.1]\n"
     "                      [--tokenizer FILE]\n"
     "       dtrain prepare --video DIR --out DIR [--frames 8] [--height 32] [--width 32]\n"
     "                      [--fps 8] [--clips-per-video N] [--val-fraction 0.1]\n"
     "                      [--shard-mb 256]\n"
     "       dtrain prepare --video DIR --out DIR --buckets \"FxHxW:B[:W], ...\" [--fps 8] ...\n"
     "\n"
     "Byte-level tokenisation of a text file (or every file under DIR) into DIR/train.bin and\n"
     "DIR/val.bin; the last --val-fraction of the tokens (in (0, 1)) go to val.bin. With\n"
     "--tokenizer, a byte-level BPE's ids instead (a HuggingFace tokenizer.json, GPT-2's\n"
     "encoder.json with vocab.bpe beside it, or a tiktoken rank file), each file a document\n"
     "ended by the end-of-document token, in uint16 shards (uint32 past 65536 ids).\n"
     "\n"
     "With --video, every file under DIR that FFmpeg decodes, sampled at --fps, scaled and\n"
     "cut about the centre to --height x --width, as clips of --frames frames with the\n"
     "caption of FILE.txt beside each FILE, into DIR/train and DIR/val (the last\n"
     "--val-fraction of the files): shards for data.source = clips. Files it cannot read\n"
     "are skipped, counted, and the first named with its reason. With --buckets (the list\n"
     "data.buckets takes), each file's clips take its nearest bucket's shape (aspect ratio,\n"
     "then a length it fills, then frame size) into DIR/train/FxHxW and DIR/val/FxHxW.\n"},
    {"sample", "generate text or video clips from weights",
     "usage: dtrain sample --checkpoint PATH [--prompt TEXT] [--tokens 300]\n"
     "                     [--temperature 0.8] [--seed 1] [--tokenizer FILE] [--raw]\n"
     "       dtrain sample --checkpoint PATH --out FILE.gif|FILE.safetensors [--steps 32]\n"
     "                     [--count 4] [--label L] [--guidance G] [--clip FxHxW] [--seed 1]\n"
     "                     [--raw]\n"
     "\n"
     "Generates --tokens tokens after --prompt from a checkpoint step folder or an exported\n"
     ".safetensors file (train.export), on one process; --tokenizer FILE (what prepare read)\n"
     "encodes the prompt and prints the text of a BPE model. With --out, a video DiT's checkpoint\n"
     "instead: --count clips sampled from noise in --steps Euler steps of its rectified flow,\n"
     "side by side in an animated GIF (FILE.safetensors: the clips as latents, for the VAE\n"
     "that made the training latents). Clip k gets class k % n_classes, or --label L for all;\n"
     "--guidance G > 0 applies classifier-free guidance of that scale. Either samples the\n"
     "weights' average where the run kept one (train.ema_decay: in the step folder, or\n"
     "exported beside the file as NAME.ema.safetensors); --raw the weights themselves.\n"
     "--clip FxHxW samples clips of that shape (one of a run's data.buckets; the model's\n"
     "positions are fixed, so its weights serve any clip its patches cut).\n"},
    {"schedule", "print or check a pipeline schedule",
     "usage: dtrain schedule --pp P --microbatches M --kind gpipe|1f1b|interleaved|zbh1\n"
     "                       [--chunks V] [--stats]\n"
     "       dtrain schedule --check FILE --pp P [--max-in-flight N] [--rendezvous] [--stats]\n"
     "\n"
     "The first form prints the schedule of P pipeline ranks, one row per rank; the second\n"
     "validates a schedule file (every F before its B, every send matched, in-flight limits).\n"
     "--stats adds the simulated bubble as '#' lines.\n"},
    {"plan", "rank the layouts that fit a model on N ranks",
     "usage: dtrain plan --config FILE --world N [--mem SIZE] [--device NAME] [--flops F]\n"
     "                   [--flops16 F] [--bandwidth B] [--mem-bandwidth B] [--latency S]\n"
     "                   [--top K] [--json] [--section.key=value ...]\n"
     "       dtrain plan ... --explain [--rank R]\n"
     "       dtrain plan --device this --show-device\n"
     "\n"
     "Every layout dtrain can run on N ranks, checked with dtrain's own rules, its memory\n"
     "predicted per pipeline stage and its step time modelled; the layouts that fit in --mem\n"
     "are ranked by predicted step time. SIZE: bytes or with KiB/MiB/GiB/TiB; F, B: numbers\n"
     "with K/M/G/T (312T, 200G); --device a100-80gb|h100-80gb|this. --coll-bw\n"
     "AR,RS,AG,A2A,P2P[@SIZE] (once a message size) and --exposed-share F take what dtrain\n"
     "probe measured; --step-ratio F scales every pass (this: a measured step of one of the\n"
     "layout's ranks, its collectives moving nothing, over the model's); --data-rate R: rows\n"
     "a rank's data source reads or makes a second; --opt-bandwidth B: bytes/s of the\n"
     "optimizer's update (this: both timed in that step); --attn-seq PRECISION,T,F,B (once a\n"
     "sequence) the attention kernel's FLOP/s over sequences of T tokens; --gemm-rate\n"
     "PRECISION,OP,M,N,K,F (once a shape) a product's FLOP/s where it is not the peak.\n"
     "--show-device prints the device as these flags after its name, with the product\n"
     "shapes timed so far (this: the config's layout's; --explain's \"device\": every one its\n"
     "plan timed); --device this --no-probe takes them back here without measuring.\n"},
    {"probe", "measure this cluster's collectives for dtrain plan",
     "usage: dtrain probe [--mib 16[,SIZE...]] [--reps 5], under the launcher:\n"
     "       mpirun -np N dtrain probe > device.flags\n"
     "       dtrain plan --device this $(cat device.flags) --config FILE --world N\n"
     "\n"
     "Times, on the ranks the launcher starts, the collectives dtrain's runtime calls, as a\n"
     "training run calls them (under its watchdog, each after a stretch of work that streams\n"
     "8x its message through the caches, timed as what it adds to it, and at least its time\n"
     "between bare barriers), at each --mib size in MiB (ascending): all-reduce,\n"
     "reduce-scatter, all-gather, all-to-all, a message between ranks 0 and 1; then an 8-byte\n"
     "all-reduce (the latency) and how much of an all-reduce stays exposed beside a matmul\n"
     "loop that tests it between pieces. Rank 0 prints them as dtrain plan's flags (bytes a\n"
     "rank moves per second, as the planner counts them; one --coll-bw a size).\n"
     "dtrain plan --device this runs it itself on the ranks a layout puts on this machine.\n"},
    {"plot", "draw a memory timeline or training curves as SVG",
     "usage: dtrain plot --timeline FILE.json [--step N] --out FILE.svg\n"
     "       dtrain plot --metrics FILE.jsonl --out FILE.svg\n"
     "\n"
     "The first form draws one step of a memory timeline (train.mem_timeline); the second\n"
     "the training curves of a metrics log (train.metrics).\n"},
    {"convert", "turn a sharded checkpoint into one HF safetensors file, or back",
     "usage: dtrain convert --from STEP_FOLDER --to FILE.safetensors\n"
     "       dtrain convert --from FILE.safetensors --to CHECKPOINT_DIR [--seed S]\n"
     "\n"
     "The first form gathers a sharded checkpoint's weights (saved in any layout) into one\n"
     "HuggingFace safetensors file (and the weights' average, where the run kept one, into\n"
     "FILE.ema.safetensors beside it); the second writes CHECKPOINT_DIR/step-0, a sharded\n"
     "checkpoint with zero AdamW moments that any layout resumes (checkpoint.dir=DIR).\n"},
};
enum { N_COMMANDS = (int)(sizeof commands / sizeof *commands) };

int dt_cli_usage(FILE *f) {
    fprintf(f,
            "dtrain %s: distributed training on CPUs\n"
            "usage: dtrain <command> [options]\n"
            "       dtrain help <command> | dtrain <command> --help | dtrain --version\n"
            "\ncommands:\n",
            DTRAIN_VERSION);
    for (int i = 0; i < N_COMMANDS; i++)
        fprintf(f, "  %-9s %s\n", commands[i].name, commands[i].summary);
    fprintf(f, "\nexit codes: 0 done, 1 the run failed, 2 usage or config error\n");
    return f == stderr ? DT_EXIT_USAGE : DT_EXIT_OK;
}

int dt_cli_help(const char *command) {
    for (int i = 0; i < N_COMMANDS; i++)
        if (!strcmp(command, commands[i].name)) {
            fputs(commands[i].text, stdout);
            return DT_EXIT_OK;
        }
    dt_error("help: unknown command '%s' (commands: " DT_CLI_COMMANDS ")", command);
    return DT_EXIT_USAGE;
}

bool dt_cli_wants_help(int argc, char **argv) {
    for (int i = 2; i < argc; i++)
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h"))
            return true;
    return false;
}
