# bench/gpt2/model.cmake — the GPT-2 model's CPU training step against the
# machine's sgemm (bench_gpt2_model.c says what it measures). Include it from
# bench/CMakeLists.txt: include(${CMAKE_CURRENT_SOURCE_DIR}/gpt2/model.cmake)
# Paths are relative to this file, so it works from any including directory.
if(TARGET gpt2_model)
  add_executable(bench_gpt2_model ${CMAKE_CURRENT_LIST_DIR}/bench_gpt2_model.c)
  target_link_libraries(bench_gpt2_model PRIVATE gpt2_model zeroshard_internal) # core/number.h
endif()
# bench_gpu_peaks: the GPU's own bf16 GEMM rate through cuBLASLt and its
# page-locked PCIe copy rate, the ceilings scripts/gpu-check.sh compares the
# trainers and the offload pipeline with (bench_gpu_peaks.c says how).
if(ZS_HAVE_CUDA)
  add_executable(bench_gpu_peaks ${CMAKE_CURRENT_LIST_DIR}/bench_gpu_peaks.c)
  target_link_libraries(bench_gpu_peaks PRIVATE CUDA::cublasLt CUDA::cudart)
endif()
