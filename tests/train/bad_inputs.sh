#!/bin/bash
# What a new user tried (issue 11, "Found when tried as a new user would"): each case ends in
# one clear error naming what is wrong (never a signal, a hang or exit 0 with damage), or,
# where a case is legitimate, in the documented behaviour. Hostile checkpoint state is made
# with tests/io/edit_manifest.py (which re-checksums the manifest, as a hostile user would),
# hostile weights files with tests/io/st_edit.py.
#   bad_inputs.sh DTRAIN SRC_DIR
set -uo pipefail
dtrain=$1 src=$2
work=$(mktemp -d)
[ -n "${KEEP:-}" ] || trap 'rm -rf "$work"' EXIT; echo "work: $work"
cd "$work"
export OMP_NUM_THREADS=1 OMP_WAIT_POLICY=PASSIVE
edit=("/usr/bin/python3" "$src/tests/io/edit_manifest.py")
st=("/usr/bin/python3" "$src/tests/io/st_edit.py")
"$dtrain" prepare --input "$src/src/core" --out data > /dev/null || exit 1
run=("$dtrain" train --config "$src/configs/tiny-gpt2.ini" --data.train=data/train.bin
     --train.steps=4)
passed=0 failed=0
check() { if eval "$2"; then passed=$((passed + 1)); else echo "FAIL: $1"; failed=$((failed + 1)); fi; }
# NAME EXIT PATTERN -- COMMAND...: exits with EXIT (1 or 2; never a signal) within 60 s,
# stderr's first "error" line matches PATTERN, and no step was trained when NOSTEP is set
fails() {
    local name=$1 want=$2 pattern=$3
    shift 4
    timeout 60 "$@" > "$name.out" 2> "$name.err"
    local rc=$?
    if [ $rc -ne "$want" ] || ! grep -q "dtrain: error:.*$pattern" "$name.err"; then
        echo "FAIL: $name: rc=$rc (want $want), stderr:"; head -5 "$name.err"
        failed=$((failed + 1))
    else
        passed=$((passed + 1))
    fi
}
no_step() { check "$1: nothing trained" "! grep -q '^dtrain: step ' $1.out $1.err"; }

# a good run: its checkpoints (2, 4) and export are the material of the cases below
"${run[@]}" --checkpoint.dir=ck --checkpoint.every=2 --checkpoint.keep=0 \
    --train.export=good.safetensors > good.log 2>&1 || { echo "reference run failed"; exit 1; }

# ---- crashes ------------------------------------------------------------------------------
"${st[@]}" good.safetensors head0.safetensors meta n_head 0
fails sample_n_head_0 2 "head0.safetensors: model.n_head=0 must be > 0" -- \
    "$dtrain" sample --checkpoint head0.safetensors --tokens 5
# the loader's position: 1e12 used to SIGSEGV, a smaller one to read past the end, exit 0
# (the shard's own token count: no batch starts there, however large the prepared corpus)
shard_tokens=$(( ($(stat -c %s data/train.bin) - 1024) / 2 ))
for pos in 1000000000000 $shard_tokens; do
    rm -rf c && cp -r ck c && "${edit[@]}" c/step-4 data_pos=$pos
    fails data_pos_$pos 1 "data position $pos is outside data/train.bin" -- \
        "${run[@]}" --train.steps=6 --checkpoint.dir=c --checkpoint.resume=c/step-4
done

# ---- hangs: sizes checked before anything is allocated -------------------------------------
fails n_layer_1e9 2 "training needs at least .* GiB per rank.*this machine has" -- \
    "${run[@]}" --model.n_layer=1000000000
"${st[@]}" good.safetensors layers.safetensors meta n_layer 1000000000
fails sample_n_layer_1e9 2 "its weights need .* GiB, and this machine has" -- \
    "$dtrain" sample --checkpoint layers.safetensors --tokens 5
rm -rf c && cp -r ck c && "${edit[@]}" c/step-4 step=1e30
fails step_1e30 1 '"step" is missing or not a whole number' -- \
    "${run[@]}" --checkpoint.dir=c --checkpoint.resume=c/step-4

