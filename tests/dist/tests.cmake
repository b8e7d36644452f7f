# dist/: the MPI communicator and mesh, run under mpirun at np 1, 2 and 4 and once as an MPI
# singleton (no mpirun). The source is tests/dist/mpi_test_comm.c, outside the tests/*/test_*.c
# glob, which would register it without mpirun.
add_executable(dist_mpi_test_comm ${CMAKE_CURRENT_LIST_DIR}/mpi_test_comm.c
                                  ${CMAKE_CURRENT_LIST_DIR}/../harness.c)
target_include_directories(dist_mpi_test_comm PRIVATE ${CMAKE_CURRENT_LIST_DIR}/..)
target_link_libraries(dist_mpi_test_comm PRIVATE dtrain_static)

# Oversubscribed ranks on two cores: one thread each, and idle OpenMP threads sleep.
# Under DTRAIN_SANITIZE, Open MPI's own start-up state is never freed: lsan.supp drops stacks
# that pass through its libraries (full unwinding is needed to see them, since Open MPI has no
# frame pointers) and still reports leaks from dtrain code. The ASan/LSan settings are
# ignored by an unsanitised build.
set(DT_MPI_TEST_ENV
    "OMPI_ALLOW_RUN_AS_ROOT=1;OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1;OMP_NUM_THREADS=1;OMP_WAIT_POLICY=PASSIVE;ASAN_OPTIONS=fast_unwind_on_malloc=0;LSAN_OPTIONS=suppressions=${CMAKE_CURRENT_LIST_DIR}/lsan.supp")
foreach(np 1 2 4)
  add_test(NAME dist/mpi_test_comm_np${np}
           COMMAND ${MPIEXEC_EXECUTABLE} --oversubscribe -np ${np}
                   $<TARGET_FILE:dist_mpi_test_comm>)
  set_tests_properties(dist/mpi_test_comm_np${np} PROPERTIES LABELS "mpi;dist" TIMEOUT 120
                       ENVIRONMENT "${DT_MPI_TEST_ENV}")
endforeach()
add_test(NAME dist/mpi_test_comm_singleton COMMAND dist_mpi_test_comm)
set_tests_properties(dist/mpi_test_comm_singleton PROPERTIES LABELS "mpi;dist" TIMEOUT 120
                     ENVIRONMENT "${DT_MPI_TEST_ENV}")
