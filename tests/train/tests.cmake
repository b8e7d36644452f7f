# Bit-exact resume, for both architectures, with micro-batches, shuffling, bf16, and fp16 with
# a loss scale that overflows and grows across the checkpoint.
set(DT_RESUME_CASES
    "gpt2_plain|gpt2"
    "llama_plain|llama"
    "gpt2_micro_shuffle|gpt2|--train.micro_batch_size=2|--data.shuffle=true"
    "llama_bf16|llama|--plugin.precision=bf16"
    "gpt2_fp16|gpt2|--plugin.precision=fp16|--plugin.initial_scale=8388608|--plugin.loss_scale_window=2")
foreach(case ${DT_RESUME_CASES})
  string(REPLACE "|" ";" parts "${case}")
  list(POP_FRONT parts name)
  add_test(NAME train/resume_${name}
           COMMAND ${CMAKE_CURRENT_LIST_DIR}/resume.sh $<TARGET_FILE:dtrain> ${CMAKE_SOURCE_DIR}
                   ${parts})
  set_tests_properties(train/resume_${name} PROPERTIES LABELS "train"
                       ENVIRONMENT "OMP_NUM_THREADS=2;OMP_WAIT_POLICY=PASSIVE")
endforeach()

# Every data-parallel layout equals the single process (runs mpirun itself).
foreach(arch gpt2 llama)
  add_test(NAME train/layouts_${arch}
           COMMAND ${CMAKE_CURRENT_LIST_DIR}/layouts.sh $<TARGET_FILE:dtrain> ${CMAKE_SOURCE_DIR} ${arch})
  set_tests_properties(train/layouts_${arch} PROPERTIES LABELS "train;mpi" TIMEOUT 900)
endforeach()

# The Booster example (examples/booster_train.c) trains with its own loop on 2 ranks.
add_test(NAME train/booster_example
         COMMAND ${CMAKE_COMMAND} -DDTRAIN=$<TARGET_FILE:dtrain> -DEXAMPLE=$<TARGET_FILE:booster_train>
                 -DMPIEXEC=${MPIEXEC_EXECUTABLE} -DSRC=${CMAKE_SOURCE_DIR}
                 -P ${CMAKE_CURRENT_LIST_DIR}/booster_example.cmake)
set_tests_properties(train/booster_example PROPERTIES LABELS "train;mpi"
    ENVIRONMENT "OMPI_ALLOW_RUN_AS_ROOT=1;OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1;OMP_NUM_THREADS=1;OMP_WAIT_POLICY=PASSIVE")

foreach(arch gpt2 llama)
  add_test(NAME train/bf16_and_sample_${arch}
           COMMAND ${CMAKE_CURRENT_LIST_DIR}/bf16_and_sample.sh $<TARGET_FILE:dtrain> ${CMAKE_SOURCE_DIR} ${arch})
  set_tests_properties(train/bf16_and_sample_${arch} PROPERTIES LABELS "train"
                       ENVIRONMENT "OMP_NUM_THREADS=2;OMP_WAIT_POLICY=PASSIVE")
endforeach()

# Tensor and sequence parallel layouts equal the single process (runs mpirun itself).
foreach(arch gpt2 llama)
  add_test(NAME train/tp_layouts_${arch}
           COMMAND ${CMAKE_CURRENT_LIST_DIR}/tp_layouts.sh $<TARGET_FILE:dtrain> ${CMAKE_SOURCE_DIR} ${arch})
  set_tests_properties(train/tp_layouts_${arch} PROPERTIES LABELS "train;mpi" TIMEOUT 900)
endforeach()

# Context parallelism (ring attention) alone and with every other split equals the single
# process; checkpointing reruns the ring bit for bit; bad ring layouts are refused.
foreach(arch gpt2 llama)
  add_test(NAME train/cp_layouts_${arch}
           COMMAND ${CMAKE_CURRENT_LIST_DIR}/cp_layouts.sh $<TARGET_FILE:dtrain> ${CMAKE_SOURCE_DIR} ${arch})
  set_tests_properties(train/cp_layouts_${arch} PROPERTIES LABELS "train;mpi" TIMEOUT 900)
endforeach()

# Documents kept apart (data.doc_mask) in every layout equal the single process.
foreach(arch gpt2 llama)
  add_test(NAME train/doc_layouts_${arch}
           COMMAND ${CMAKE_CURRENT_LIST_DIR}/doc_layouts.sh $<TARGET_FILE:dtrain> ${CMAKE_SOURCE_DIR} ${arch})
  set_tests_properties(train/doc_layouts_${arch} PROPERTIES LABELS "train;mpi" TIMEOUT 900)
