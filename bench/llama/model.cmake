# bench/llama/model.cmake — a Llama block against a GPT-2 block of the same
# FLOPs per token on the CPU backends (bench_llama_block.c says what it
# measures). Included from bench/CMakeLists.txt.
if(TARGET llama_model AND TARGET gpt2_model)
  add_executable(bench_llama_block ${CMAKE_CURRENT_LIST_DIR}/bench_llama_block.c)
  target_link_libraries(bench_llama_block PRIVATE llama_model gpt2_model)
endif()
