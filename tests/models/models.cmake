# The tests every language model gets, one row per model (issue 41):
#   model | program | demo config | its dump of tiny-model results | its numpy
#   reference | `each` when the dump holds one subdirectory per variant
# Adding a model adds a row:
#   <model>_sim_matches_cpu   the trainer on the simulated device gives the
#                             cpu backend's bits at np 1-2, stages 0 and 3:
#                             logs, samples, checkpoints, Hugging Face
#                             exports; no host wait from the model's device
#   <model>_numpy_check       the model's C results against an independent
#                             numpy implementation (float64); skipped (77),
#                             not failed, without python3 or numpy
set(ZS_MODEL_TESTS
    "gpt2|gpt2_train|gpt2_demo.cfg|gpt2_dump_tiny|tests/gpt2/gpt2_numpy_forward.py|"
    "llama|llama_train|llama_demo.cfg|llama_dump_tiny|tests/llama/llama_numpy_ref.py|each")
# More shapes on sim, hostile to the layers' tiles and the kernels' declared
# spans: name | program | config | overrides... GPT-2 with 3 heads of 14
# channels (C = 42: no 8-lane or 64-column multiple) and Qwen2's shape from
# tests/llama/shapes (head size 10, MLP 72, q/k/v biases, a tied head);
# LoRA at rank 3 on every Linear of the Llama demo's frozen base, and the
# same on the base stored in NF4 (QLoRA: the dequantize kernels on sim).
set(ZS_MODEL_SIM_SHAPES
    "gpt2_odd|gpt2_train|gpt2_demo.cfg|app.n_layer=3|app.n_head=3|app.n_embd=42|app.block_size=24|app.seq_len=24"
    "llama_qwen2|llama_train|llama_demo.cfg|app.model=\"\"|app.config=\"${PROJECT_SOURCE_DIR}/tests/llama/shapes/qwen2_tied.json\"|app.seq_len=24"
    "llama_lora|llama_train|llama_demo.cfg|app.lora_r=3|app.lora_alpha=6.0|app.lora_target_modules=\"all-linear\"|app.seq_len=24"
    "llama_qlora|llama_train|llama_demo.cfg|app.lora_r=3|app.lora_alpha=6.0|app.lora_target_modules=\"all-linear\"|app.seq_len=24|zero.frozen_storage=\"nf4\"|zero.max_live_units=3"
    "gpt2_lora|gpt2_train|gpt2_demo.cfg|app.n_layer=3|app.n_head=3|app.n_embd=42|app.block_size=24|app.seq_len=24|app.lora_r=3|app.lora_alpha=6.0|app.lora_target_modules=\"all-linear\"")
foreach(row IN LISTS ZS_MODEL_SIM_SHAPES)
  string(REPLACE "|" ";" fields "${row}")
  list(POP_FRONT fields name program config)
  add_test(NAME ${name}_sim_matches_cpu
           COMMAND bash ${PROJECT_SOURCE_DIR}/tests/models/run_sim_matches_cpu.sh
                   ${MPIEXEC_EXECUTABLE} $<TARGET_FILE:zs-ckpt> $<TARGET_FILE:${program}>
                   ${PROJECT_SOURCE_DIR}/configs/${config} ${fields})
  set_tests_properties(${name}_sim_matches_cpu PROPERTIES LABELS "mpi;sim" TIMEOUT 240
                       ENVIRONMENT "${ZS_MPI_TEST_ENV}")
endforeach()

foreach(row IN LISTS ZS_MODEL_TESTS)
  string(REPLACE "|" ";" fields "${row}")
  list(GET fields 0 model)
  list(GET fields 1 program)
  list(GET fields 2 config)
  list(GET fields 3 dump)
  list(GET fields 4 numpy_ref)
  list(LENGTH fields nfields)
  set(each "")
  if(nfields GREATER 5)
    list(GET fields 5 each)
  endif()
  add_test(NAME ${model}_sim_matches_cpu
           COMMAND bash ${PROJECT_SOURCE_DIR}/tests/models/run_sim_matches_cpu.sh
                   ${MPIEXEC_EXECUTABLE} $<TARGET_FILE:zs-ckpt> $<TARGET_FILE:${program}>
                   ${PROJECT_SOURCE_DIR}/configs/${config})
  set_tests_properties(${model}_sim_matches_cpu PROPERTIES LABELS "mpi;sim" TIMEOUT 240
                       ENVIRONMENT "${ZS_MPI_TEST_ENV}")
  add_test(NAME ${model}_numpy_check
           COMMAND bash ${PROJECT_SOURCE_DIR}/tests/models/run_numpy_check.sh
                   $<TARGET_FILE:${dump}> ${PROJECT_SOURCE_DIR}/${numpy_ref} ${each})
  set_tests_properties(${model}_numpy_check PROPERTIES LABELS unit TIMEOUT 60
                       SKIP_RETURN_CODE 77 ENVIRONMENT "${ZS_TEST_ENV}")
endforeach()

# The layer table's LoRA and frozen-parameter ops on the CPU device against
# double-precision loops (issue 42); the simulated and CUDA devices run the
# same composites (nn_layers_composed.c).
add_executable(test_nn_lora ${PROJECT_SOURCE_DIR}/tests/models/test_nn_lora.c)
target_include_directories(test_nn_lora PRIVATE ${PROJECT_SOURCE_DIR}/tests/models)
target_link_libraries(test_nn_lora PRIVATE nn_cpu m)
add_test(NAME test_nn_lora COMMAND test_nn_lora)
set_tests_properties(test_nn_lora PROPERTIES LABELS unit TIMEOUT 60 ENVIRONMENT "${ZS_TEST_ENV}")