# ---- silent wrong results ------------------------------------------------------------------
"${run[@]}" --model.n_layer=3 --checkpoint.dir=ck3 --checkpoint.every=2 \
    --train.export=three.safetensors > three.log 2>&1 || echo "3-layer run failed"
fails resume_3_into_2 2 "model.n_layer is 3, the run's 2" -- \
    "${run[@]}" --checkpoint.dir=ck3 --checkpoint.resume=ck3/step-4
rm -rf c && cp -r ck c && "${edit[@]}" c/step-4 model.n_head=2
fails resume_n_head 2 "model.n_head is 2, the run's 4" -- \
    "${run[@]}" --checkpoint.dir=c --checkpoint.resume=c/step-4
fails init_3_into_2 2 "three.safetensors: the file's model.n_layer is 3, the run's 2" -- \
    "${run[@]}" --model.init=three.safetensors
"${st[@]}" three.safetensors three_nometa.safetensors nometa
fails init_extra_tensor 2 "tensor h.2.ln_1.weight is not part of the run's model" -- \
    "${run[@]}" --model.init=three_nometa.safetensors
"${st[@]}" good.safetensors headmeta.safetensors meta n_head 2
fails init_n_head 2 "model.n_head is 2, the run's 4" -- "${run[@]}" --model.init=headmeta.safetensors
rm -rf c && cp -r ck c && "${edit[@]}" c/step-4 step=100
fails step_100_in_step_4 1 "c/step-4: the folder is step 4 but its state says step 100" -- \
    "${run[@]}" --checkpoint.dir=c --checkpoint.resume=c/step-4
"${run[@]}" --checkpoint.dir=c --checkpoint.resume=auto > auto100.log 2>&1
check "step 100 in step-4: resume=auto skips it" \
    "grep -q 'skipping damaged checkpoint c/step-4.*says step 100' auto100.log && grep -q 'resumed from c/step-2 at step 2' auto100.log"
rm -rf c && cp -r ck c && "${edit[@]}" c/step-4 'seed="abc"'
fails seed_abc 1 '"seed" is missing or not a decimal string.*"abc"' -- \
    "${run[@]}" --checkpoint.dir=c --checkpoint.resume=c/step-4
# the same in the whole format of older dtrain (state.json)
"$dtrain" convert --from ck/step-4 --to w4.safetensors > /dev/null &&
    /usr/bin/python3 "$src/tests/train/make_whole_ckpt.py" ck/step-4 w4.safetensors whole/step-4
for e in 'step=100:the folder is step 4 but its state says step 100' \
         'data_pos=1000000000000:data position 1000000000000 is outside' \
         'seed="abc":"seed" is missing or not a decimal string' \
         'step=1e30:"step" is missing or not a whole number'; do
    rm -rf w && cp -r whole w
    /usr/bin/python3 -c "import json,sys; p='w/step-4/state.json'; j=json.load(open(p)); k,v=sys.argv[1].split('=',1); j[k]=json.loads(v); json.dump(j,open(p,'w'))" "${e%%:*}"
    fails "whole_${e%%=*}" 1 "${e#*:}" -- \
        "${run[@]}" --train.steps=6 --checkpoint.dir=w --checkpoint.resume=w/step-4
done
"${st[@]}" good.safetensors short.safetensors hlen -1
fails header_length_minus_1 1 "short.safetensors: 1 trailing bytes after the last tensor" -- \
    "${run[@]}" --model.init=short.safetensors
"${st[@]}" good.safetensors trail.safetensors trailing 3
fails trailing_bytes 1 "trail.safetensors: 3 trailing bytes after the last tensor" -- \
    "$dtrain" sample --checkpoint trail.safetensors --tokens 5
# non-finite weights: never written; the message names step, rank and tensor, and suggests
# grad_clip only when it is not set
fails diverged 2 "step [0-9]*: the .* are not finite (first on rank 0 at [a-z_.0-9]*\[[0-9]*\] = " -- \
    "${run[@]}" --optim.lr=3e38 --checkpoint.dir=nan --checkpoint.every=1 \
    --train.export=nan.safetensors
