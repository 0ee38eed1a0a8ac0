# examples/gpt2/data.cmake — the data side of the GPT-2 example, with no
# dependency on the runtime (included from examples/gpt2/CMakeLists.txt):
#   gpt2_data       token streams (raw text or llm.c .bin shards), the
#                   train/validation split, world-size-invariant batch
#                   sampling, the unigram baseline
#   gpt2_llmc       llm.c's GPT-2 model file (fp32, version 3) and tokenizer
#   gpt2_data_info  a small tool: a stream's facts, split and baseline
# The tests' sources live in tests/gpt2 and are registered here.
add_library(gpt2_data STATIC ${CMAKE_CURRENT_LIST_DIR}/gpt2_data.c)
target_include_directories(gpt2_data PUBLIC ${CMAKE_CURRENT_LIST_DIR})
# glob(3), mmap and pread are POSIX, not C11.
target_compile_definitions(gpt2_data PRIVATE _POSIX_C_SOURCE=200809L)
target_link_libraries(gpt2_data PUBLIC m)

add_library(gpt2_llmc STATIC ${CMAKE_CURRENT_LIST_DIR}/gpt2_llmc.c)
target_include_directories(gpt2_llmc PUBLIC ${CMAKE_CURRENT_LIST_DIR})
target_compile_definitions(gpt2_llmc PRIVATE _POSIX_C_SOURCE=200809L)

add_executable(gpt2_data_info ${CMAKE_CURRENT_LIST_DIR}/gpt2_data_info.c)
target_link_libraries(gpt2_data_info PRIVATE gpt2_data)

if(ZS_BUILD_TESTS)
  set(GPT2_TESTS ${PROJECT_SOURCE_DIR}/tests/gpt2)
  foreach(t sampler streams unigram llmc)
    zs_add_unit_test(test_gpt2_${t}
      SOURCES ${GPT2_TESTS}/test_gpt2_${t}.c ${GPT2_TESTS}/gpt2_test_files.c
      LIBS gpt2_data gpt2_llmc)
    target_include_directories(test_gpt2_${t} PRIVATE ${GPT2_TESTS})
    target_compile_definitions(test_gpt2_${t} PRIVATE _POSIX_C_SOURCE=200809L)
  endforeach()

  # The model reader against files written by numpy (tests/gpt2/
  # write_llmc_gpt2.py) for several tiny shapes; skipped (77) without
  # python3 and numpy.
  add_test(NAME test_gpt2_llmc_python
           COMMAND ${GPT2_TESTS}/llmc_python_check.sh $<TARGET_FILE:test_gpt2_llmc>
                   ${GPT2_TESTS}/write_llmc_gpt2.py)
  set_tests_properties(test_gpt2_llmc_python PROPERTIES
    LABELS unit TIMEOUT 120 SKIP_RETURN_CODE 77 ENVIRONMENT "${ZS_TEST_ENV}")

  # The real corpus, when scripts/fetch-shakespeare.sh has fetched it
  # (skipped, 77, otherwise): opens, splits and measures it.
  set(GPT2_CORPUS ${PROJECT_SOURCE_DIR}/data/shakespeare/shakespeare.txt)
  add_test(NAME test_gpt2_corpus
           COMMAND sh -c "if [ ! -f '${GPT2_CORPUS}' ]; then echo 'SKIP: ${GPT2_CORPUS} is absent (scripts/fetch-shakespeare.sh fetches it)'; exit 77; fi; exec \"$0\" '${GPT2_CORPUS}' 1024 0.05 256"
                   $<TARGET_FILE:gpt2_data_info>)
  set_tests_properties(test_gpt2_corpus PROPERTIES
    LABELS unit TIMEOUT 60 SKIP_RETURN_CODE 77 ENVIRONMENT "${ZS_TEST_ENV}")
endif()
