# Multi-node (issue 3 item 9): dp 2 x ZeRO 2 across two network-namespace "hosts" made by
# ../shared/tools/netns-cluster, Open MPI over TCP only, equals the single process.
# Needs root and iproute2; skipped (exit 77) where namespaces cannot be made or the tool is absent.
add_test(NAME multinode/dp2_zero2_2hosts
         COMMAND ${CMAKE_CURRENT_LIST_DIR}/multinode.sh $<TARGET_FILE:dtrain> ${CMAKE_SOURCE_DIR})
set_tests_properties(multinode/dp2_zero2_2hosts PROPERTIES
                     LABELS "mpi;multinode" TIMEOUT 300 SKIP_RETURN_CODE 77
                     ENVIRONMENT "OMPI_ALLOW_RUN_AS_ROOT=1;OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1;OMP_NUM_THREADS=1;OMP_WAIT_POLICY=PASSIVE")