check "diverged: no export" "[ ! -e nan.safetensors ]"
check "diverged: grad_clip is set, not suggested" "! grep -q 'or set plugin.grad_clip' diverged.err"
check "diverged: every saved checkpoint is finite" \
    "for d in nan/step-*; do [ -d \"\$d\" ] || continue; $dtrain convert --from \$d --to \$d.st > /dev/null || exit 1; done"
fails diverged_noclip 2 "not finite.*or set plugin.grad_clip" -- \
    "${run[@]}" --optim.lr=3e38 --plugin.grad_clip=0
"${st[@]}" good.safetensors nanw.safetensors nan h.0.mlp.c_fc.weight
fails init_nan 1 "nanw.safetensors: tensor h.0.mlp.c_fc.weight holds a non-finite value" -- \
    "${run[@]}" --model.init=nanw.safetensors
# metrics on a full disk: an error and a non-zero exit, not a line cut short and exit 0
fails metrics_full 1 "cannot write metrics file /dev/full" -- "${run[@]}" --train.metrics=/dev/full
# duplicate keys are refused (which was meant is a guess)
printf '[train]\nsteps = 2\nsteps = 3\n' > dup.ini
fails dup_file 2 "train.steps is set twice in dup.ini, on lines 2 and 3" -- \
    "${run[@]}" --config dup.ini
"${run[@]}" --train.steps=1 > dup_cli.log 2>&1
check "duplicate override: warned naming both, the last wins" \
    "grep -q 'warning: train: --train.steps is given twice (--train.steps=4, then --train.steps=1): the last one wins' dup_cli.log && grep -q 'step     1/1' dup_cli.log"
"${run[@]}" --train.steps=1 --train.eval_every=1 --data.val= > noval.log 2>&1
check "eval_every without data.val: warned" \
    "grep -q 'warning: train.eval_every=1 but data.val is empty' noval.log"

# ---- damage resume=auto used to take -------------------------------------------------------
rm -rf c && cp -r ck c && cp -r c/step-2 c/step-0004 && cp -r c/step-2 c/step-99999999999999999999
"${run[@]}" --train.steps=6 --checkpoint.dir=c --checkpoint.resume=auto > oddnames.log 2>&1
check "step-0004 and step-99999999999999999999 are not checkpoints" \
    "grep -q 'resumed from c/step-4 at step 4' oddnames.log"
# a step folder without its manifest: resume=auto names it as it skips it
rm -rf c && cp -r ck c && mkdir c/step-9
"${run[@]}" --train.steps=6 --checkpoint.dir=c --checkpoint.resume=auto > nomanifest.log 2>&1
check "step-9 without a manifest: skipped by name" \
    "grep -q 'warning: checkpoint: c/step-9 has neither manifest.json nor state.json: skipped' nomanifest.log && grep -q 'resumed from c/step-4 at step 4' nomanifest.log"
# saving over an existing step-N swaps the folders whole (renameat2 RENAME_EXCHANGE): the
# new step-4 verifies, and no partial folder is left
rm -rf c && cp -r ck c
"${run[@]}" --checkpoint.dir=c --checkpoint.every=2 --checkpoint.keep=0 > again.log 2>&1
"${run[@]}" --train.steps=6 --checkpoint.dir=c --checkpoint.resume=auto > again2.log 2>&1
check "saving over step-4: resumable, nothing partial" \
    "grep -q 'resumed from c/step-4 at step 4' again2.log && ! ls -d c/*partial* 2>/dev/null && ! grep -q skipping again2.log"
# two runs given one folder at once: each writer has its own partial folder
rm -rf two
"${run[@]}" --train.steps=6 --checkpoint.dir=two --checkpoint.every=1 > two_a.log 2>&1 &
"${run[@]}" --train.steps=6 --optim.lr=1e-4 --checkpoint.dir=two --checkpoint.every=1 > two_b.log 2>&1
wait
"${run[@]}" --train.steps=7 --checkpoint.dir=two --checkpoint.resume=auto > two_c.log 2>&1
check "two writers: every folder verifies" \
    "grep -q 'resumed from two/step-6 at step 6' two_c.log && ! grep -q skipping two_c.log"

