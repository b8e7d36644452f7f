#!/bin/bash
# dtrain plan from the command line: the Llama-7B plan on 8 A100s answers in seconds with a
# ranked table whose every layout fits; --json lines parse and agree with the table's order;
# a budget nothing fits exits 1 naming the smallest layout; bad sizes, rates and devices are
# one clear error (exit 2); every --json layout is one dtrain's own config check accepts
# (a sample of them is trained for one step on the tiny model elsewhere: mem_predict.sh).
#   plan_cmd.sh DTRAIN SRC_DIR
dtrain=$1 src=$2
fail=0
ok() { echo "ok   $1"; }
bad() { echo "FAIL $1"; fail=1; }
cfg="$src/configs/llama-7b.ini"

start=$(date +%s.%N)
table=$("$dtrain" plan --config "$cfg" --world 8 --device a100-80gb --top 10) || bad "7b plan exit"
secs=$(echo "$(date +%s.%N) - $start" | bc)
[ "$(echo "$secs < 10" | bc)" = 1 ] && ok "7b plan in ${secs}s" || bad "7b plan took ${secs}s"
echo "$table" | head -3
rows=$(echo "$table" | grep -c " yes ")
[ "$rows" = 10 ] && ok "10 fitting rows" || bad "fitting rows: $rows"

json=$("$dtrain" plan --config "$cfg" --world 8 --device h100-80gb --json --top 50)
echo "$json" | /usr/bin/python3 -c '
import json, sys
rows = [json.loads(l) for l in sys.stdin]
keys = {"params", "grads", "optim", "activations", "comm", "temp", "total", "step_ms"}
assert rows and all(keys <= set(r["predicted"]) for r in rows), "predicted keys"
fit = [r for r in rows if r["fits"]]
assert all(r["predicted"]["total"] <= 80 * 2**30 for r in fit), "fits means under the budget"
t = [r["predicted"]["step_ms"] for r in fit]
assert t == sorted(t), "ranked by step time"
assert all(sum(r["predicted"][k] for k in keys - {"total", "step_ms"}) == r["predicted"]["total"]
           for r in rows), "total = sum of categories"
' && ok "json lines" || bad "json lines"

out=$("$dtrain" plan --config "$cfg" --world 8 --device a100-80gb --mem 2GiB 2>&1)
rc=$?
[ $rc = 1 ] && echo "$out" | grep -q "no layout fits in 2.0 GiB; the smallest needs" \
    && ok "nothing fits: $out" || bad "nothing fits (rc $rc): $out"

for a in "--mem 80GB" "--flops 3X" "--device tpu" "--world 0" "--bandwidth fast" "--attn 1T" \
    "--norm 1G,x" "--gemm-rate fp32,fwd,64,64,64" "--gemm-rate fp8,fwd,64,64,64,1T" \
    "--gemm-rate fp32,fwd,64,0,64,1T" "--no-probe" "--device this --no-probe --flops 1T" \
    "--data-rate 0" "--opt-bandwidth -1G" "--attn-seq fp32,0,1T,1T" "--attn-seq fp8,16,1T,1T" \
    "--attn-seq 16bit,16,1T"; do
    out=$("$dtrain" plan --config "$cfg" --world 8 $a 2>&1)
    rc=$?
    [ $rc = 2 ] && [ "$(echo "$out" | grep -c error)" -ge 1 ] && ok "$a refused: $(echo "$out" | head -1)" \
        || bad "$a (rc $rc): $out"
