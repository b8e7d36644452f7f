# nn/region: the region operators' forward/adjoint pairs and their split (non-blocking)
# backward, under mpirun at np 1, 2 and 4. The tensor-parallel block built from them is tested
# end to end against the single process by tests/train/tp_layouts.sh.
dt_add_mpi_test(nn mpi_test_region "nn;mpi")
# nn/lm_head with the vocabulary split over the ranks (vocab-parallel cross-entropy).
dt_add_mpi_test(nn mpi_test_lm_head_tp "nn;mpi")
# nn/ring_attn: ring attention (context parallelism) against the double-precision kernel on the
# whole sequence, zigzag and contiguous, causal and not, grouped-query heads.
dt_add_mpi_test(nn mpi_test_ring_attn "nn;mpi")
