# Test helpers. Every test has a timeout; MPI tests launch themselves under
# mpirun with the Open MPI variables that allow root and oversubscription, so
# `ctest` works as root on a 2-core machine with 4 ranks.
set(ZS_TEST_ENV
  OMPI_ALLOW_RUN_AS_ROOT=1
  OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
  OMPI_MCA_rmaps_base_oversubscribe=1
  OMPI_MCA_mpi_yield_when_idle=1
  OMP_NUM_THREADS=1
  OPENBLAS_NUM_THREADS=1
  ZS_LOG_LEVEL=warn)
# Sanitizer builds: every test runs under ASan + UBSan. Leak detection stays
# on for plain programs but is off under mpirun: Open MPI keeps allocations
# until exit in plugins it unloads, which LeakSanitizer can neither attribute
# nor suppress by name. Leaks in zeroshard's own MPI paths are checked with
# valgrind instead (docs/ARCHITECTURE.md, "Checking memory").
set(ZS_MPI_TEST_ENV ${ZS_TEST_ENV})
if(ZS_SANITIZE)
  list(APPEND ZS_TEST_ENV UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1)
  list(APPEND ZS_MPI_TEST_ENV ASAN_OPTIONS=detect_leaks=0 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1)
endif()
set(ZS_MPIRUN ${MPIEXEC_EXECUTABLE} --oversubscribe --bind-to none)

# zs_add_unit_test(NAME SOURCES... [LIBS ...]) — a plain program, label `unit`.
function(zs_add_unit_test name)
  cmake_parse_arguments(T "" "TIMEOUT" "SOURCES;LIBS" ${ARGN})
  add_executable(${name} ${T_SOURCES})
  target_link_libraries(${name} PRIVATE zeroshard_internal zs_test_util ${T_LIBS})
  add_test(NAME ${name} COMMAND ${name})
  if(NOT T_TIMEOUT)
    set(T_TIMEOUT 120)
  endif()
  set_tests_properties(${name} PROPERTIES LABELS unit TIMEOUT ${T_TIMEOUT} ENVIRONMENT "${ZS_TEST_ENV}")
endfunction()

# zs_add_mpi_test(NAME EXE NP n [ARGS ...] [TIMEOUT s]) — `mpirun -np n EXE ARGS`, label `mpi`.
function(zs_add_mpi_test name)
  cmake_parse_arguments(T "" "EXE;NP;TIMEOUT" "ARGS" ${ARGN})
  if(NOT T_TIMEOUT)
    set(T_TIMEOUT 180)
  endif()
  add_test(NAME ${name} COMMAND ${ZS_MPIRUN} -np ${T_NP} $<TARGET_FILE:${T_EXE}> ${T_ARGS})
  set_tests_properties(${name} PROPERTIES LABELS mpi TIMEOUT ${T_TIMEOUT} ENVIRONMENT "${ZS_MPI_TEST_ENV}")
endfunction()
