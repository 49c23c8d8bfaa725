#!/usr/bin/env bash
# The GEMM kernels a run uses are as wide as the CPU allows, and when something forces narrower
# ones the banner says so in one warning line naming the cause and the fix (item 2 of issue 12).
# What the CPU allows is read from /proc/cpuinfo here, independently of the trainer's CPUID code.
# Every variable that can narrow the kernels is set or unset explicitly in each run: the test
# never depends on the environment it inherits (this project's machines set OPENBLAS_CORETYPE).
source "$(dirname "$0")/common.sh"
unset OPENBLAS_CORETYPE ONEDNN_MAX_CPU_ISA DNNL_MAX_CPU_ISA

clean=(env OMP_NUM_THREADS=1)
run_args=(--steps 1 --val-every 0 --batch 4 --seq-len 16 --layers 1 --dim 32 --heads 2)
flags=" $(grep -m1 '^flags' /proc/cpuinfo) "
has() { [[ "$flags" == *" $1 "* ]]; }
avx512=false
has avx512f && has avx512bw && has avx512vl && has avx512dq && avx512=true
# The libraries of this build, from the trainer's own error message for an unknown one.
libraries=$("$TRAIN" --gemm none 2>&1 | sed -n 's/.*it has \(.*\)$/\1/p' | tr -d ',')
[ -n "$libraries" ] && ok "GEMM libraries of this build: $libraries" || bad "no GEMM library listed"

# run NAME ENV... -- ARGS...: the trainer's output in $WORK/NAME.{out,err}, status in $status.
run() {
  local name=$1
  shift
  local envs=()
  while [ "$1" != -- ]; do envs+=("$1"); shift; done
  shift
  "${clean[@]}" "${envs[@]}" "$TRAIN" "${run_args[@]}" "$@" >"$WORK/$name.out" 2>"$WORK/$name.err"
  status=$?
}
warnings() { grep -c '^warning: GEMM kernels narrower' "$WORK/$1.err"; }
gemm_line() { grep -m1 '^gemm:' "$WORK/$1.out"; }

# 1. Nothing set: the widest kernels, no warning.
for lib in $libraries; do
  run "$lib" -- --gemm "$lib"
  line=$(gemm_line "$lib")
  case "$lib" in
    openblas) $avx512 && want='(AVX-512)' || want='(AVX2)' ;;
    onednn)
      want=avx2
      $avx512 && want=avx512_core
      $avx512 && has avx512_bf16 && want=avx512_core_bf16
      has amx_bf16 && want=avx512_core_amx ;;
  esac
  unknown=$(grep '^warning: GEMM kernels narrower.*does not know this CPU' "$WORK/$lib.err")
  if [ "$status" -eq 0 ] && [[ "$line" == *"$want"* ]] && [ "$(warnings "$lib")" -eq 0 ]; then
    ok "$lib with nothing forcing it runs the CPU's widest kernels, no warning: $line"
  elif [ "$lib" = openblas ] && [ "$status" -eq 0 ] && [ "$(warnings "$lib")" -eq 1 ] &&
    [[ "$unknown" =~ OPENBLAS_CORETYPE=([A-Za-z]+) ]]; then
    # An OpenBLAS older than the CPU falls back to narrow kernels by itself: one warning, whose
    # advice must then give the widest kernels without a warning.
    advice=${BASH_REMATCH[1]}
    run "$lib-advised" "OPENBLAS_CORETYPE=$advice" -- --gemm "$lib"
    if [ "$status" -eq 0 ] && [[ "$(gemm_line "$lib-advised")" == *"$want"* ]] &&
      [ "$(warnings "$lib-advised")" -eq 0 ]; then
      ok "$lib does not know this CPU: one warning, and its advice gives $want: $unknown"
    else
      bad "$lib: the advice OPENBLAS_CORETYPE=$advice does not give $want: $(gemm_line "$lib-advised")"
    fi
  else
    bad "$lib: expected '$want' and no warning (status $status): $line $(cat "$WORK/$lib.err")"
  fi
