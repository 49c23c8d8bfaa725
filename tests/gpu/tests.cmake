# The tests of a GPU build (label gpu), included by tests/CMakeLists.txt when Kokkos runs on CUDA.
# Each needs a GPU and is skipped (77, or a "no CUDA device" message) where none is visible, saying
# why; ci/gpu/run.sh runs them on a GPU machine. Two compare with a CPU build of the project,
# named by MPIFORMER_CPU_TRAIN in the environment (skipped without one).
#
#   test_kernels      every kernel in both shapes on the GPU, against plain loops on the CPU
#   test_attention    the fused attention on the GPU against float64 loops and the unfused path,
#                     and the tensor-core forward (mma.sync) against the fused attention
#   test_layers       every layer's B and W, and the model's, against finite differences
#   test_cublas_gemm  the cuBLAS backend against a host reference
#   gpu_training      20 steps, fp32 and bf16: the CPU build's losses within a stated tolerance
#   gpu_layouts       TP 2, PP 2 (1F1B, ZB-H1), DP 2 with ZeRO, EP 2 (a mixture of experts): 2
#                     ranks on the one GPU, MPI staged through host buffers, against the GPU's
#                     serial run
#   gpu_checkpoint    saved on the GPU, resumed on the CPU: the CPU's serial run
add_executable(test_cublas_gemm gpu/test_cublas_gemm.cu)
target_link_libraries(test_cublas_gemm PRIVATE mpiformer_backend_cuda GTest::gtest_main)
foreach(test test_kernels test_attention test_layers test_cublas_gemm)
  add_test(NAME ${test} COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/gpu/run_gtest.sh
                                $<TARGET_FILE:${test}>)
endforeach()
set_tests_properties(test_kernels test_attention test_layers test_cublas_gemm PROPERTIES
                     TIMEOUT 600 LABELS gpu SKIP_RETURN_CODE 77
                     SKIP_REGULAR_EXPRESSION "no CUDA device")
foreach(script training layouts checkpoint)
  add_test(NAME gpu_${script} COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/gpu/${script}.sh)
  set_tests_properties(gpu_${script} PROPERTIES TIMEOUT 900 LABELS gpu SKIP_RETURN_CODE 77
                       ENVIRONMENT "${_test_env}")
endforeach()
