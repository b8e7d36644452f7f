# The memory model equals measurement on every rank of a layout matrix (runs mpirun itself).
add_test(NAME plan/mem_predict
         COMMAND ${CMAKE_CURRENT_LIST_DIR}/mem_predict.sh $<TARGET_FILE:dtrain> ${CMAKE_SOURCE_DIR})
set_tests_properties(plan/mem_predict PROPERTIES LABELS "plan;mpi" TIMEOUT 600)

# dtrain plan from the command line: ranked table, JSON lines, nothing-fits, bad arguments.
add_test(NAME plan/plan_cmd
         COMMAND ${CMAKE_CURRENT_LIST_DIR}/plan_cmd.sh $<TARGET_FILE:dtrain> ${CMAKE_SOURCE_DIR})
set_tests_properties(plan/plan_cmd PROPERTIES LABELS "plan;cli")

# The memory model equals measurement to the byte on every rank of a DiT layout matrix.
add_test(NAME plan/mem_predict_dit
         COMMAND ${CMAKE_CURRENT_LIST_DIR}/mem_predict_dit.sh $<TARGET_FILE:dtrain>
                 ${CMAKE_SOURCE_DIR})
set_tests_properties(plan/mem_predict_dit PROPERTIES LABELS "plan;mpi" TIMEOUT 600)

# The communication ledger equals the bytes a real run moved, on a DiT layout matrix.
add_test(NAME plan/comm_predict_dit
         COMMAND ${CMAKE_CURRENT_LIST_DIR}/comm_predict_dit.sh $<TARGET_FILE:dtrain>
                 ${CMAKE_SOURCE_DIR})
set_tests_properties(plan/comm_predict_dit PROPERTIES LABELS "plan;mpi" TIMEOUT 600)
