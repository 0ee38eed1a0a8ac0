# examples/gpt2/data.cmake — llm.c's GPT-2 files (included from
# examples/gpt2/CMakeLists.txt; no dependency on the runtime):
#   gpt2_llmc       llm.c's GPT-2 model file (fp32, version 3) and tokenizer
# The token streams every model reads are examples/trainer's (ex_data).
add_library(gpt2_llmc STATIC ${CMAKE_CURRENT_LIST_DIR}/gpt2_llmc.c)
target_include_directories(gpt2_llmc PUBLIC ${CMAKE_CURRENT_LIST_DIR})
target_compile_definitions(gpt2_llmc PRIVATE _POSIX_C_SOURCE=200809L)
target_link_libraries(gpt2_llmc PUBLIC ex_data)

if(ZS_BUILD_TESTS)
  set(GPT2_TESTS ${PROJECT_SOURCE_DIR}/tests/gpt2)
  zs_add_unit_test(test_gpt2_llmc SOURCES ${GPT2_TESTS}/test_gpt2_llmc.c
                   LIBS gpt2_llmc ex_data_test_files)
  target_compile_definitions(test_gpt2_llmc PRIVATE _POSIX_C_SOURCE=200809L)

  # The model reader against files written by numpy (tests/gpt2/
  # write_llmc_gpt2.py) for several tiny shapes; skipped (77) without
  # python3 and numpy.
  add_test(NAME test_gpt2_llmc_python
           COMMAND ${GPT2_TESTS}/llmc_python_check.sh $<TARGET_FILE:test_gpt2_llmc>
                   ${GPT2_TESTS}/write_llmc_gpt2.py)
  set_tests_properties(test_gpt2_llmc_python PROPERTIES
    LABELS unit TIMEOUT 120 SKIP_RETURN_CODE 77 ENVIRONMENT "${ZS_TEST_ENV}")
endif()