done
# --flops and --bandwidth scale the time, not the memory
a=$("$dtrain" plan --config "$cfg" --world 8 --json --top 1 --flops 100T --bandwidth 100G)
b=$("$dtrain" plan --config "$cfg" --world 8 --json --top 1 --flops 200T --bandwidth 200G)
/usr/bin/python3 -c '
import json, sys
a, b = json.loads(sys.argv[1]), json.loads(sys.argv[2])
assert b["predicted"]["step_ms"] < a["predicted"]["step_ms"]
' "$a" "$b" && ok "faster device, shorter step" || bad "rates"
# a slower attention kernel lengthens the step; --device this measures its kernels and prints
# them as flags
a=$("$dtrain" plan --config "$cfg" --world 8 --json --top 1 --attn 100T,100T --attn16 100T,100T)
b=$("$dtrain" plan --config "$cfg" --world 8 --json --top 1 --attn 10T,10T --attn16 10T,10T)
/usr/bin/python3 -c '
import json, sys
a, b = json.loads(sys.argv[1]), json.loads(sys.argv[2])
assert b["predicted"]["step_ms"] > a["predicted"]["step_ms"]
' "$a" "$b" && ok "slower attention, longer step" || bad "attention rates"
scratch=$(mktemp -d) # the made-up token shard's folder, to see it go
dev=$(TMPDIR=$scratch OMP_NUM_THREADS=1 "$dtrain" plan --world 1 --device this --show-device \
      --model.n_layer=1)
for f in --flops --flops16 --mem-bandwidth --attn --attn16 --attn-seq --norm --act; do
    echo "$dev" | grep -qe "$f [0-9]" || bad "--show-device lacks $f: $dev"
done
ok "device this: $dev"
echo "$dev" | grep -q -- "--overlap none" || bad "device this hides nothing: $dev"
# one rank's training step measured beside the kernels: its ratio to the model's, also where
# the config's token shard is absent (made-up ids, deleted after)
echo "$dev" | grep -Eq -- "--step-ratio [0-9.]+" && ! echo "$dev" | grep -q -- "--step-ratio 1$" &&
    ok "device this: a measured step" || bad "device this: no measured step: $dev"
# and of that step, the reading of its rows and its update, each at its own measured rate
echo "$dev" | grep -Eq -- "--data-rate [0-9.e+]+ --opt-bandwidth [0-9.e+]+" &&
    ok "device this: the rows' and the update's rates" || bad "device this: no data or update rate: $dev"
[ -z "$(ls -A "$scratch")" ] && ok "no token shard left" || bad "left behind: $(ls "$scratch")"
rmdir "$scratch"
# --explain on this machine names its figures as flags that plan it again without measuring:
# --device this --no-probe, the matmuls at each shape the plan timed; without those shapes
# (every product at the peak) the plan differs
tiny=(--config "$src/configs/tiny-gpt2.ini" --world 1 --explain)
e1=$(OMP_NUM_THREADS=1 "$dtrain" plan "${tiny[@]}" --device this)
read -r -a flags < <(/usr/bin/python3 -c 'import json, sys; print(json.loads(sys.argv[1])["device"])' "$e1")
e2=$("$dtrain" plan "${tiny[@]}" "${flags[@]}")
peak=$(echo "${flags[*]}" | sed -E 's/ --gemm-rate [^ ]+//g')
# shellcheck disable=SC2086  # the flags are words
e3=$("$dtrain" plan "${tiny[@]}" $peak)
/usr/bin/python3 -c '
import json, sys
a, b, c = (json.loads(x) for x in sys.argv[1:4])
assert a["device"].startswith("--device this --no-probe --flops "), a["device"]
assert a["device"].count("--gemm-rate fp32,") >= 3, a["device"]
assert b["device"] == a["device"], (a["device"], b["device"])
s = [x["predicted"]["step_ms"] for x in (a, b, c)]
assert abs(s[1] / s[0] - 1) < 1e-4 and abs(s[2] / s[0] - 1) > 1e-3, s
' "$e1" "$e2" "$e3" && ok "--device this --explain plans again the same, its matmuls by shape" ||
    bad "--device this --explain device: $e1 / $e2 / $e3"
# on 2 ranks the collectives come from dtrain probe under mpirun, one rate set a message size;
# where mpirun cannot run it, one warning and the copy's guess
dev2=$(OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1 \
       "$dtrain" plan --world 2 --device this --show-device --model.n_layer=1 2>&1)
