# Installation and packaging, included at the end of the top-level
# CMakeLists.txt (after every target exists):
#   cmake --install build --prefix P   libraries, headers, tools, configs, docs,
#                                      P/lib/cmake/zeroshard and P/lib/pkgconfig
#   cd build && cpack -G DEB           a .deb of the same files under /usr
# The tools install themselves (install(TARGETS ...) in tools/CMakeLists.txt).
include(CMakePackageConfigHelpers)

set(ZS_CMAKE_DIR ${CMAKE_INSTALL_LIBDIR}/cmake/zeroshard)

# Two export sets, so that a program linking the shared library does not need
# the -dev packages of the static library's private dependencies
# (zeroshardConfig.cmake loads the second only where they are found).
install(TARGETS zeroshard_shared EXPORT zeroshardTargets
  LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR})
install(TARGETS zeroshard EXPORT zeroshardStaticTargets
  ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR})
install(EXPORT zeroshardTargets NAMESPACE zeroshard:: DESTINATION ${ZS_CMAKE_DIR})
install(EXPORT zeroshardStaticTargets NAMESPACE zeroshard:: DESTINATION ${ZS_CMAKE_DIR})

# zeroshard.h needs no MPI header; zeroshard_mpi.h includes mpi.h and
# zeroshard_cuda.h cuda_runtime_api.h (installed only by CUDA builds, whose
# library defines its functions); zeroshard_sim.h (the simulated device) is
# in every build.
set(ZS_PUBLIC_HEADERS include/zeroshard.h include/zeroshard_mpi.h include/zeroshard_sim.h)
if(ZS_HAVE_CUDA)
  list(APPEND ZS_PUBLIC_HEADERS include/zeroshard_cuda.h)
endif()
install(FILES ${ZS_PUBLIC_HEADERS} DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})

