# Per-file flags of the CPU backend's kernels (src/backend/cpu_kernels_*.c).
# Their instruction sets come from function target attributes in the sources,
# so these flags are not needed for a correct build, only a fast one:
#   -fno-math-errno   sqrtf no longer sets errno for negative inputs, so the
#                     compiler can vectorize it in the Adam loops. It changes no
#                     result: sqrt is exactly rounded either way.
#   -ffp-contract=off already the default for -std=c11; stated so that a
#                     later change of the C standard flags cannot fuse a*b+c
#                     into an FMA and break bit-identity with the scalar code.
# Include from the top-level CMakeLists.txt (source properties are per directory).
set(ZS_CPU_KERNEL_SOURCES
  ${PROJECT_SOURCE_DIR}/src/backend/cpu_kernels_scalar.c
  ${PROJECT_SOURCE_DIR}/src/backend/cpu_kernels_avx2.c
  ${PROJECT_SOURCE_DIR}/src/backend/cpu_kernels_avx512.c)
set_source_files_properties(${ZS_CPU_KERNEL_SOURCES} PROPERTIES
  COMPILE_OPTIONS "-fno-math-errno;-ffp-contract=off")