[ "$(echo "$dev2" | grep -o -- "--coll-bw [^ ]*@" | wc -l)" -eq 4 ] &&
    ok "device this: collectives at 4 sizes" || bad "device this on 2 ranks: $dev2"
# the point-to-point bandwidth is dtrain probe's (its largest all-reduce), not the copy's guess
bw=$(echo "$dev2" | grep -o -- "--bandwidth [^ ]*" | cut -d' ' -f2)
[ -n "$bw" ] && echo "$dev2" | grep -q -- "--coll-bw $bw,[^ ]*@16777216" &&
    ok "device this: the probe's bandwidth" || bad "device this: bandwidth $bw, not the probe's: $dev2"
dev2=$(env -u OMPI_ALLOW_RUN_AS_ROOT -u OMPI_ALLOW_RUN_AS_ROOT_CONFIRM OMP_NUM_THREADS=1 \
       PATH=/nonexistent "$dtrain" plan --world 2 --device this --show-device --model.n_layer=1 2>&1)
[ "$(echo "$dev2" | grep -c "warning: plan: device this: .mpirun.*did not start")" -eq 1 ] &&
    ! echo "$dev2" | grep -q -- "--coll-bw" && echo "$dev2" | grep -q -- "--flops " &&
    ok "device this: no mpirun, one warning" || bad "device this without mpirun: $dev2"
"$dtrain" plan --world 8 --device h100-80gb --show-device | grep -q -- "--overlap tp,dp" \
    && ok "the GPU presets hide tp and dp" || bad "h100 --overlap"
# --explain names the device it planned on, as the flags that plan it again to the same step
ex=(--config "$cfg" --world 8 --device h100-80gb --explain --plugin.tp_size=2 --plugin.pp_size=2)
e1=$("$dtrain" plan "${ex[@]}")
flags=$(/usr/bin/python3 -c 'import json, sys; print(json.loads(sys.argv[1])["device"])' "$e1")
# shellcheck disable=SC2086  # the flags are words
e2=$("$dtrain" plan "${ex[@]}" $flags)
/usr/bin/python3 -c '
import json, sys
a, b = json.loads(sys.argv[1]), json.loads(sys.argv[2])
assert a["device"] == b["device"] and a["predicted"] == b["predicted"], (a, b)
' "$e1" "$e2" && ok "--explain's device plans again the same" || bad "--explain device: $e1 / $e2"
# each pipeline stage's part of that step, and the explained rank's stage (pp is the outer axis)
e3=$("$dtrain" plan "${ex[@]}" --rank 7)
/usr/bin/python3 -c '
import json, sys
a, b = json.loads(sys.argv[1]), json.loads(sys.argv[2])
assert (a["stage"], b["stage"]) == (0, 1) and a["stages"] == b["stages"], (a, b)
st = a["stages"]
span = [s["compute_ms"] + s["idle_ms"] for s in st]
worst = max(s["compute_ms"] + s["idle_ms"] + s["exposed_comm_ms"] + s["optimizer_ms"] for s in st)
assert len(st) == 2 and max(span) - min(span) < 0.01 and abs(worst - a["predicted"]["step_ms"]) < 0.01, st
' "$e1" "$e3" && ok "--explain: each stage, and the rank's" || bad "--explain stages: $e1 / $e3"
# what the device's software hides: tp's collectives under sequence parallelism, a pipeline's
# reduction (tp 8 x pp 2 x dp 2, ZeRO-1); --overlap none exposes them again; a bad value is one
# error
tpsp=(--config "$cfg" --world 32 --device h100-80gb --json --explain --plugin.tp_size=8
      --plugin.sp_mode=split_gather --plugin.pp_size=2 --plugin.type=zero1
      --train.micro_batch_size=1 --plugin.ac=selective)
