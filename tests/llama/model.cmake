# tests/llama/model.cmake — tests of the Llama model library (llama_model),
# included from examples/llama/CMakeLists.txt when ZS_BUILD_TESTS is on.
# They link the library alone (no zeroshard), as a trainer's math does.
set(LLAMA_TEST_DIR ${PROJECT_SOURCE_DIR}/tests/llama)
add_library(llama_test_model STATIC ${LLAMA_TEST_DIR}/llama_test_model.c)
target_include_directories(llama_test_model PUBLIC ${LLAMA_TEST_DIR})
target_link_libraries(llama_test_model PUBLIC llama_model model_tm)

# The parameter table, presets, config.json in and out, the RoPE table.
add_executable(test_llama_model ${LLAMA_TEST_DIR}/test_llama_model.c)
target_link_libraries(test_llama_model PRIVATE llama_test_model)
add_test(NAME test_llama_model COMMAND test_llama_model)
set_tests_properties(test_llama_model PROPERTIES LABELS unit TIMEOUT 60
                     ENVIRONMENT "${ZS_TEST_ENV}")

# The CPU backend: finite differences of each new op and of every
# parameter, thread-count independence, recomputation, head, errors.
add_executable(test_llama_backend ${LLAMA_TEST_DIR}/test_llama_backend.c)
target_link_libraries(test_llama_backend PRIVATE llama_test_model)
add_test(NAME test_llama_backend COMMAND test_llama_backend)
set_tests_properties(test_llama_backend PROPERTIES LABELS unit TIMEOUT 120
                     ENVIRONMENT "${ZS_TEST_ENV}")

# Loss, logits and every gradient against an independent numpy
# implementation in float64 (tests/llama/llama_numpy_ref.py), for five tiny
# variants: tied and untied, no biases, Qwen2's q/k/v biases, every bias,
# llama3 RoPE scaling, and LoRA on a frozen base (issue 42: the gradients of
# A and B, none for the base) (the test is the family's row of
# tests/models/models.cmake: llama_numpy_check).
add_executable(llama_dump_tiny ${LLAMA_TEST_DIR}/llama_dump_tiny.c)
target_link_libraries(llama_dump_tiny PRIVATE llama_test_model)

# Against Hugging Face's own LlamaForCausalLM: the committed fixture
# tests/llama/golden (made by tests/llama/make_golden.py with PyTorch and
# transformers, which the test itself does not need): loss, logits and every
# gradient within 1e-5, untied, and tied with every bias and llama3 RoPE.
# It links zeroshard for one thing, the safetensors reader, which reads
# PEFT's adapter file for the LoRA check below.
add_executable(test_llama_golden ${LLAMA_TEST_DIR}/test_llama_golden.c)
target_link_libraries(test_llama_golden PRIVATE llama_test_model zeroshard_internal)
add_test(NAME test_llama_golden COMMAND test_llama_golden ${LLAMA_TEST_DIR}/golden)
set_tests_properties(test_llama_golden PROPERTIES LABELS unit TIMEOUT 60 SKIP_RETURN_CODE 77
                     ENVIRONMENT "${ZS_TEST_ENV}")

# LoRA against PEFT (issue 42): the committed fixture tests/llama/golden_lora
# (made by tests/llama/make_lora_golden.py with PyTorch, transformers and
# peft over the golden "untied" model): PEFT's adapter_model.safetensors and
# adapter_config.json read as PEFT wrote them, the base frozen; loss, logits
# and the gradient of every lora_A and lora_B within 1e-5, and no gradient
# for the base.
add_test(NAME test_llama_lora_golden
         COMMAND test_llama_golden --lora ${LLAMA_TEST_DIR}/golden_lora ${LLAMA_TEST_DIR}/golden)
set_tests_properties(test_llama_lora_golden PROPERTIES LABELS unit TIMEOUT 60
                     SKIP_RETURN_CODE 77 ENVIRONMENT "${ZS_TEST_ENV}")

# A Hugging Face checkpoint in and out through the family's trainer code
# (llama_family.c): the golden weights as that library saves them, imported
# at np 1-3 in stages 0-3 (logits within 1e-5 of LlamaForCausalLM's), and
# exported back bit for bit (zs-ckpt export --hf).
add_executable(test_llama_import ${LLAMA_TEST_DIR}/test_llama_import.c
                                 ${PROJECT_SOURCE_DIR}/examples/llama/llama_family.c)
