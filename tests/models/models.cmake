# The tests every language model gets, one row per model (issue 41): the
# program, its demo configuration. Adding a model adds a row.
#   <model>_sim_matches_cpu   the trainer on the simulated device gives the
#                             cpu backend's bits at np 1-2, stages 0 and 3:
#                             logs, samples, checkpoints, Hugging Face exports
set(ZS_MODEL_TESTS
    "gpt2|gpt2_train|gpt2_demo.cfg"
    "llama|llama_train|llama_demo.cfg")
foreach(row IN LISTS ZS_MODEL_TESTS)
  string(REPLACE "|" ";" fields "${row}")
  list(GET fields 0 model)
  list(GET fields 1 program)
  list(GET fields 2 config)
  add_test(NAME ${model}_sim_matches_cpu
           COMMAND bash ${PROJECT_SOURCE_DIR}/tests/models/run_sim_matches_cpu.sh
                   ${MPIEXEC_EXECUTABLE} $<TARGET_FILE:zs-ckpt> $<TARGET_FILE:${program}>
                   ${PROJECT_SOURCE_DIR}/configs/${config})
  set_tests_properties(${model}_sim_matches_cpu PROPERTIES LABELS "mpi;sim" TIMEOUT 240
                       ENVIRONMENT "${ZS_MPI_TEST_ENV}")
endforeach()
