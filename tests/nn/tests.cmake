# nn/region: the region operators' forward/adjoint pairs, run under mpirun at np 1, 2 and 4.
# The source is tests/nn/mpi_test_region.c, outside the tests/*/test_*.c glob, which would
# register it without mpirun.
add_executable(nn_mpi_test_region ${CMAKE_CURRENT_LIST_DIR}/mpi_test_region.c
                                  ${CMAKE_CURRENT_LIST_DIR}/../harness.c)
target_include_directories(nn_mpi_test_region PRIVATE ${CMAKE_CURRENT_LIST_DIR}/..)
target_link_libraries(nn_mpi_test_region PRIVATE dtrain_static)

# Oversubscribed ranks on two cores: one thread each, and idle OpenMP threads sleep.
foreach(np 1 2 4)
  add_test(NAME nn/mpi_test_region_np${np}
           COMMAND ${MPIEXEC_EXECUTABLE} --oversubscribe -np ${np}
                   $<TARGET_FILE:nn_mpi_test_region>)
  set_tests_properties(nn/mpi_test_region_np${np} PROPERTIES LABELS "nn;mpi" TIMEOUT 120
      ENVIRONMENT "OMPI_ALLOW_RUN_AS_ROOT=1;OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1;OMP_NUM_THREADS=1;OMP_WAIT_POLICY=PASSIVE")
endforeach()

# nn/linear_tp: column- and row-parallel linear (an MLP) against plain nn/linear, np 1, 2, 4.
add_executable(nn_mpi_test_linear_tp ${CMAKE_CURRENT_LIST_DIR}/mpi_test_linear_tp.c
                                     ${CMAKE_CURRENT_LIST_DIR}/../harness.c)
target_include_directories(nn_mpi_test_linear_tp PRIVATE ${CMAKE_CURRENT_LIST_DIR}/..)
target_link_libraries(nn_mpi_test_linear_tp PRIVATE dtrain_static)

foreach(np 1 2 4)
  add_test(NAME nn/mpi_test_linear_tp_np${np}
           COMMAND ${MPIEXEC_EXECUTABLE} --oversubscribe -np ${np}
                   $<TARGET_FILE:nn_mpi_test_linear_tp>)
  set_tests_properties(nn/mpi_test_linear_tp_np${np} PROPERTIES LABELS "nn;mpi" TIMEOUT 120
      ENVIRONMENT "OMPI_ALLOW_RUN_AS_ROOT=1;OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1;OMP_NUM_THREADS=1;OMP_WAIT_POLICY=PASSIVE")
endforeach()