target_link_libraries(test_llama_import PRIVATE ex_trainer llama_model zs_test_util)
add_test(NAME llama_import_hf
         COMMAND bash ${LLAMA_TEST_DIR}/run_llama_import.sh ${MPIEXEC_EXECUTABLE}
                 $<TARGET_FILE:test_llama_import> $<TARGET_FILE:zs-ckpt>)
set_tests_properties(llama_import_hf PROPERTIES LABELS mpi TIMEOUT 300 SKIP_RETURN_CODE 77
                     ENVIRONMENT "${ZS_MPI_TEST_ENV}")

# llama_train on Hugging Face checkpoints as users bring them (issue 38):
# evaluation only with six decimals, a tied checkpoint carrying an
# lm_head.weight copy, NaN weights failing the run, a tensor the model lacks
# skipped with app.init_ignore, app.init_from beside a checkpoint to resume.
add_test(NAME llama_hf_cases
         COMMAND bash ${LLAMA_TEST_DIR}/run_llama_hf_cases.sh ${MPIEXEC_EXECUTABLE}
                 $<TARGET_FILE:llama_train>)
set_tests_properties(llama_hf_cases PROPERTIES LABELS mpi TIMEOUT 300 SKIP_RETURN_CODE 77
                     ENVIRONMENT "${ZS_MPI_TEST_ENV}")

# The trainer on the family: stages 0-3 bitwise at np 1-3 (untied and tied
# with biases; fp32, and bf16 at np 2), recomputation, resume, and the
# config.json that travels with checkpoints.
add_test(NAME llama_train_bitwise
         COMMAND bash ${LLAMA_TEST_DIR}/run_llama_train.sh ${MPIEXEC_EXECUTABLE}
                 $<TARGET_FILE:llama_train> $<TARGET_FILE:zs-ckpt>)
set_tests_properties(llama_train_bitwise PROPERTIES LABELS mpi TIMEOUT 300
                     ENVIRONMENT "${ZS_MPI_TEST_ENV}")

# LoRA on a frozen base imported in Hugging Face's layout (issue 42): stages
# bitwise at np 2 (fp32) and 3 (bf16), the base unchanged, the adapters
# trained, resume bitwise, refusals named.
add_test(NAME llama_lora
         COMMAND bash ${LLAMA_TEST_DIR}/run_llama_lora.sh ${MPIEXEC_EXECUTABLE}
                 $<TARGET_FILE:llama_train> $<TARGET_FILE:zs-ckpt>)
set_tests_properties(llama_lora PROPERTIES LABELS mpi TIMEOUT 300
                     ENVIRONMENT "${ZS_MPI_TEST_ENV}")

# QLoRA (issue 43): the base stored in NF4 or int8, stages bitwise at np 3
# (bf16), resume bitwise, the first loss within the first-order bound of the
# quantization error, the live-unit refusal named.
add_test(NAME llama_qlora
         COMMAND bash ${LLAMA_TEST_DIR}/run_llama_qlora.sh ${MPIEXEC_EXECUTABLE}
                 $<TARGET_FILE:llama_train> $<TARGET_FILE:zs-ckpt>)
set_tests_properties(llama_qlora PROPERTIES LABELS mpi TIMEOUT 300
                     ENVIRONMENT "${ZS_MPI_TEST_ENV}")

# The LoRA exports in the real libraries, where python (PEFT_PYTHON, else
# python3) has torch, transformers and peft (skipped otherwise): PEFT on the
# base with --peft's adapters gives --hf --merge's logits in transformers
# within 1e-5, other logits than the base's, and llama_train's validation loss.
add_test(NAME llama_lora_peft_load
         COMMAND bash ${LLAMA_TEST_DIR}/peft_load_check.sh ${MPIEXEC_EXECUTABLE}
                 $<TARGET_FILE:llama_train> $<TARGET_FILE:zs-ckpt>)
set_tests_properties(llama_lora_peft_load PROPERTIES LABELS mpi TIMEOUT 120 SKIP_RETURN_CODE 77
                     ENVIRONMENT "${ZS_MPI_TEST_ENV}")