done

# 2. Forced narrower: one warning naming the variable and the fix, and MFU's peak still comes from
# the fastest kernels this build has.
if ! $avx512; then
  echo "note: this CPU has no AVX-512; forcing AVX2 kernels narrows nothing (checks 2 not run)"
else
  for lib in $libraries; do
    case "$lib" in
      openblas) var=OPENBLAS_CORETYPE value=Haswell narrow='Haswell (AVX2)' ;;
      onednn) var=ONEDNN_MAX_CPU_ISA value=AVX2 narrow='avx2' ;;
    esac
    run "$lib-forced" "$var=$value" -- --gemm "$lib"
    line=$(gemm_line "$lib-forced")
    warning=$(grep '^warning: GEMM kernels narrower' "$WORK/$lib-forced.err")
    if [ "$status" -eq 0 ] && [ "$(warnings "$lib-forced")" -eq 1 ] && [[ "$line" == *"$narrow"* ]] &&
      [[ "$warning" == *"$var=$value"* ]] && [[ "$warning" == *"unset $var"* ]]; then
      ok "$var=$value: one warning line: $warning"
    else
      bad "$var=$value on $lib: status $status, gemm line '$line', warnings: $(cat "$WORK/$lib-forced.err")"
    fi
  done
  # The peak is the best rate of every library, measured: with OpenBLAS forced narrow, oneDNN is
  # measured too (which of them wins depends on the CPU: an older oneDNN may not know a newer one).
  if [[ " $libraries " == *" onednn "* ]]; then
    count=$(wc -w <<<"$libraries")
    peak=$(grep -m1 '^MFU:' "$WORK/openblas-forced.out")
    [[ "$peak" == *"measured: the best of $count libraries"* ]] &&
      ok "forced OpenBLAS: MFU's peak is the best of the $count libraries measured: $peak" ||
      bad "forced OpenBLAS: MFU's peak should be the best of all $count libraries: $peak"
  fi
fi

# 3. --precision bf16 where products cannot run natively in bf16: one error, status 2 (a CPU
# without bf16 instructions, a library without bf16 GEMM, oneDNN capped below its bf16 kernels).
if [[ " $libraries " == *" openblas "* ]]; then
  expect_error "bf16 on OpenBLAS" 1 'no bf16 GEMM.*--gemm onednn.*--precision fp32' -- \
    "${run_args[@]}" --gemm openblas --precision bf16
fi
if [[ " $libraries " == *" onednn "* ]] && $avx512; then
  ONEDNN_MAX_CPU_ISA=AVX512_CORE expect_error "bf16 on oneDNN capped below avx512_core_bf16" 1 \
    'bf16.*ONEDNN_MAX_CPU_ISA=AVX512_CORE.*unset' -- "${run_args[@]}" --gemm onednn --precision bf16
fi
# A CPU without bf16 dot products, seen through the test-only mask (cpu_features.cpp): the error
# names the missing instructions, on every library of the build and on 2 ranks.
for lib in $libraries; do
  MPIFORMER_TEST_HIDE_CPU_FEATURES=avx512_bf16,amx_bf16 expect_error \
    "bf16 on $lib, CPU without AVX512_BF16" 2 \
    'needs native bf16 products.*has no native bf16 dot products \(AVX512_BF16 or AMX-BF16\).*--precision fp32' \
    -- "${run_args[@]}" --gemm "$lib" --precision bf16
done
if [[ " $libraries " == *" onednn "* ]] && has avx512_bf16; then
  run bf16 -- --gemm onednn --precision bf16
  grep -q '^gemm:.*products in bf16' "$WORK/bf16.out" && grep -q '^MFU:.*bf16 GEMM' "$WORK/bf16.out" &&
    [ "$status" -eq 0 ] && ok "--precision bf16 runs; banner and MFU peak say bf16" ||
    bad "--precision bf16: status $status $(cat "$WORK/bf16.out" "$WORK/bf16.err")"
fi
finish
