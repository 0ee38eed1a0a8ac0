# tests/gpt2/model.cmake — tests of the GPT-2 model library (gpt2_model),
# included from examples/gpt2/model.cmake when ZS_BUILD_TESTS is on. They
# link the library alone (no zeroshard), as the trainer's math does.
set(GPT2_TEST_DIR ${PROJECT_SOURCE_DIR}/tests/gpt2)
add_library(gpt2_test_model STATIC ${GPT2_TEST_DIR}/gpt2_test_model.c)
target_include_directories(gpt2_test_model PUBLIC ${GPT2_TEST_DIR})
target_link_libraries(gpt2_test_model PUBLIC gpt2_model model_tm zeroshard)

# Gradients against finite differences, thread-count independence,
# recomputation, head consistency, argument errors (CPU backend).
add_executable(test_gpt2_model ${GPT2_TEST_DIR}/test_gpt2_model.c)
target_link_libraries(test_gpt2_model PRIVATE gpt2_test_model)
add_test(NAME test_gpt2_model COMMAND test_gpt2_model)
set_tests_properties(test_gpt2_model PROPERTIES LABELS unit TIMEOUT 120
                     ENVIRONMENT "${ZS_TEST_ENV}")

# The examples' threading (examples/common/cpu_blas.h) with the environment
# a user with 2 cores might set: OpenMP drives single-threaded OpenBLAS, and
# no result depends on the number of threads.
add_executable(test_gpt2_threads ${GPT2_TEST_DIR}/test_gpt2_threads.c)
target_link_libraries(test_gpt2_threads PRIVATE gpt2_test_model ${CMAKE_DL_LIBS})
add_test(NAME test_gpt2_threads COMMAND test_gpt2_threads)
set(GPT2_THREADS_ENV ${ZS_TEST_ENV})
list(FILTER GPT2_THREADS_ENV EXCLUDE REGEX "^(OMP|OPENBLAS)_NUM_THREADS=")
set_tests_properties(test_gpt2_threads PROPERTIES LABELS unit TIMEOUT 120
                     ENVIRONMENT "${GPT2_THREADS_ENV};OMP_NUM_THREADS=2;OPENBLAS_NUM_THREADS=2")

# The CUDA backend against the CPU backend (losses, residual stream, every
# gradient, logits) and its determinism. Built only with CUDA; exits 77
# (skipped) where no device is usable.
if(ZS_HAVE_CUDA)
  add_executable(test_gpt2_cuda ${GPT2_TEST_DIR}/test_gpt2_cuda.c)
  target_link_libraries(test_gpt2_cuda PRIVATE gpt2_test_model CUDA::cudart)
  add_test(NAME test_gpt2_cuda COMMAND test_gpt2_cuda)
  set_tests_properties(test_gpt2_cuda PROPERTIES LABELS "cuda;unit" TIMEOUT 120
                       SKIP_RETURN_CODE 77 ENVIRONMENT "${ZS_TEST_ENV}")
endif()

# The loss against an independent forward pass in numpy (float64):
# gpt2_dump_tiny writes the tiny model's parameters by name, its tokens and
# its losses; gpt2_numpy_forward.py recomputes them (the test is GPT-2's row
# of tests/models/models.cmake: gpt2_numpy_check).
add_executable(gpt2_dump_tiny ${GPT2_TEST_DIR}/gpt2_dump_tiny.c)
target_link_libraries(gpt2_dump_tiny PRIVATE gpt2_test_model)