# Example configurations (reference.cfg documents every key) and the docs.
file(GLOB ZS_EXAMPLE_CONFIGS CONFIGURE_DEPENDS ${PROJECT_SOURCE_DIR}/configs/*.cfg)
install(FILES ${ZS_EXAMPLE_CONFIGS} DESTINATION ${CMAKE_INSTALL_DATADIR}/zeroshard/configs)
file(GLOB ZS_DOCS CONFIGURE_DEPENDS ${PROJECT_SOURCE_DIR}/docs/*.md)
install(FILES ${PROJECT_SOURCE_DIR}/README.md ${ZS_DOCS} DESTINATION ${CMAKE_INSTALL_DOCDIR})

# ------------------------------------------------------------ CMake package
if(ZS_HAVE_CUDA)
  set(ZS_HAVE_CUDA_BOOL ON)
else()
  set(ZS_HAVE_CUDA_BOOL OFF)
endif()
configure_package_config_file(${PROJECT_SOURCE_DIR}/cmake/zeroshardConfig.cmake.in
  ${PROJECT_BINARY_DIR}/zeroshardConfig.cmake INSTALL_DESTINATION ${ZS_CMAKE_DIR})
# Before 1.0 a minor version may break the ABI (see ZS_SOVERSION).
if(PROJECT_VERSION_MAJOR EQUAL 0)
  set(ZS_PACKAGE_COMPATIBILITY SameMinorVersion)
else()
  set(ZS_PACKAGE_COMPATIBILITY SameMajorVersion)
endif()
write_basic_package_version_file(${PROJECT_BINARY_DIR}/zeroshardConfigVersion.cmake
  VERSION ${PROJECT_VERSION} COMPATIBILITY ${ZS_PACKAGE_COMPATIBILITY})
install(FILES ${PROJECT_BINARY_DIR}/zeroshardConfig.cmake
              ${PROJECT_BINARY_DIR}/zeroshardConfigVersion.cmake
        DESTINATION ${ZS_CMAKE_DIR})

# --------------------------------------------------------------- pkg-config
# MPI in Requires: programs that include zeroshard_mpi.h need mpi.h. Open MPI
# ships ompi-c.pc, MPICH mpich.pc; with neither, compile with mpicc (see
# README, "Install and link").
pkg_search_module(ZS_PC_MPI QUIET ompi-c mpich mpi-c)
if(ZS_PC_MPI_FOUND)
  set(ZS_PC_REQUIRES ${ZS_PC_MPI_MODULE_NAME})
else()
  set(ZS_PC_REQUIRES "")
  message(STATUS "zeroshard: no pkg-config module for MPI; zeroshard.pc leaves MPI to mpicc")
endif()
set(ZS_PC_CFLAGS "")
set(ZS_PC_LIBS_PRIVATE "${OpenMP_C_FLAGS} -lm")
if(ZS_HAVE_CUDA)
  foreach(dir IN LISTS CUDAToolkit_INCLUDE_DIRS)
    string(APPEND ZS_PC_CFLAGS " -I${dir}")
  endforeach()
  get_filename_component(ZS_NCCL_DIR ${NCCL_LIBRARY} DIRECTORY)
  # nvcc's objects need the C++ runtime once the static library is linked by a C compiler.
  string(APPEND ZS_PC_LIBS_PRIVATE
         " -L${CUDAToolkit_LIBRARY_DIR} -lcudart -L${ZS_NCCL_DIR} -lnccl -lstdc++")
endif()
# The prefix is known only at install time (cmake --install --prefix, or
# CPack's /usr), so the file is configured twice: now for everything else,
# and by the install script for the prefix.
set(ZS_PC_PREFIX "@ZS_PC_PREFIX@")
configure_file(${PROJECT_SOURCE_DIR}/cmake/zeroshard.pc.in ${PROJECT_BINARY_DIR}/zeroshard.pc.in @ONLY)
install(CODE "
  set(ZS_PC_PREFIX \"\${CMAKE_INSTALL_PREFIX}\")
  configure_file(\"${PROJECT_BINARY_DIR}/zeroshard.pc.in\" \"${PROJECT_BINARY_DIR}/pc-install/zeroshard.pc\" @ONLY)
  file(INSTALL \"${PROJECT_BINARY_DIR}/pc-install/zeroshard.pc\"
       DESTINATION \"\${CMAKE_INSTALL_PREFIX}/${CMAKE_INSTALL_LIBDIR}/pkgconfig\")
")

# ------------------------------------------------------------------ CPack
set(CPACK_PACKAGE_NAME zeroshard)
set(CPACK_PACKAGE_VENDOR "zeroshard developers")
set(CPACK_PACKAGE_CONTACT "zeroshard developers <zeroshard@localhost>")
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY "ZeRO-style sharded data-parallel training runtime for C")
set(CPACK_PACKAGE_VERSION ${PROJECT_VERSION})
set(CPACK_PACKAGING_INSTALL_PREFIX /usr)
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)
set(CPACK_DEBIAN_PACKAGE_SECTION libs)
set(CPACK_DEBIAN_PACKAGE_MAINTAINER "zeroshard developers <zeroshard@localhost>")
# CPack puts the summary first; this is the long description under it.
set(CPACK_DEBIAN_PACKAGE_DESCRIPTION
    "libzeroshard (shared and static), its headers, CMake and pkg-config files,\n the zs-ckpt checkpoint tool, the zs-estimate memory tool, the zs-run launcher, example configurations and documentation.")
# Runtime dependencies come from dpkg-shlibdeps on the shared library and the
# tools. CUDA and NCCL come from NVIDIA's repository, which dpkg-shlibdeps
# does not know: CUDA builds list them by hand, with the Debian libraries.
# python3 runs zs-run (a script, which dpkg-shlibdeps does not look at); CPack
# appends what dpkg-shlibdeps finds to the list given here.
if(NOT ZS_HAVE_CUDA)
  set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)
  set(CPACK_DEBIAN_PACKAGE_DEPENDS "python3")
else()
  set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS OFF)
  set(CPACK_DEBIAN_PACKAGE_DEPENDS
      "python3, libc6, libgomp1, libopenmpi3, libconfig9, libxxhash0, libjson-c5, libstdc++6, libnccl2, cuda-cudart-${CUDAToolkit_VERSION_MAJOR}-${CUDAToolkit_VERSION_MINOR}")
endif()
# Building against the package needs the -dev packages of what it links.
set(CPACK_DEBIAN_PACKAGE_SUGGESTS "libopenmpi-dev, libconfig-dev, libxxhash-dev, libjson-c-dev, pkg-config")
include(CPack)