endforeach()

# Pipeline layouts and schedules equal the single process; broken schedules are refused.
foreach(arch gpt2 llama)
  add_test(NAME train/pp_layouts_${arch}
           COMMAND ${CMAKE_CURRENT_LIST_DIR}/pp_layouts.sh $<TARGET_FILE:dtrain> ${CMAKE_SOURCE_DIR} ${arch})
  set_tests_properties(train/pp_layouts_${arch} PROPERTIES LABELS "train;mpi" TIMEOUT 1200)
endforeach()

# The end-of-run sample in every layout: exit 0 and the single process's text.
foreach(arch gpt2 llama)
  add_test(NAME train/sample_layouts_${arch}
           COMMAND ${CMAKE_CURRENT_LIST_DIR}/sample_layouts.sh $<TARGET_FILE:dtrain> ${CMAKE_SOURCE_DIR} ${arch})
  set_tests_properties(train/sample_layouts_${arch} PROPERTIES LABELS "train;mpi" TIMEOUT 600)
endforeach()

# fp16 with dynamic loss scaling: tracks fp32, skips overflowed steps (nothing updated), and
# every layout logs the same scale and skips (runs mpirun itself).
foreach(arch gpt2 llama)
  add_test(NAME train/fp16_${arch}
           COMMAND ${CMAKE_CURRENT_LIST_DIR}/fp16.sh $<TARGET_FILE:dtrain> ${CMAKE_SOURCE_DIR} ${arch})
  set_tests_properties(train/fp16_${arch} PROPERTIES LABELS "train;mpi" TIMEOUT 900)
endforeach()

# Memory timelines (train.mem_timeline) on one process and a 2-stage pipeline, and dtrain plot.
add_test(NAME train/mem_timeline
         COMMAND ${CMAKE_CURRENT_LIST_DIR}/mem_timeline.sh $<TARGET_FILE:dtrain> ${CMAKE_SOURCE_DIR})
set_tests_properties(train/mem_timeline PROPERTIES LABELS "train;mpi" TIMEOUT 600)

# Activation checkpointing gives the same bits as without it, in every layout, with less memory.
foreach(arch gpt2 llama)
  add_test(NAME train/ac_layouts_${arch}
           COMMAND ${CMAKE_CURRENT_LIST_DIR}/ac_layouts.sh $<TARGET_FILE:dtrain> ${CMAKE_SOURCE_DIR} ${arch})
  set_tests_properties(train/ac_layouts_${arch} PROPERTIES LABELS "train;mpi" TIMEOUT 600)
endforeach()

# Optimizer state on disk gives the bits of offload=none at 1 process, dp2 x ZeRO 1-3 and
# pp2; optim memory is the window; resume through the files; bad offload_dir on every rank.
foreach(arch gpt2 llama)
  add_test(NAME train/offload_${arch}
           COMMAND ${CMAKE_CURRENT_LIST_DIR}/offload.sh $<TARGET_FILE:dtrain> ${CMAKE_SOURCE_DIR} ${arch})
  set_tests_properties(train/offload_${arch} PROPERTIES LABELS "train;mpi" TIMEOUT 900)
endforeach()

# Sharded checkpoints: saved in dp2 ZeRO-3, tp2, pp2, sp2, bf16 and offload=disk, resumed in
# one process, the same layout (byte-identical) and another layout (1e-5); and saved in
# pp2 x tp2 x dp2 (8 ranks), resumed in dp4 x ZeRO-3, tp4, pp4 and one process.
foreach(arch gpt2 llama)
  add_test(NAME train/ckpt_layouts_${arch}
           COMMAND ${CMAKE_CURRENT_LIST_DIR}/ckpt_layouts.sh $<TARGET_FILE:dtrain> ${CMAKE_SOURCE_DIR} ${arch})
  set_tests_properties(train/ckpt_layouts_${arch} PROPERTIES LABELS "train;mpi" TIMEOUT 900)
endforeach()

# Damaged checkpoints are skipped by resume=auto; a save on a full disk or into an unwritable
# folder fails cleanly and leaves nothing resume=auto could take.
add_test(NAME train/ckpt_faults
         COMMAND ${CMAKE_CURRENT_LIST_DIR}/ckpt_faults.sh $<TARGET_FILE:dtrain> ${CMAKE_SOURCE_DIR} gpt2)
