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
  ${GPT2_MODEL_DIR}/gpt2_cpu.c)
if(ZS_HAVE_CUDA)
  # One file per op, as llm.c's llmc/ (gpt2_cuda.cu says which is which).
  foreach(part "" _matmul _attention _layernorm _encoder _classifier _elementwise _profile)
    list(APPEND GPT2_MODEL_SOURCES ${GPT2_MODEL_DIR}/gpt2_cuda${part}.cu)
  endforeach()
else()
  list(APPEND GPT2_MODEL_SOURCES ${GPT2_MODEL_DIR}/gpt2_cuda_absent.c)
endif()
add_library(gpt2_model STATIC ${GPT2_MODEL_SOURCES})
target_include_directories(gpt2_model PUBLIC ${GPT2_MODEL_DIR})
# The layers and the devices GPT-2 shares with the other models
# (examples/nn): nn_cpu on the CPU, nn_cuda (its CUDA device and kernels, or
# the stand-in that says the build has no CUDA).
target_link_libraries(gpt2_model PUBLIC nn_cpu nn_cuda ex_cpu_blas BLAS::BLAS OpenMP::OpenMP_C m)
# The CPU backend's loops between GEMMs (GELU, softmax, LayerNorm, column
# sums) are written for the vectorizer:
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
set_source_files_properties(${GPT2_MODEL_DIR}/gpt2_cpu.c PROPERTIES
  COMPILE_OPTIONS "-O3;-fno-trapping-math;-ffp-contract=off")
if(ZS_HAVE_CUDA)
  target_link_libraries(gpt2_model PUBLIC CUDA::cublas CUDA::cublasLt CUDA::cudart)
  # The library's rules for device code (root CMakeLists.txt): warnings are
  # errors. Multiply-add contraction is GPT2_CUDA_FMAD's choice, apart from
  # the runtime's kernels (ZS_CUDA_FMAD, whose bits must equal the CPU's):
  # no test needs GPT-2's CUDA kernels to give the CPU's bits (the CUDA
  # tests compare with tolerances, 1e-3 of a tensor's scale in fp32, far
  # above the few ulp contraction moves an element, and the stage and
  # repeat comparisons run the same kernels on both sides). The default
  # stays OFF, following ZS_CUDA_FMAD: with it the element math of
  # nn_layer_math.h gives the CPU's bits on the GPU, so a CPU-vs-CUDA
  # difference can only come from the order of sums, which keeps the fp32
  # comparisons easy to read; these kernels are bound by memory traffic,
  # where a fused multiply-add saves instructions, not time. The GPU check
  # builds both (-DGPT2_CUDA_FMAD=ON) and the measurement decides.
  option(GPT2_CUDA_FMAD "Let nvcc contract multiply-adds in GPT-2's CUDA kernels" ${ZS_CUDA_FMAD})
  set(GPT2_CUDA_FLAGS -Xcompiler=-Wall,-Wextra --Werror=all-warnings)
  if(GPT2_CUDA_FMAD)
    list(APPEND GPT2_CUDA_FLAGS --fmad=true)
  else()
    list(APPEND GPT2_CUDA_FLAGS --fmad=false)
  endif()
  target_compile_options(gpt2_model PRIVATE $<$<COMPILE_LANGUAGE:CUDA>:${GPT2_CUDA_FLAGS}>)
  set_target_properties(gpt2_model PROPERTIES CUDA_SEPARABLE_COMPILATION OFF
                                              POSITION_INDEPENDENT_CODE ON)
endif()

if(ZS_BUILD_TESTS)
  include(${PROJECT_SOURCE_DIR}/tests/gpt2/model.cmake)
endif()
