# Bit-exact resume, for both architectures, with micro-batches, shuffling and bf16.
set(DT_RESUME_CASES
    "gpt2_plain|gpt2"
    "llama_plain|llama"
    "gpt2_micro_shuffle|gpt2|--train.micro_batch_size=2|--data.shuffle=true"
    "llama_bf16|llama|--plugin.precision=bf16")
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