set_tests_properties(train/ckpt_faults PROPERTIES LABELS "train" TIMEOUT 300)

# No rank waits forever: a stalled rank (DT_TEST_STALL) ends the job with the watchdog's report
# (dp all-reduce, pp receive), a short stall is waited out, a SIGKILLed rank ends the job.
add_test(NAME train/faults
         COMMAND ${CMAKE_CURRENT_LIST_DIR}/faults.sh $<TARGET_FILE:dtrain> ${CMAKE_SOURCE_DIR})
set_tests_properties(train/faults PROPERTIES LABELS "train;mpi" TIMEOUT 300)

# Crash harness: kill -9 at seeded random moments, restart with resume = auto, and the final
# export equals an uninterrupted run's byte for byte (more trials by hand: --trials N --seed S).
add_test(NAME train/crash_harness
         COMMAND ${CMAKE_CURRENT_LIST_DIR}/crash_harness.sh $<TARGET_FILE:dtrain> ${CMAKE_SOURCE_DIR}
                 --trials 3 --seed 11 --kills 2)
set_tests_properties(train/crash_harness PROPERTIES LABELS "train;mpi" TIMEOUT 300)

# Async checkpoint save: folders byte-identical to the sync save's (dp2 ZeRO-2, offloaded
# moments, pp2 x tp2), exact resume from one, a failed background write reported on every
# rank with no step-N or partial folder left.
add_test(NAME train/ckpt_async
         COMMAND ${CMAKE_CURRENT_LIST_DIR}/ckpt_async.sh $<TARGET_FILE:dtrain> ${CMAKE_SOURCE_DIR} gpt2)
set_tests_properties(train/ckpt_async PROPERTIES LABELS "train;mpi" TIMEOUT 600)

# A checkpoint's save and load add at most the 8 MiB ckpt.io buffer to each rank's temporary
# memory (moments in memory or offloaded, 1, 2 and 4 ranks); async's staging copy is counted
# and predicted to the byte.
add_test(NAME train/ckpt_memory
         COMMAND ${CMAKE_CURRENT_LIST_DIR}/ckpt_memory.sh $<TARGET_FILE:dtrain> ${CMAKE_SOURCE_DIR} gpt2)
set_tests_properties(train/ckpt_memory PROPERTIES LABELS "train;mpi" TIMEOUT 600)

# What a new user tried (issue 11): crashes, hangs, silent wrong results, damage resume=auto
# took, late errors and unclear messages, each now a clear error or the documented behaviour.
add_test(NAME train/bad_inputs
         COMMAND ${CMAKE_CURRENT_LIST_DIR}/bad_inputs.sh $<TARGET_FILE:dtrain> ${CMAKE_SOURCE_DIR})
set_tests_properties(train/bad_inputs PROPERTIES LABELS "train" TIMEOUT 600)

# The engine (ZeRO 0-3, micro-batches, the tied sum) and the pipeline executor through the
# model interface alone, on a toy model that is not GPT, against its closed-form gradients.
dt_add_mpi_test(train mpi_test_model_seam "train;mpi")

# The video DiT through dtrain train and dtrain sample: a tiny config trains briefly, its
# sampled GIF's background share, motion and mean fall within the training clips' range and
# far from noise (tests/train/clip_stats.c decodes the GIFs), and every bad sample input is
# one clear error.
add_executable(train_clip_stats ${CMAKE_CURRENT_LIST_DIR}/clip_stats.c)
target_link_libraries(train_clip_stats PRIVATE dtrain_static PkgConfig::GIF)
add_test(NAME train/dit_sample
         COMMAND ${CMAKE_CURRENT_LIST_DIR}/dit_sample.sh $<TARGET_FILE:dtrain> ${CMAKE_SOURCE_DIR}
                 $<TARGET_FILE:train_clip_stats>)
set_tests_properties(train/dit_sample PROPERTIES LABELS "train" TIMEOUT 300
                     ENVIRONMENT "OMP_NUM_THREADS=2;OMP_WAIT_POLICY=PASSIVE")

# The video DiT's layouts through dtrain train equal the single process (runs mpirun itself).
add_test(NAME train/dit_layouts
         COMMAND ${CMAKE_CURRENT_LIST_DIR}/dit_layouts.sh $<TARGET_FILE:dtrain> ${CMAKE_SOURCE_DIR})
set_tests_properties(train/dit_layouts PROPERTIES LABELS "train;mpi" TIMEOUT 900)

