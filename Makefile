# The human front end. CMake is the truth; every target here only installs, configures and calls.
#   make run     the default training job (mpiexec -n $(NP), built-in corpus, no downloads)
#   make test    the whole test suite (ctest)
#   make bench   GPT-2 124M throughput against PyTorch, a tiny DeepSeek-V3 against llama-124M
#                per active FLOP, the fused attention's rate and long
#                sequences (tok/s and memory to T = 32768), pipeline schedules vs the simulator,
#                checkpoint I/O, generation (tokens/s, the KV cache's per-token cost), the BPE
#                tokenizer's MB/s against Python's, DP and PP
#                across two namespaced nodes on shaped links (as root; else a SKIP line),
#                mpiformer-tokenize's MB/s of text per rank, the layout planner against runs,
#                Muon against AdamW (cost per step, steps to the same validation loss)
#   make install PREFIX=/opt/mpiformer

BUILD ?= build
NP ?= 2
PREFIX ?= /usr/local
ARGS ?=
CMAKE_ARGS ?=
# Sources compiled a batch per compiler call: a fresh build on 2 cores takes 3.3 minutes instead of
# 5.6 (Kokkos' headers parsed once a batch). UNITY=OFF for edit-and-rebuild work, where a batch
# recompiles for one changed file.
UNITY ?= ON
JOBS ?= $(shell nproc)
# Two tests at once at most, and only the pairs tests/CMakeLists.txt allows (a build check beside
# a Slurm test, which mostly waits); every other test runs alone.
CTEST_ARGS ?= -j 2

# Debian packages the build, the tests and the benchmark need.
DEBIAN_PACKAGES = cmake g++ make mpich libmpich-dev libopenblas-openmp-dev libdnnl-dev libtrilinos-kokkos-dev \
                  pkg-config libonig-dev libutf8proc-dev \
                  googletest libgtest-dev libgmock-dev python3-torch python3-numpy python3-yaml python3-regex python3-matplotlib \
                  clang-format
SUDO := $(shell [ "$$(id -u)" -eq 0 ] || echo sudo)

.PHONY: all deps build run test bench install format clean

all: build

deps:
	@missing=""; for p in $(DEBIAN_PACKAGES); do \
	  dpkg-query -W -f='$${Status}' $$p 2>/dev/null | grep -q "ok installed" || missing="$$missing $$p"; \
	done; \
	if [ -n "$$missing" ]; then \
	  mkdir -p $(BUILD); log=$(BUILD)/apt-get.log; \
	  echo "installing Debian packages:$$missing (apt-get's output in $$log)"; \
	  if ! { $(SUDO) apt-get update -qq && \
	         DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq --no-install-recommends $$missing; \
	       } >$$log 2>&1; then \
	    tail -n 20 $$log; echo "error: apt-get failed (the whole log: $$log)"; exit 1; \
	  fi; \
	fi

$(BUILD)/CMakeCache.txt:
	cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=Release -DMPIFORMER_UNITY_BUILD=$(UNITY) $(CMAKE_ARGS)

build: deps $(BUILD)/CMakeCache.txt
	cmake --build $(BUILD) -j $(JOBS)

run: build
	mpiexec -n $(NP) $(BUILD)/mpiformer-train $(ARGS)

test: build
	cd $(BUILD) && ctest --output-on-failure $(CTEST_ARGS)

# GPT-2 124M against PyTorch measured in the same run (fp32 and bf16 on both cores, DP scaling at
# 8 x 256); then the pipeline schedules against the simulator, checkpoint I/O against dd,
# generation and the tokenizer; last DP and PP across two Slurm nodes in network namespaces, links
# shaped to 10 and 1 Gbit/s; then the layout planner's predictions against 19 measured layouts.
# Measure as users run: env -u OPENBLAS_CORETYPE make bench.
bench: build
	bash ci/bench_throughput.sh $(BUILD)
	bash ci/bench_deepseek.sh $(BUILD)
	bash ci/bench_attention.sh $(BUILD)
	bash ci/bench_long_context.sh $(BUILD)
	bash ci/bench_pipeline.sh $(BUILD)
	bash ci/bench_checkpoint.sh $(BUILD)
	bash ci/bench_muon.sh $(BUILD)
	bash ci/bench_generate.sh $(BUILD)
	/usr/bin/python3 ci/bench_tokenizer.py $(BUILD)
	bash ci/bench_multinode.sh $(BUILD)
	bash ci/bench_tokenize.sh $(BUILD)
	bash ci/bench_plan.sh $(BUILD)

install: build
	cmake --install $(BUILD) --prefix $(PREFIX)

format:
	clang-format -i $$(git ls-files '*.cpp' '*.hpp' '*.h' '*.cu')

clean:
	rm -rf $(BUILD)
