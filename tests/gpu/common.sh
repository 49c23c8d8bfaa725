# Shared by the GPU tests (tests/gpu/*.sh), sourced after tests/cli/common.sh (or
# tests/mpi/serial_reference.sh, which sources it).

# require_gpu PROGRAM: skip (77), saying why, when PROGRAM (a GPU build's) cannot run here: no
# NVIDIA driver (the program does not even load: libcuda.so.1 is the driver's), or no GPU visible.
require_gpu() {
  local why
  why=$(no_gpu_reason "$1")
  if [ -n "$why" ]; then
    echo "skipped: $why"
    exit 77
  fi
}

# no_gpu_reason PROGRAM: empty when PROGRAM can run on a GPU here, else why not.
no_gpu_reason() {
  if ldd "$1" 2>/dev/null | grep -q 'libcuda.so.1 => not found'; then
    echo "no CUDA driver on this machine (libcuda.so.1, which the GPU build needs, is not found)"
    return
  fi
  case "$(basename "$1")" in
    mpiformer-*)
      local out
      out=$("$1" --steps 1 --val-every 0 --layers 1 --dim 32 --heads 2 --batch 2 --seq-len 8 \
        --peak-gflops 1 2>&1 >/dev/null | grep -m1 '^error:')
      [[ "$out" != *"no GPU is visible"* ]] || echo "${out#error: }"
      ;;
  esac
}

# require_cpu_build WHAT: a CPU build's trainer in MPIFORMER_CPU_TRAIN, or skip (77).
require_cpu_build() {
  CPU_TRAIN=${MPIFORMER_CPU_TRAIN:-}
  if [ -z "$CPU_TRAIN" ] || [ ! -x "$CPU_TRAIN" ]; then
    echo "skipped: $1 needs a CPU build's trainer: set MPIFORMER_CPU_TRAIN (ci/gpu/run.sh does)"
    exit 77
  fi
}