add_test(NAME train/golden_loss
         COMMAND ${CMAKE_CURRENT_LIST_DIR}/golden_loss.sh $<TARGET_FILE:dtrain> ${CMAKE_SOURCE_DIR})
set_tests_properties(train/golden_loss PROPERTIES LABELS "train" TIMEOUT 300)

# A 128256-word vocabulary from a uint32 token shard (llm.c's Llama 3 format), in layouts.
add_test(NAME train/vocab_u32
         COMMAND ${CMAKE_CURRENT_LIST_DIR}/vocab_u32.sh $<TARGET_FILE:dtrain> ${CMAKE_SOURCE_DIR})
set_tests_properties(train/vocab_u32 PROPERTIES LABELS "train;mpi" TIMEOUT 600)

# Megatron indexed datasets, written by an independent writer of the format, read in place.
add_test(NAME train/megatron_data
         COMMAND ${CMAKE_CURRENT_LIST_DIR}/megatron_data.sh $<TARGET_FILE:dtrain> ${CMAKE_SOURCE_DIR})
set_tests_properties(train/megatron_data PROPERTIES LABELS "train;mpi" TIMEOUT 600)

# A weighted blend of token datasets: every layout and a resume (in any layout) read the same
# rows (issue 22, item 2).
add_test(NAME train/blend
         COMMAND ${CMAKE_CURRENT_LIST_DIR}/blend.sh $<TARGET_FILE:dtrain> ${CMAKE_SOURCE_DIR})
set_tests_properties(train/blend PROPERTIES LABELS "train;mpi" TIMEOUT 600)

# Activations on disk: bit-identical to keeping them in memory in every layout, smaller peak,
# bad folders refused on every rank.
foreach(arch gpt2 llama)
  add_test(NAME train/act_offload_${arch}
           COMMAND ${CMAKE_CURRENT_LIST_DIR}/act_offload.sh $<TARGET_FILE:dtrain> ${CMAKE_SOURCE_DIR} ${arch})
  set_tests_properties(train/act_offload_${arch} PROPERTIES LABELS "train;mpi" TIMEOUT 900)
endforeach()

# The weights' average (train.ema_decay) against numpy, in every layout, through checkpoints
# and in dtrain sample.
add_test(NAME train/ema
         COMMAND ${CMAKE_CURRENT_LIST_DIR}/ema.sh $<TARGET_FILE:dtrain> ${CMAKE_SOURCE_DIR})
set_tests_properties(train/ema PROPERTIES LABELS "train;mpi" TIMEOUT 600)

# Clips from video files FFmpeg's encoder wrote (dtrain prepare --video) and from latents
# numpy wrote: the pixels against the source frames, training in several layouts, resume,
# latents equal to the clips they came from, bad input.
add_test(NAME train/video_clips
         COMMAND ${CMAKE_CURRENT_LIST_DIR}/video_clips.sh $<TARGET_FILE:dtrain> ${CMAKE_SOURCE_DIR})
set_tests_properties(train/video_clips PROPERTIES LABELS "train;mpi" TIMEOUT 600)

# The text demo's judge on captioned mp4 files read back through prepare --video, and a text
# model sampling every held-out prompt.
add_test(NAME train/text_demo
         COMMAND ${CMAKE_CURRENT_LIST_DIR}/text_demo.sh $<TARGET_FILE:dtrain> ${CMAKE_SOURCE_DIR})
set_tests_properties(train/text_demo PROPERTIES LABELS "train" TIMEOUT 300
                     ENVIRONMENT "OMP_NUM_THREADS=2;OMP_WAIT_POLICY=PASSIVE")

# Pipeline stage boundaries moved by measured time (train.rebalance_every): equal to one
# process after the move in every pipeline layout, resume across a move, bad keys refused.
add_test(NAME train/rebalance
         COMMAND ${CMAKE_CURRENT_LIST_DIR}/rebalance.sh $<TARGET_FILE:dtrain> ${CMAKE_SOURCE_DIR})
set_tests_properties(train/rebalance PROPERTIES LABELS "train;mpi" TIMEOUT 600)

add_test(NAME train/dit_buckets
         COMMAND ${CMAKE_CURRENT_LIST_DIR}/dit_buckets.sh $<TARGET_FILE:dtrain> ${CMAKE_SOURCE_DIR})
set_tests_properties(train/dit_buckets PROPERTIES LABELS "train;mpi" TIMEOUT 600)