a=$("$dtrain" plan "${tpsp[@]}" | head -1)
b=$("$dtrain" plan "${tpsp[@]}" --overlap none | head -1)
c=$("$dtrain" plan "${tpsp[@]}" --overlap dp | head -1)
/usr/bin/python3 -c '
import json, sys
a, b, c = (json.loads(x)["predicted"]["step_ms"] for x in sys.argv[1:])
assert a < c < b, (a, c, b)
' "$a" "$b" "$c" && ok "--overlap tp,dp < dp < none" || bad "--overlap: $a $b $c"
out=$("$dtrain" plan --world 8 --overlap pp 2>&1)
[ $? = 2 ] && echo "$out" | grep -q "give tp, dp, tp,dp or none" && ok "bad --overlap: $out" \
    || bad "bad --overlap: $out"
# a --plugin.KEY= on the command line pins that key; the others are still enumerated
json=$("$dtrain" plan --config "$cfg" --world 8 --json --top 200 --plugin.ac=selective \
    --plugin.act_compress=int8)
echo "$json" | /usr/bin/python3 -c '
import json, sys
rows = [json.loads(l)["layout"] for l in sys.stdin]
assert rows and all(r["plugin.ac"] == "selective" and r["plugin.act_compress"] == "int8"
                    for r in rows), "pinned ac, act_compress"
assert len({r["plugin.zero_stage"] for r in rows}) > 1, "zero stages still enumerated"
' && ok "pinned keys" || bad "pinned keys"
# unpinned, the memory levers are all enumerated: ac modes, int8, offload, fp32 and bf16
# (fp16 when the command line names it)
"$dtrain" plan --config "$cfg" --world 8 --json --top 100000 --mem 1TiB | /usr/bin/python3 -c '
import json, sys
rows = [json.loads(l)["layout"] for l in sys.stdin]
seen = lambda k: {r[k] for r in rows}
assert seen("plugin.ac") == {"none", "selective", "full"}, seen("plugin.ac")
assert seen("plugin.act_compress") == {"none", "int8"} and seen("plugin.offload") == {"none", "disk"}
assert seen("plugin.precision") == {"fp32", "bf16"}, seen("plugin.precision")
' && ok "levers enumerated" || bad "levers enumerated"
"$dtrain" plan --config "$cfg" --world 8 --json --top 100000 --mem 1TiB --plugin.precision=fp16 \
    | grep -q '"plugin.precision": "fp16"' && ok "fp16 pinned" || bad "fp16 pinned"
# pinned plain data parallelism plans (the runtime runs it), on both spellings
tiny="$src/configs/tiny-gpt2.ini"
for pin in "--plugin.type=ddp" "--plugin.type=hybrid --plugin.zero_stage=0"; do
    out=$("$dtrain" plan --config "$tiny" --world 2 --json --top 1000 $pin 2>&1)
    echo "$out" | /usr/bin/python3 -c '
import json, sys
rows = [json.loads(l)["layout"] for l in sys.stdin]
assert rows and all(r["plugin.zero_stage"] == 0 and r["plugin.type"] in ("ddp", "hybrid")
                    for r in rows), rows[:1]
' && ok "$pin plans" || bad "$pin: $out"
done
# a pinned micro-batch size is the one planned, and the search goes down to micro-batch 1
out=$("$dtrain" plan --config "$cfg" --world 8 --json --top 1000 --train.seq_len=2048 \
    --train.batch_size=96 --plugin.tp_size=1 --plugin.pp_size=1 --plugin.type=zero3 \
    --plugin.ac=none --train.micro_batch_size=6 2>&1)
echo "$out" | /usr/bin/python3 -c '
import json, sys
rows = [json.loads(l) for l in sys.stdin]
assert rows and rows[0]["fits"], "the pinned 7B FSDP layout fits in 80 GiB"
assert all(r["layout"]["train.micro_batch_size"] == 6 and r["layout"]["plugin.ac"] == "none"
           and r["layout"]["plugin.tp_size"] == 1 for r in rows), "pins kept"