# ---- late errors: every output path is checked before the first step -----------------------
touch afile
for key in export mem_report trace metrics; do
    fails late_$key 1 "train.$key=afile/out: afile" -- "${run[@]}" --train.$key=afile/out
    no_step late_$key
done
fails late_mem_timeline 1 "train.mem_timeline: cannot write afile/out" -- \
    "${run[@]}" --train.mem_timeline=afile/out
no_step late_mem_timeline
fails late_ckpt_dir 1 "checkpoint.dir=afile/ck" -- \
    "${run[@]}" --checkpoint.dir=afile/ck --checkpoint.every=2
no_step late_ckpt_dir
fails late_export_folder 2 "train.export=data is a folder" -- "${run[@]}" --train.export=data
"${run[@]}" --train.steps=1 --train.export=new/sub/m.safetensors > mk.log 2>&1
check "a missing output folder is created" "[ -f new/sub/m.safetensors ]"

# ---- token shard truncated while a run reads it: an error naming it, not SIGBUS ------------
cp data/train.bin shrink.bin
"${run[@]}" --data.train=shrink.bin --train.steps=100000 --train.log_every=1 > shrink.out \
    2> shrink.err &
pid=$!
for _ in $(seq 100); do grep -q "step     2" shrink.out shrink.err && break; sleep 0.1; done
truncate -s 1100 shrink.bin
wait $pid
rc=$?
check "shard shrank: exit 1 naming the file (rc $rc)" \
    "[ $rc -eq 1 ] && grep -q 'shrink.bin: cannot read tokens.*shrank' shrink.err"

# ---- unclear messages ----------------------------------------------------------------------
fails empty_data_train 2 "data.train is empty: give a token shard" -- \
    "$dtrain" train --config "$src/configs/tiny-gpt2.ini" --data.train=
fails sample_tokens_0 2 "sample: --tokens: .0. is not a whole number from 1 to 1048576" -- \
    "$dtrain" sample --checkpoint good.safetensors --tokens 0
fails config_no_value 2 "train: --config needs a file" -- "$dtrain" train --config
fails sample_no_value 2 "sample: --checkpoint needs a value" -- "$dtrain" sample --checkpoint
fails schedule_no_pp 2 "schedule: --pp P (the number of pipeline stages) is required" -- \
    "$dtrain" schedule --microbatches 4 --kind gpipe
fails schedule_pp_no_value 2 "schedule: --pp needs a value" -- "$dtrain" schedule --pp
fails schedule_pp_0 2 "schedule: --pp 0: the number of pipeline stages must be >= 1" -- \
    "$dtrain" schedule --pp 0 --microbatches 4 --kind gpipe
fails schedule_no_kind 2 "schedule: --kind gpipe|1f1b|interleaved|zbh1 is required" -- \
    "$dtrain" schedule --pp 2 --microbatches 4
fails schedule_no_mb 2 "schedule: --microbatches M (>= 1) is required with --kind" -- \
    "$dtrain" schedule --pp 2 --kind 1f1b
fails schedule_check_no_value 2 "schedule: --check needs a value" -- \
    "$dtrain" schedule --pp 2 --check
fails schedule_kind_no_value 2 "schedule: --kind needs a value" -- "$dtrain" schedule --pp 2 --kind

# ---- hostile checkpoints (issue 25, item 3): the checksum matches, the fields do not --------
S0=$(/usr/bin/python3 -c 'import json,sys; print(json.dumps(json.load(open(sys.argv[1]))["files"][0]["slices"][0]))' ck/step-4/manifest.json)
O0=$(/usr/bin/python3 -c 'import json,sys; print(json.dumps(json.load(open(sys.argv[1]))["files"][0]["slices"][0]["offsets"]))' ck/step-4/manifest.json)
hostile() { # NAME PATTERN EDIT...: the edited step folder refused on resume, nothing trained
    local name=$1 pattern=$2; shift 2
    rm -rf c && cp -r ck c && "${edit[@]}" c/step-4 "$@"
    fails "$name" 1 "$pattern" -- "${run[@]}" --train.steps=6 --checkpoint.dir=c \
        --checkpoint.resume=c/step-4
    no_step "$name"
}
hostile slice_on_other_bytes "slices of wte.weight and wpe.weight share bytes" \
    "files.0.slices.1.offsets=$O0"
