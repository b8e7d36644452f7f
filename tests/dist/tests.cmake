# dist/: the MPI communicator and mesh, run under mpirun at np 1, 2 and 4 and once as an MPI
# singleton (no mpirun).
# Under DTRAIN_SANITIZE, Open MPI's own start-up state is never freed: lsan.supp drops stacks
# that pass through its libraries (full unwinding is needed to see them, since Open MPI has no
# frame pointers) and still reports leaks from dtrain code. The ASan/LSan settings are
# ignored by an unsanitised build.
set(DT_DIST_SAN_ENV
    "ASAN_OPTIONS=fast_unwind_on_malloc=0;LSAN_OPTIONS=suppressions=${CMAKE_CURRENT_LIST_DIR}/lsan.supp")
dt_add_mpi_test(dist mpi_test_comm "mpi;dist" ${DT_DIST_SAN_ENV})
add_test(NAME dist/mpi_test_comm_singleton COMMAND dist_mpi_test_comm)
set_tests_properties(dist/mpi_test_comm_singleton PROPERTIES LABELS "mpi;dist" TIMEOUT 120
                     ENVIRONMENT "${DT_MPI_TEST_ENV};${DT_DIST_SAN_ENV}")
