# Runs the Booster example on 2 ranks and checks that its own loop made the loss fall.
set(work ${CMAKE_CURRENT_BINARY_DIR}/booster_example_work)
file(REMOVE_RECURSE ${work})
execute_process(COMMAND ${DTRAIN} prepare --input ${SRC}/src/core --out ${work}/data
                RESULT_VARIABLE rc OUTPUT_QUIET)
if(rc)
  message(FATAL_ERROR "prepare failed")
endif()
execute_process(COMMAND ${MPIEXEC} --oversubscribe -np 2 ${EXAMPLE} ${work}/data/train.bin
                        ${work}/data/val.bin
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
message("${out}${err}")
if(rc)
  message(FATAL_ERROR "booster_train failed (${rc})")
endif()
string(REGEX MATCH "first loss ([0-9.]+), last loss ([0-9.]+)" m "${out}")
if(NOT m OR NOT CMAKE_MATCH_2 LESS CMAKE_MATCH_1 OR NOT out MATCHES "on 2 data-parallel ranks")
  message(FATAL_ERROR "the example's loss did not fall on 2 ranks")
endif()
file(REMOVE_RECURSE ${work})
message("1 passed, 0 failed")