hostile slice_twice "the slices of wte.weight do not cover it exactly once .*an overlap" \
    "files.0.slices.+=$S0"
hostile slice_short "the slices of wte.weight do not cover it exactly once .*ends at element" \
    "files.0.slices.0.count=100"
hostile format_other '"format" is "other", not "dtrain-sharded"' 'format="other"'
hostile version_2 '"version" is 2; this build reads version 1' "version=2"
hostile dtype_f16 "tensor 0 (wte.weight) has dtype F16 in the manifest" 'tensors.0.dtype="F16"'
# model.init's metadata is validated as a config's (issue 25, item 3)
"${st[@]}" good.safetensors seq0.safetensors meta max_seq_len 0
fails init_max_seq_len_0 2 "seq0.safetensors: model.max_seq_len=0 must be > 0" -- \
    "${run[@]}" --model.init=seq0.safetensors
"${st[@]}" good.safetensors seqbig.safetensors meta max_seq_len 1073741824
fails init_max_seq_len_2_30 2 "model.max_seq_len=1073741824 is over dtrain's limit" -- \
    "${run[@]}" --model.init=seqbig.safetensors
"${st[@]}" good.safetensors epsnan.safetensors meta norm_eps nan
fails init_norm_eps_nan 2 "epsnan.safetensors: model.norm_eps=nan must be > 0" -- \
    "${run[@]}" --model.init=epsnan.safetensors
"${st[@]}" good.safetensors epsneg.safetensors meta norm_eps -1
fails init_norm_eps_negative 2 "epsneg.safetensors: model.norm_eps=-1 must be > 0" -- \
    "${run[@]}" --model.init=epsneg.safetensors

# keys a layout does not use are still checked; configs that set one key warn (item 4)
fails pp_layers_typo_at_pp1 2 'plugin.pp_layers="1,x": entry 2 is not a layer count' -- \
    "${run[@]}" --plugin.pp_layers=1,x
no_step pp_layers_typo_at_pp1
fails pp_schedule_missing_at_pp1 1 "plugin.pp_schedule: /nonexistent: cannot open" -- \
    "${run[@]}" --plugin.pp_schedule=file:/nonexistent
"$dtrain" schedule --pp 2 --microbatches 1 --kind gpipe > pp2.sched
fails pp_schedule_for_pp2_at_pp1 2 "pp2.sched is for pp 2.*this run has pp_size 1" -- \
    "${run[@]}" --plugin.pp_schedule=file:pp2.sched
printf '[train]\nsteps = 1\n' > one.ini
printf '[train]\nsteps = 2\n' > two.ini
"${run[@]}" --config one.ini --config two.ini > twice.out 2> twice.err
check "two configs setting train.steps warn, naming both" \
    "grep -q 'warning: train.steps is set by one.ini and again by two.ini: the last one wins' twice.err"

# messages that name their problem (issue 25, item 6)
"${st[@]}" good.safetensors embd.safetensors meta n_embd 32
fails sample_n_embd_edited 2 "its metadata say model.n_embd is 32, but its token table wte.weight is 64 wide" -- \
    "$dtrain" sample --checkpoint embd.safetensors --tokens 3
rm -rf nm && cp -r ck nm && rm nm/step-4/manifest.json
fails resume_no_manifest 1 "nm/step-4: a sharded checkpoint's rank files without its manifest.json" -- \
    "${run[@]}" --checkpoint.dir=nm --checkpoint.resume=nm/step-4
fails sample_checkpoint_dir 2 "ck is a checkpoint.dir, not a step folder: .*ck/step-4" -- \
    "$dtrain" sample --checkpoint ck --tokens 3

echo "$passed passed, $failed failed"
[ $failed -eq 0 ]
