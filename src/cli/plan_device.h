/* The devices `dtrain plan` knows (presets with their published figures, and `this`, measured
 * on this machine now) and the size/rate arguments it reads. */
#ifndef DT_CLI_PLAN_DEVICE_H
#define DT_CLI_PLAN_DEVICE_H

#include <stdint.h>

#include "core/status.h"
#include "plan/cost.h"

/* The rates and the memory per rank of device `name` for a run of `world` ranks (`this`
 * shares the machine's memory among them and leaves its rates to dt_plan_probe_this).
 * DT_ERR_ARG naming the known devices. */
dt_status dt_plan_device_get(const char *name, int world, dt_plan_device *out, int64_t *mem);
const char *dt_plan_device_names(void); /* "a100-80gb, h100-80gb, this" */

/* "80GiB", "512 MiB", "1.5TiB", "4096" (bytes) -> bytes */
dt_status dt_plan_parse_size(const char *text, int64_t *bytes);
/* "312T", "200G", "1.5e12", "25M" (decimal multiples) -> per second */
dt_status dt_plan_parse_rate(const char *text, double *rate);
/* "200G,150G": a forward and a backward rate */
dt_status dt_plan_parse_rate2(const char *text, dt_plan_rate2 *r);
/* One --coll-bw value, "AR,RS,AG,A2A,P2P[@SIZE]" (dtrain probe's rates at a message size;
 * none: every size), into d's table of sizes, kept in order of size; a size given again
 * replaces its rates. */
dt_status dt_plan_add_coll(const char *v, dt_plan_device *d);
/* dtrain probe's line of flags (--latency, --bandwidth, --coll-bw at each size,
 * --exposed-share) into d; DT_ERR_ARG when a figure is missing or unknown. */
dt_status dt_plan_read_probe(const char *flags, dt_plan_device *d);

/* Matmul rates by shape: what `--device this` timed for the products a plan asked of it, and
 * what --gemm-rate gives back, so a plan on the printed flags repeats one on `this`. */
enum { DT_PLAN_GEMM_SHAPES = 512 };
typedef struct dt_plan_gemm_shape {
    int lp, op, m, n, k; /* op: dt_plan_gemm_op; lp: 16-bit operands */
    double flops;
} dt_plan_gemm_shape;
typedef struct dt_plan_gemm_table {
    int n;
    dt_plan_gemm_shape s[DT_PLAN_GEMM_SHAPES];
} dt_plan_gemm_table;

/* The entry of t for (lp, op, m, n, k), or NULL. */
dt_plan_gemm_shape *dt_plan_gemm_find(dt_plan_gemm_table *t, int lp, int op, int m, int n, int k);
/* A dt_plan_gemm_rate reading a dt_plan_gemm_table (ctx): 0 (the peak) for a shape not in it. */
double dt_plan_gemm_table_rate(void *ctx, int lp, dt_plan_gemm_op op, double m, double n, double k);
/* One --gemm-rate value, "PRECISION,OP,M,N,K,RATE" (fp32|16bit, fwd|dx|dw), into t; a shape
 * given again replaces its rate. */
dt_status dt_plan_add_gemm(const char *v, dt_plan_gemm_table *t);
/* t as --gemm-rate flags (each with a leading space) into out (n bytes); the bytes written. */
size_t dt_plan_gemm_flags(const dt_plan_gemm_table *t, char *out, size_t n);

/* One --attn-seq value, "PRECISION,T,FWD,BWD" (fp32|16bit, the sequence's tokens, the
 * attention kernel's FLOP/s forward and backward), into d->attn_seq; a sequence given again
 * replaces its rates. */
dt_status dt_plan_add_attn_seq(const char *v, dt_plan_device *d);

#endif
