# The matmul's fp32 fallback for 16-bit operands (what AVX2-only CPUs run, bf16-output runs
# included) on any CPU: oneDNN capped at AVX2 has no bf16 matmul, so test_gemm's bf16 cases,
# dt_gemm_run_bf16_out's among them, go through the widened operands and the rounded scratch.
add_test(NAME kernels/test_gemm_avx2_fallback COMMAND kernels_test_gemm)
set_tests_properties(kernels/test_gemm_avx2_fallback PROPERTIES LABELS "unit;kernels"
                     ENVIRONMENT "OMP_NUM_THREADS=2;OMP_WAIT_POLICY=PASSIVE;ONEDNN_MAX_CPU_ISA=AVX2")
