# examples/gpt2/model.cmake — GPT-2's math on plain pointers (gpt2_model.h,
# gpt2_backend.h): a static library with no zeroshard in it, so that the
# trainer, the tests and the benchmarks link the same code.
#
# The CUDA backend is built when CMake found CUDA (ZS_HAVE_CUDA, root
# CMakeLists.txt); otherwise gpt2_cuda_absent.c stands in and says the build
# has no CUDA, so callers need no #ifdef.
set(GPT2_MODEL_DIR ${CMAKE_CURRENT_LIST_DIR})
set(GPT2_MODEL_SOURCES
  ${GPT2_MODEL_DIR}/gpt2_model.c
  ${GPT2_MODEL_DIR}/gpt2_backend.c
  ${GPT2_MODEL_DIR}/gpt2_layers.c)
if(ZS_HAVE_CUDA)
  # GPT-2's options on a CUDA device; the kernels are the device's layers
  # (examples/nn/cuda.cmake).
  list(APPEND GPT2_MODEL_SOURCES ${GPT2_MODEL_DIR}/gpt2_cuda.cu)
else()
  list(APPEND GPT2_MODEL_SOURCES ${GPT2_MODEL_DIR}/gpt2_cuda_absent.c)
endif()
add_library(gpt2_model STATIC ${GPT2_MODEL_SOURCES})
target_include_directories(gpt2_model PUBLIC ${GPT2_MODEL_DIR})
# The layers and the devices GPT-2 shares with the other models
# (examples/nn): nn_cpu on the CPU, nn_cuda (its CUDA device and kernels, or
# the stand-in that says the build has no CUDA).
target_link_libraries(gpt2_model PUBLIC nn_cpu nn_cuda ex_cpu_blas BLAS::BLAS OpenMP::OpenMP_C m)
# The CPU layers' flags (examples/nn/CMakeLists.txt; this file has no loops
# of its own since its math became the layers', and keeps them so that it
# is built as they are). The loops between GEMMs (GELU, softmax, LayerNorm,
# column sums) are written for the vectorizer:
#   -O3                 turns it on with a cost model that accepts loops of
#                       unknown length (-O2's does not);
#   -fno-trapping-math  lets it if-convert the clamps and sign selects of
#                       nn_expf/nn_tanhf (GCC keeps branches when a
#                       comparison might raise an FP exception). Nothing here
#                       reads FP exception flags, and no value changes: GELU
#                       and softmax loops went 4x faster, bit for bit equal;
#   -ffp-contract=off   already C11's default: no a*b+c fused into an FMA.
# Still no fast-math and no -march: results must not depend on the build
# machine.
set_source_files_properties(${GPT2_MODEL_DIR}/gpt2_layers.c PROPERTIES
  COMPILE_OPTIONS "-O3;-fno-trapping-math;-ffp-contract=off")
if(ZS_HAVE_CUDA)
  target_link_libraries(gpt2_model PUBLIC CUDA::cublas CUDA::cublasLt CUDA::cudart)
  # The device code's rules (examples/nn/cuda.cmake: warnings are errors,
  # contraction as NN_CUDA_FMAD, or GPT2_CUDA_FMAD where only that is set,
  # decides for every kernel GPT-2 runs).
  nn_cuda_compile_rules(gpt2_model)
endif()

if(ZS_BUILD_TESTS)
  include(${PROJECT_SOURCE_DIR}/tests/gpt2/model.cmake)
endif()
