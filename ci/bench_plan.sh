#!/usr/bin/env bash
# The layout planner against measured runs: calibrates this machine (and two namespaced nodes
# with 1 Gbit/s links, where namespaces, tc and Slurm allow), then plans and runs 15 layouts on
# 1-4 ranks of one node and 4 across the nodes (GPT-2, Llama and a mixture of experts; DP, ZeRO,
# TP, SP, PP under three schedules, CP, EP, recompute), printing predicted against measured
# step time and peak memory, which term missed, and whether the planner's first choice is within
# 10% of the best of its top five measured. ci/bench_plan.py says how.
#   bash ci/bench_plan.sh [BUILD_DIR]     (make bench; STEPS=N, default 6)
set -u
root=$(cd "$(dirname "$0")/.." && pwd)
exec /usr/bin/python3 "$root/ci/bench_plan.py" "${1:-$root/build}"
