#!/usr/bin/env bash
# Runs a GPU build's GoogleTest binary, or skips (77) saying why where it cannot run: without the
# NVIDIA driver it does not even load. (With the driver but no GPU, the binary says so itself.)
#   bash tests/gpu/run_gtest.sh BINARY [ARGS...]
source "$(dirname "$0")/common.sh"
why=$(no_gpu_reason "$1")
if [ -n "$why" ]; then
  echo "no CUDA device: $why"
  exit 77
fi
exec "$@"
