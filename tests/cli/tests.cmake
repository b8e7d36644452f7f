# Bad input: one clear error line and a non-zero exit, never a crash.
add_test(NAME cli/error_cases
         COMMAND ${CMAKE_CURRENT_LIST_DIR}/error_cases.sh $<TARGET_FILE:dtrain> ${CMAKE_SOURCE_DIR})
set_tests_properties(cli/error_cases PROPERTIES LABELS "cli"
                     ENVIRONMENT "OMP_NUM_THREADS=1;OMP_WAIT_POLICY=PASSIVE")

# Bad layouts under mpirun: the same error on every rank, no hang.
add_test(NAME cli/mpi_errors
         COMMAND ${CMAKE_CURRENT_LIST_DIR}/mpi_errors.sh $<TARGET_FILE:dtrain> ${CMAKE_SOURCE_DIR})
set_tests_properties(cli/mpi_errors PROPERTIES LABELS "cli;mpi" TIMEOUT 400)

# --version, help for every command, --print-config round trip, exit codes.
add_test(NAME cli/commands
         COMMAND ${CMAKE_CURRENT_LIST_DIR}/commands.sh $<TARGET_FILE:dtrain> ${CMAKE_SOURCE_DIR}
                 ${PROJECT_VERSION})
set_tests_properties(cli/commands PROPERTIES LABELS "cli"
                     ENVIRONMENT "OMP_NUM_THREADS=1;OMP_WAIT_POLICY=PASSIVE")

# dtrain probe: the collectives of 2 and 3 ranks as dtrain plan's flags, which plan takes.
add_test(NAME cli/probe
         COMMAND ${CMAKE_CURRENT_LIST_DIR}/probe.sh $<TARGET_FILE:dtrain> ${CMAKE_SOURCE_DIR})
set_tests_properties(cli/probe PROPERTIES LABELS "cli;mpi" TIMEOUT 300)

# The side-by-side probe of dtrain plan --device this lives with the command, not the library.
target_sources(cli_test_crew PRIVATE ${CMAKE_SOURCE_DIR}/src/cli/plan_crew.c)
