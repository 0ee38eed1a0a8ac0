#!/usr/bin/env bash
# Installs the build into a temporary prefix and builds the consumer program
# (consumer/app.c) against the installation only, twice: with CMake's
# find_package(zeroshard) and with pkg-config and a plain Makefile; each route
# links the shared library (app) and the static one (app_static). Each program
# runs on 2 ranks; ldd shows that the shared-library builds load the installed
# libzeroshard.so.0.3 and the static builds none.
#
#   run_consumer.sh CMAKE BUILD_DIR CONSUMER_SRC MPIEXEC WORK_PARENT
#
# The temporary directory under WORK_PARENT is removed however the test ends.
set -euo pipefail

cmake_cmd=$1 build_dir=$2 consumer=$3 mpiexec=$4 work_parent=$5
mkdir -p "$work_parent"
tmp=$(mktemp -d "$work_parent/install.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
prefix=$tmp/prefix
log=$tmp/log

fail() {
  echo "FAIL: $*" >&2
  if [ -s "$log" ]; then
    echo "--- last output ---" >&2
    tail -n 40 "$log" >&2
  fi
  exit 1
}
step() { echo "== $*"; }

step "cmake --install $build_dir --prefix $prefix"
"$cmake_cmd" --install "$build_dir" --prefix "$prefix" >"$log" 2>&1 || fail "cmake --install failed"

libdir=$prefix/lib
for f in lib/libzeroshard.so.0.3.0 lib/libzeroshard.so.0.3 lib/libzeroshard.so lib/libzeroshard.a \
         include/zeroshard.h include/zeroshard_mpi.h include/zeroshard_sim.h bin/zs-ckpt bin/zs-estimate bin/zs-run \
         share/zeroshard/python/zs_run/cli.py share/zeroshard/python/zs_run/decide.py \
         lib/cmake/zeroshard/zeroshardConfig.cmake lib/cmake/zeroshard/zeroshardConfigVersion.cmake \
         lib/cmake/zeroshard/zeroshardTargets.cmake lib/cmake/zeroshard/zeroshardStaticTargets.cmake \
         lib/pkgconfig/zeroshard.pc share/zeroshard/configs/reference.cfg \
         share/doc/zeroshard/README.md share/doc/zeroshard/ARCHITECTURE.md; do
  [ -e "$prefix/$f" ] || fail "the installation lacks $f"
done
# zs-run finds its modules where they were installed, with no PYTHONPATH.
env -u PYTHONPATH "$prefix/bin/zs-run" --help >"$log" 2>&1 || fail "the installed zs-run --help failed"
grep -q "^usage: zs-run" "$log" || fail "the installed zs-run printed no usage"
[ "$(readlink "$libdir/libzeroshard.so.0.3")" = libzeroshard.so.0.3.0 ] ||
  fail "libzeroshard.so.0.3 -> $(readlink "$libdir/libzeroshard.so.0.3"), expected libzeroshard.so.0.3.0"
grep -q "^prefix=$prefix\$" "$libdir/pkgconfig/zeroshard.pc" ||
  fail "zeroshard.pc does not name the install prefix $prefix: $(grep '^prefix=' "$libdir/pkgconfig/zeroshard.pc")"

# check_ldd EXE shared|static: which libzeroshard the program loads.
check_ldd() {
  local exe=$1 kind=$2 line
  line=$(ldd "$exe" | grep 'libzeroshard' || true)
  echo "ldd $exe: ${line:-no libzeroshard (static)}"
  if [ "$kind" = shared ]; then
    case "$line" in
      *"=> $libdir/libzeroshard.so.0.3 "*) ;;
      *) fail "$exe loads '${line:-no libzeroshard}', expected $libdir/libzeroshard.so.0.3" ;;
    esac
  elif [ -n "$line" ]; then
    fail "$exe was linked statically but loads '$line'"
  fi
}

# run_app EXE: 2 ranks; each must print its line.
run_app() {
  local exe=$1 rundir
  rundir=$(mktemp -d "$tmp/run.XXXXXX")
  "$mpiexec" --oversubscribe --bind-to none -np 2 "$exe" "$rundir" >"$log" 2>&1 ||
    fail "mpirun -np 2 $exe exited $?"
  cat "$log"
  local n
  n=$(grep -c '^consumer: rank [01] of 2, stage 3, step 1,' "$log" || true)
  [ "$n" = 2 ] || fail "$exe: expected a 'consumer: rank R of 2' line from each of 2 ranks, got $n"
}

step "(a) CMake: find_package(zeroshard) with CMAKE_PREFIX_PATH=$prefix"
"$cmake_cmd" -S "$consumer" -B "$tmp/cmake-build" -DCMAKE_PREFIX_PATH="$prefix" \
  -DCMAKE_BUILD_TYPE=Release >"$log" 2>&1 || fail "configuring the CMake consumer failed"
"$cmake_cmd" --build "$tmp/cmake-build" >"$log" 2>&1 || fail "building the CMake consumer failed"
check_ldd "$tmp/cmake-build/app" shared
check_ldd "$tmp/cmake-build/app_static" static
run_app "$tmp/cmake-build/app"
run_app "$tmp/cmake-build/app_static"

step "(b) pkg-config and make, PKG_CONFIG_PATH=$libdir/pkgconfig"
mkdir -p "$tmp/make-build"
PKG_CONFIG_PATH=$libdir/pkgconfig make -C "$consumer" O="$tmp/make-build" >"$log" 2>&1 ||
  fail "building the pkg-config consumer failed"
cat "$log"
check_ldd "$tmp/make-build/app" shared
check_ldd "$tmp/make-build/app_static" static
run_app "$tmp/make-build/app"
run_app "$tmp/make-build/app_static"

echo "PASS: installed zeroshard consumed through CMake and pkg-config, shared and static"
