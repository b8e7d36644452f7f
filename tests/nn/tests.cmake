# nn/region: the region operators' forward/adjoint pairs; nn/linear_tp: column- and row-parallel
# linear (an MLP) against plain nn/linear. Both under mpirun at np 1, 2 and 4.
dt_add_mpi_test(nn mpi_test_region "nn;mpi")
dt_add_mpi_test(nn mpi_test_linear_tp "nn;mpi")
# nn/lm_head with the vocabulary split over the ranks (vocab-parallel cross-entropy).
dt_add_mpi_test(nn mpi_test_lm_head_tp "nn;mpi")
