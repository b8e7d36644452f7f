# examples/slurm/train.sbatch on a one-machine Slurm started by the test (skipped, visibly,
# where Slurm or munge is not installed or the test is not root).
add_test(NAME slurm/sbatch
         COMMAND ${CMAKE_CURRENT_LIST_DIR}/slurm.sh $<TARGET_FILE:dtrain> ${CMAKE_SOURCE_DIR})
set_tests_properties(slurm/sbatch PROPERTIES LABELS "slurm;mpi" TIMEOUT 900 SKIP_RETURN_CODE 77
                     ENVIRONMENT "OMP_WAIT_POLICY=PASSIVE")
