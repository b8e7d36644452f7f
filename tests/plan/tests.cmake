# The memory model equals measurement on every rank of a layout matrix (runs mpirun itself).
add_test(NAME plan/mem_predict
         COMMAND ${CMAKE_CURRENT_LIST_DIR}/mem_predict.sh $<TARGET_FILE:dtrain> ${CMAKE_SOURCE_DIR})
set_tests_properties(plan/mem_predict PROPERTIES LABELS "plan;mpi" TIMEOUT 600)
