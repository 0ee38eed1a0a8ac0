#!/usr/bin/env bash
# Runs test_ckpt_save at np 2 in a fresh work directory that is removed
# whatever happens (the test plants symlinks and files there).
# Usage: run_ckpt_save.sh MPIRUN TEST_BINARY
set -u
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
"$1" --oversubscribe --bind-to none -np 2 "$2" "$work"
