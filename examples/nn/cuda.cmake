# examples/nn/cuda.cmake — the CUDA device and the layers every model shares
# on it (nn_cuda.h; nn_cuda_ctx.cuh says what each file holds): library
# nn_cuda, on plain pointers, no zeroshard in it. Included at the end of
# examples/nn/CMakeLists.txt.
#
# Built when CMake found CUDA (ZS_HAVE_CUDA, root CMakeLists.txt); otherwise
# nn_cuda_absent.c stands in and nn_cuda_device_create says the build has no
# CUDA, so callers need no #ifdef.
set(NN_DIR ${CMAKE_CURRENT_LIST_DIR})
if(ZS_HAVE_CUDA)
  set(NN_CUDA_SOURCES "")
  foreach(part device layers matmul attention classifier embedding elementwise layernorm
               rmsnorm rope activations profile)
    list(APPEND NN_CUDA_SOURCES ${NN_DIR}/nn_cuda_${part}.cu)
  endforeach()
  add_library(nn_cuda STATIC ${NN_CUDA_SOURCES})
  target_link_libraries(nn_cuda PUBLIC nn_cpu CUDA::cublas CUDA::cublasLt CUDA::cudart)
  # Multiply-add contraction in the shared kernels (softmax, cross-entropy,
  # embedding, column sums) and the models' own: NN_CUDA_FMAD where the
  # user sets it, else GPT2_CUDA_FMAD where that is set (so that the GPU
  # check's -DGPT2_CUDA_FMAD=ON still measures every kernel GPT-2 runs),
  # else ZS_CUDA_FMAD: off by default, so that the element math of
  # nn_math.h and the models' headers gives the CPU's bits on the GPU and a
  # CPU-vs-CUDA difference can only come from the order of sums
  # (examples/gpt2/model.cmake says more). Decided at every configure.
  if(DEFINED NN_CUDA_FMAD)
    set(nn_fmad ${NN_CUDA_FMAD})
  elseif(DEFINED GPT2_CUDA_FMAD)
    set(nn_fmad ${GPT2_CUDA_FMAD})
  else()
    set(nn_fmad ${ZS_CUDA_FMAD})
  endif()
  set_property(GLOBAL PROPERTY NN_CUDA_FMAD_IN_EFFECT ${nn_fmad})
  # The flags of every target that compiles against nn_cuda_ctx.cuh with
  # these rules (nn_cuda here, the Llama family's CUDA files): warnings are
  # errors, contraction as decided above. A function, so that the model
  # directories read the same rules (CMake functions are global).
  function(nn_cuda_compile_rules target)
    set(flags -Xcompiler=-Wall,-Wextra --Werror=all-warnings)
    get_property(fmad GLOBAL PROPERTY NN_CUDA_FMAD_IN_EFFECT)
    if(fmad)
      list(APPEND flags --fmad=true)
    else()
      list(APPEND flags --fmad=false)
    endif()
    target_compile_options(${target} PRIVATE $<$<COMPILE_LANGUAGE:CUDA>:${flags}>)
    set_target_properties(${target} PROPERTIES CUDA_SEPARABLE_COMPILATION OFF
                                               POSITION_INDEPENDENT_CODE ON)
  endfunction()
  nn_cuda_compile_rules(nn_cuda)
else()
  add_library(nn_cuda STATIC ${NN_DIR}/nn_cuda_absent.c)
  target_link_libraries(nn_cuda PUBLIC nn_cpu)
endif()
target_include_directories(nn_cuda PUBLIC ${NN_DIR})