' && ok "pinned micro-batch 6" || bad "pinned micro-batch 6: $(echo "$out" | head -2)"
"$dtrain" plan --config "$cfg" --world 8 --json --top 100000 --mem 1TiB --train.batch_size=64 \
    | /usr/bin/python3 -c '
import json, sys
sizes = {json.loads(l)["layout"]["train.micro_batch_size"] for l in sys.stdin}
assert 1 in sizes and 8 in sizes, sorted(sizes)
' && ok "micro-batch sizes down to 1" || bad "micro-batch sizes"
# a large vocabulary is the data reader's concern, not the plan's
"$dtrain" plan --config "$cfg" --world 8 --top 1 --model.vocab_size=128256 --model.n_kv_head=8 \
    > /dev/null && ok "vocabulary 128256 plans" || bad "vocabulary 128256"
# a pinned layout that cannot run says why; a key the search does not vary is still planned
out=$("$dtrain" plan --config "$tiny" --world 2 --plugin.tp_size=3 2>&1)
echo "$out" | grep -q "as configured: world size 2 is not divisible by .* tp_size 3" \
    && ok "tp 3 on 2 ranks: $out" || bad "tp 3 on 2 ranks: $out"
"$dtrain" plan --config "$tiny" --world 4 --plugin.pp_size=2 --plugin.pp_layers=1,1 --json \
    | grep -q '"plugin.pp_size": 2' && ok "pinned pp_layers planned" || bad "pinned pp_layers"
# plugin.pp_layers = auto: explained with the counts the time model balances; a heavy LM head
# (50257 words, 12 layers, pp 4) leaves the last stage lighter than the even split's 3
out=$("$dtrain" plan --config "$src/configs/gpt2-124m.ini" --world 4 --plugin.pp_size=4 \
    --plugin.pp_layers=auto --train.batch_size=8 --train.export= --explain 2>&1)
echo "$out" | /usr/bin/python3 -c '
import json, sys
d = json.loads(sys.stdin.read())
counts = [int(x) for x in d["layout"]["plugin.pp_layers"].split(",")]
assert len(counts) == 4 and sum(counts) == 12 and counts[-1] < 3, counts
' && ok "pp_layers=auto explained" || bad "pp_layers=auto: $out"
# --explain: step time split into compute, exposed communication and bubble, and the MFU
"$dtrain" plan --config "$cfg" --world 8 --explain --plugin.type=zero3 | /usr/bin/python3 -c '
import json, sys
d = json.loads(sys.stdin.read())
assert 0 < d["mfu"] < 1 and d["compute_ms"] > 0 and "exposed_comm_ms" in d and "bubble" in d, d
' && ok "explain: mfu, compute, exposed, bubble" || bad "explain mfu"
# context parallelism: a long sequence is planned with rings (each leaving >= 2048 tokens a
# rank, micro-batch 1), a pinned ring is kept, and a ring that does not cut seq_len says why
long=(--config "$cfg" --world 32 --device a100-80gb --train.batch_size=8 --train.seq_len=65536
      --model.max_seq_len=65536)
