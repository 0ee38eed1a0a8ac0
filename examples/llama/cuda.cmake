# examples/llama/cuda.cmake — the Llama family on CUDA (llama_cuda.cu: the
# family's profile on an nn_cuda device, whose layers, examples/nn/cuda.cmake,
# run the one orchestration of llama_layers.c) in llama_model, and its test. Included at the end of
# examples/llama/CMakeLists.txt.
#
# Built when CMake found CUDA (ZS_HAVE_CUDA); otherwise llama_cuda_absent.c
# stands in and llama_cuda_backend_create says the build has no CUDA, so
# callers need no #ifdef. Either way llama_model links nn_cuda, whose
# nn_cuda_device_create the trainer calls.
if(ZS_HAVE_CUDA)
  target_sources(llama_model PRIVATE ${CMAKE_CURRENT_LIST_DIR}/llama_cuda.cu)
  nn_cuda_compile_rules(llama_model)
else()
  target_sources(llama_model PRIVATE ${CMAKE_CURRENT_LIST_DIR}/llama_cuda_absent.c)
endif()
target_link_libraries(llama_model PUBLIC nn_cuda)

# The CUDA backend against the CPU backend (losses, every gradient, logits)
# in fp32 and bf16, and its determinism. Built only with CUDA; exits 77
# (skipped) where no device is usable.
if(ZS_BUILD_TESTS AND ZS_HAVE_CUDA)
  add_executable(test_llama_cuda ${PROJECT_SOURCE_DIR}/tests/llama/test_llama_cuda.c)
  target_link_libraries(test_llama_cuda PRIVATE llama_test_model zeroshard CUDA::cudart)
  add_test(NAME test_llama_cuda COMMAND test_llama_cuda)
  set_tests_properties(test_llama_cuda PROPERTIES LABELS "cuda;unit" TIMEOUT 120
                       SKIP_RETURN_CODE 77 ENVIRONMENT "${ZS_TEST_ENV}")
endif()
