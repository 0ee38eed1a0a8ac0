# tests/gpt2/e2e.cmake — the GPT-2 trainer through mpirun, as a user runs it
# (included from examples/gpt2/CMakeLists.txt when ZS_BUILD_TESTS is on).
set(GPT2_E2E ${PROJECT_SOURCE_DIR}/tests/gpt2)

# Stages 0-3 bitwise at np 2 (fp32, bf16) with the tied embedding; np 1 vs np 2.
add_test(NAME gpt2_stages_bitwise
         COMMAND bash ${GPT2_E2E}/run_gpt2_stages.sh ${MPIEXEC_EXECUTABLE}
                 $<TARGET_FILE:gpt2_train> $<TARGET_FILE:zs-ckpt>)
set_tests_properties(gpt2_stages_bitwise PROPERTIES LABELS mpi TIMEOUT 300
                     ENVIRONMENT "${ZS_MPI_TEST_ENV}")

# 6 steps straight = 3 + checkpoint + resume + 3, bit for bit (data position included).
add_test(NAME gpt2_resume_bitwise
         COMMAND bash ${GPT2_E2E}/run_gpt2_resume.sh ${MPIEXEC_EXECUTABLE}
                 $<TARGET_FILE:gpt2_train> $<TARGET_FILE:zs-ckpt>)
set_tests_properties(gpt2_resume_bitwise PROPERTIES LABELS mpi TIMEOUT 300
                     ENVIRONMENT "${ZS_MPI_TEST_ENV}")

# The demo's configuration learns: held-out loss below the unigram baseline.
add_test(NAME gpt2_learns
         COMMAND bash ${GPT2_E2E}/run_gpt2_learns.sh ${MPIEXEC_EXECUTABLE}
                 $<TARGET_FILE:gpt2_train> ${PROJECT_SOURCE_DIR})
set_tests_properties(gpt2_learns PROPERTIES LABELS mpi TIMEOUT 300 SKIP_RETURN_CODE 77
                     ENVIRONMENT "${ZS_MPI_TEST_ENV}")

# GPT-2 124M at np 2, stage 3: two steps, memory per rank = the ZeRO formula.
add_test(NAME gpt2_124m_memory
         COMMAND bash ${GPT2_E2E}/run_gpt2_124m.sh ${MPIEXEC_EXECUTABLE} $<TARGET_FILE:gpt2_train>)
set_tests_properties(gpt2_124m_memory PROPERTIES LABELS mpi TIMEOUT 300
                     ENVIRONMENT "${ZS_MPI_TEST_ENV}")

# llm.c model files: import at np 2 (stages 0 and 3), exported bit for bit.
add_test(NAME gpt2_import_llmc
         COMMAND bash ${GPT2_E2E}/run_gpt2_import.sh ${MPIEXEC_EXECUTABLE}
                 $<TARGET_FILE:gpt2_train> $<TARGET_FILE:zs-ckpt>)
set_tests_properties(gpt2_import_llmc PROPERTIES LABELS mpi TIMEOUT 300 SKIP_RETURN_CODE 77
                     ENVIRONMENT "${ZS_MPI_TEST_ENV}")

# The trainer on the CUDA backend against the CPU in fp32 and bf16, stages
# 0-3 bitwise on CUDA and two runs alike (skipped, with the reason, without
# a GPU).
if(ZS_HAVE_CUDA)
  add_test(NAME gpt2_cuda_matches_cpu
           COMMAND bash ${GPT2_E2E}/run_gpt2_cuda.sh ${MPIEXEC_EXECUTABLE} $<TARGET_FILE:gpt2_train>
                   $<TARGET_FILE:zs-ckpt>)
  set_tests_properties(gpt2_cuda_matches_cpu PROPERTIES LABELS "cuda;mpi" TIMEOUT 300
                       SKIP_RETURN_CODE 77 ENVIRONMENT "${ZS_MPI_TEST_ENV}")
endif()

# GPT-2 124M refused by a simulated device without offload, trained with it (issue 12).
add_test(NAME gpt2_offload_cap
         COMMAND bash ${GPT2_E2E}/run_gpt2_offload.sh ${MPIEXEC_EXECUTABLE} $<TARGET_FILE:gpt2_train>)
set_tests_properties(gpt2_offload_cap PROPERTIES LABELS mpi TIMEOUT 300
                     ENVIRONMENT "${ZS_MPI_TEST_ENV}")

# LoRA on a frozen base (issue 42) at np 3 on an odd shape: stages 0-3
# bitwise, the first loss the base's, the base unchanged bit for bit, the
# adapters trained, resume bitwise, "c_proj" both c_projs, refusals named.
add_test(NAME gpt2_lora
         COMMAND bash ${GPT2_E2E}/run_gpt2_lora.sh ${MPIEXEC_EXECUTABLE}
                 $<TARGET_FILE:gpt2_train> $<TARGET_FILE:zs-ckpt>)
set_tests_properties(gpt2_lora PROPERTIES LABELS mpi TIMEOUT 300
                     ENVIRONMENT "${ZS_MPI_TEST_ENV}")
