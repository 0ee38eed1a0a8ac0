# tests/gpt2/model.cmake — tests of the GPT-2 model library (gpt2_model),
# included from examples/gpt2/model.cmake when ZS_BUILD_TESTS is on. They
# link the library alone (no zeroshard), as the trainer's math does.
set(GPT2_TEST_DIR ${PROJECT_SOURCE_DIR}/tests/gpt2)
add_library(gpt2_test_model STATIC ${GPT2_TEST_DIR}/gpt2_test_model.c)
target_include_directories(gpt2_test_model PUBLIC ${GPT2_TEST_DIR})
target_link_libraries(gpt2_test_model PUBLIC gpt2_model)

# Gradients against finite differences, thread-count independence,
# recomputation, head consistency, argument errors (CPU backend).
add_executable(test_gpt2_model ${GPT2_TEST_DIR}/test_gpt2_model.c)
target_link_libraries(test_gpt2_model PRIVATE gpt2_test_model)
add_test(NAME test_gpt2_model COMMAND test_gpt2_model)
set_tests_properties(test_gpt2_model PROPERTIES LABELS unit TIMEOUT 120
                     ENVIRONMENT "${ZS_TEST_ENV}")
