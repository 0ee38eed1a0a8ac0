# bench/gpt2/model.cmake — the GPT-2 model's CPU training step against the
# machine's sgemm (bench_gpt2_model.c says what it measures). Include it from
# bench/CMakeLists.txt: include(${CMAKE_CURRENT_SOURCE_DIR}/gpt2/model.cmake)
# Paths are relative to this file, so it works from any including directory.
if(TARGET gpt2_model)
  add_executable(bench_gpt2_model ${CMAKE_CURRENT_LIST_DIR}/bench_gpt2_model.c)
  target_link_libraries(bench_gpt2_model PRIVATE gpt2_model zeroshard_internal) # core/number.h
endif()
