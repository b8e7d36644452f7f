# dtrain's BPE tokenizers against the npm registry's reference tokenizers (run with node).
add_test(NAME io/bpe COMMAND ${CMAKE_CURRENT_LIST_DIR}/bpe.sh $<TARGET_FILE:dtrain> ${CMAKE_SOURCE_DIR})
set_tests_properties(io/bpe PROPERTIES LABELS "io" TIMEOUT 900
                     ENVIRONMENT "OMP_NUM_THREADS=2;OMP_WAIT_POLICY=PASSIVE")