"$dtrain" plan "${long[@]}" --json --top 400 | /usr/bin/python3 -c '
import json, sys
rows = [json.loads(l)["layout"] for l in sys.stdin]
rings = [r for r in rows if r["plugin.cp_size"] > 1]
assert rings, "no ring among %d layouts" % len(rows)
assert all(65536 // r["plugin.cp_size"] >= 2048 for r in rings), "a ring under 2048 tokens a rank"
assert all(r["train.micro_batch_size"] == 1 for r in rings), "a ring at micro-batch > 1"
assert max(r["plugin.cp_size"] for r in rings) >= 8, "no ring of 8 or more"
' && ok "long sequence: rings planned" || bad "long sequence: no rings"
out=$("$dtrain" plan "${long[@]}" --plugin.cp_size=4 --top 3)
echo "$out" | grep -q " ring4 " && ! echo "$out" | grep " yes " | grep -qv " ring4 " &&
    ok "pinned cp_size=4 kept" || bad "pinned cp: $out"
out=$("$dtrain" plan --config "$src/configs/tiny-gpt2.ini" --world 2 --plugin.cp_size=2 \
      --train.seq_len=30 2>&1)
echo "$out" | grep -q "as configured: train.seq_len=30 does not split into the 4 chunks of plugin.cp_size=2" &&
    ok "ring that does not cut seq_len: the reason" || bad "cp refusal: $out"
# activations on disk: a search tight on memory finds a GPT layout with them (its activations
# below the same layout's in memory), a pinned act_offload=none keeps them in memory, and the
# DiT is never offered them
act=(--config "$src/configs/gpt2-124m.ini" --world 1 --device a100-80gb --train.batch_size=1
     --train.micro_batch_size=0 --train.seq_len=4096 --model.max_seq_len=4096 --mem 3.3GiB)
"$dtrain" plan "${act[@]}" --plugin.precision=fp32 --json --top 400 | /usr/bin/python3 -c '
import json, sys
rows = [json.loads(l) for l in sys.stdin]
disk = [r for r in rows if r["layout"]["plugin.act_offload"] == "disk"]
assert disk, "no layout with activations on disk among %d" % len(rows)
for r in disk:
    twin = [o for o in rows if o["layout"] == dict(r["layout"], **{"plugin.act_offload": "none"})]
    assert not twin or twin[0]["predicted"]["activations"] > r["predicted"]["activations"], r
' && ok "activations on disk searched" || bad "activations on disk not searched"
"$dtrain" plan "${act[@]}" --plugin.act_offload=none --json --top 400 | /usr/bin/python3 -c '
import json, sys
assert all(json.loads(l)["layout"]["plugin.act_offload"] == "none" for l in sys.stdin)
' && ok "pinned act_offload=none kept" || bad "pinned act_offload"
# --device this probes the activation folder's disk (and only where the config offloads to
# disk); --disk sets the rates by hand; an unwritable folder is one error
probe=$(mktemp -d)
"$dtrain" plan --config "$src/configs/tiny-gpt2.ini" --world 1 --device this --explain \
    --plugin.act_offload=disk --plugin.act_offload_dir="$probe/acts" | /usr/bin/python3 -c '
import json, sys
d = json.loads(sys.stdin.read())
assert d["disk_write_mb_s"] > 0 and d["disk_read_mb_s"] > 0 and d["act_disk_record_bytes"] > 0, d
assert d["act_disk_file_bytes"] == 2 * d["act_disk_record_bytes"], d  # 2 blocks, 1 slot
' && [ -z "$(ls -A "$probe/acts")" ] && ok "device this: disk probed, nothing left" ||
    bad "device this: disk probe"
"$dtrain" plan --config "$src/configs/tiny-gpt2.ini" --world 1 --explain --disk 1M,2M \
    --plugin.act_offload=disk | /usr/bin/python3 -c '
import json, sys
d = json.loads(sys.stdin.read())
assert d["disk_write_mb_s"] == 1 and d["disk_read_mb_s"] == 2 and d["act_disk_exposed_ms"] > 0, d
' && ok "--disk W,R sets the rates; slow disks are exposed" || bad "--disk"
out=$("$dtrain" plan --config "$src/configs/tiny-gpt2.ini" --world 1 --device this \
      --plugin.act_offload=disk --plugin.act_offload_dir=/sys/kernel 2>&1)
[ $? -eq 2 ] && echo "$out" | grep -q "error:.*act_offload_dir /sys/kernel is not writable" &&
    ok "device this: unwritable folder" || bad "probe error: $out"
rm -rf "$probe"
"$dtrain" plan --config "$src/configs/tiny-dit.ini" --world 2 --json --top 400 | /usr/bin/python3 -c '
import json, sys
assert all(json.loads(l)["layout"]["plugin.act_offload"] == "none" for l in sys.stdin)
' && ok "no activations on disk for the DiT" || bad "DiT offered activations on disk"
# buckets of clip shape: --explain gives each bucket alone (clip, batch, share, memory, time,
# bytes); the run holds the largest of their arenas, so its total is at least each one's and
# a budget that fits every bucket but the largest refuses the layout; the step time and tokens
# are the means over the buckets' shares; a bucket a split cannot cut is named
bkt=(--config "$src/configs/tiny-dit.ini" "--data.buckets=4x8x8:8:2, 2x12x16:4, 8x8x4:16"
     --plugin.type=hybrid --plugin.sp_size=2)
exp=$("$dtrain" plan "${bkt[@]}" --world 2 --explain)
echo "$exp" | /usr/bin/python3 -c '
import json, sys
d = json.loads(sys.stdin.read())
b = d["buckets"]
assert [x["clip"] for x in b] == [[4, 8, 8], [2, 12, 16], [8, 8, 4]], b
assert [x["share"] for x in b] == [0.5, 0.25, 0.25] and [x["tokens"] for x in b] == [64, 96, 64], b
total = d["predicted"]["total"]
assert total >= max(x["total"] for x in b) and all(x["comm_bytes_sp"] > 0 for x in b), d
mean = sum(x["share"] * x["step_ms"] for x in b)
assert abs(d["predicted"]["step_ms"] - mean) < 2e-3, (d["predicted"]["step_ms"], mean)
' && ok "explain: each bucket, the run over them" || bad "explain over buckets: $exp"
small=$(echo "$exp" | /usr/bin/python3 -c '
import json, sys
b = json.loads(sys.stdin.read())["buckets"]
print(sorted(x["total"] for x in b)[-2] + 1)')
out=$("$dtrain" plan "${bkt[@]}" --world 2 --mem "$small" --plugin.precision=fp32       --plugin.ac=none --plugin.zero_stage=0 --plugin.act_compress=none       --plugin.offload=none --train.micro_batch_size=0 --plugin.microbatches=0 2>&1)
echo "$out" | grep -q "no layout fits" && ok "the largest bucket decides what fits" ||
    bad "a layout whose largest bucket does not fit: $out"
# the search over buckets splits every bucket into one count of micro-batches (a pipeline
# runs one schedule), so it finds pipelines; the table shows each bucket's micro-batch
"$dtrain" plan --config "$src/configs/tiny-dit.ini" "--data.buckets=4x8x8:8:2, 2x12x16:4, 8x8x4:16" \
    --world 4 --json --top 1000 | /usr/bin/python3 -c '
import json, sys
rows = [json.loads(l)["layout"] for l in sys.stdin]
pipes = [r for r in rows if r["plugin.pp_size"] == 2]
assert pipes and all(r["plugin.microbatches"] >= 2 and r["train.micro_batch_size"] == 0
                     for r in pipes), pipes[:2]
' && ok "search over buckets: pipelines by micro-batch count" || bad "search over buckets"
"$dtrain" plan --config "$src/configs/tiny-dit.ini" "--data.buckets=4x8x8:8:2, 2x12x16:4, 8x8x4:16" \
    --world 4 --top 3 | grep -q "dp4 mb2/1/4 x1" && ok "each bucket's micro-batch shown" ||
    bad "bucket micro-batches in the table"
out=$("$dtrain" plan "${bkt[@]}" --world 4 --plugin.sp_size=4 --explain 2>&1)
echo "$out" | grep -q "data.buckets: bucket 1, 2x12x16 (batch 4)" &&
    ok "a bucket the split cannot cut is named" || bad "bucket split: $out"
# a schedule's buffers per rank: 1F1B's slots p - r, one boundary gradient a rank
out=$("$dtrain" schedule --pp 4 --microbatches 8 --kind 1f1b --stats | tail -1)
[ "$out" = "# buffers per rank, activation slots / inbox / boundary gradients: 4/0/1 3/1/1 2/1/1 1/1/1" ] \
    && ok "schedule buffers" || bad "schedule buffers: $out"
exit $fail
