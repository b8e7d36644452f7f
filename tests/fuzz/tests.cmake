# libFuzzer targets, one per reader of untrusted files (issue 11, item 7): safetensors,
# the sharded checkpoint's manifest, a whole checkpoint's state.json, token shards, Megatron
# indexed datasets, a blend of token files, a BPE tokenizer file, a clip shard (pixels or latents).
# Built only with -DDTRAIN_FUZZ=ON and clang (the top CMakeLists.txt instruments the library);
# in a normal build, fuzz/short_run builds them in a build tree of its own with clang and
# runs each for a few seconds on the seed corpus (skipped, 77, without clang or libFuzzer).
if(DTRAIN_FUZZ)
  foreach(target safetensors manifest state tokens indexed blend bpe clips)
    add_executable(fuzz_${target} ${CMAKE_CURRENT_SOURCE_DIR}/fuzz/fuzz_${target}.c
                                  ${CMAKE_CURRENT_SOURCE_DIR}/fuzz/fuzz_common.c)
    target_include_directories(fuzz_${target} PRIVATE ${CMAKE_CURRENT_SOURCE_DIR}/fuzz)
    target_link_libraries(fuzz_${target} PRIVATE dtrain_static)
    target_link_options(fuzz_${target} PRIVATE -fsanitize=fuzzer)
  endforeach()
else()
  add_test(NAME fuzz/short_run
           COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/fuzz/run.sh ${CMAKE_SOURCE_DIR}
                   ${CMAKE_BINARY_DIR}/fuzz-build 20)
  set_tests_properties(fuzz/short_run PROPERTIES LABELS "fuzz;slow" SKIP_RETURN_CODE 77
                       TIMEOUT 1200)
endif()
