# tests/gpt2/e2e.cmake — the GPT-2 trainer through mpirun, as a user runs it
# (included from examples/gpt2/CMakeLists.txt when ZS_BUILD_TESTS is on).
set(GPT2_E2E ${PROJECT_SOURCE_DIR}/tests/gpt2)

# Stages 0-3 bitwise at np 2 (fp32, bf16) with the tied embedding; np 1 vs np 2.
add_test(NAME gpt2_stages_bitwise
         COMMAND bash ${GPT2_E2E}/run_gpt2_stages.sh ${MPIEXEC_EXECUTABLE}
                 $<TARGET_FILE:gpt2_train> $<TARGET_FILE:zs-ckpt>)
set_tests_properties(gpt2_stages_bitwise PROPERTIES LABELS mpi TIMEOUT 300
                     ENVIRONMENT "${ZS_MPI_TEST_ENV}")
