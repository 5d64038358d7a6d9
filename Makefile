# graphrun: the two commands (`make demo`, `make test`) and their helpers.
# Everything real lives in CMakeLists.txt; this file installs missing Debian
# packages, configures, builds and runs.
#
#   make demo              build (Release) and run the main examples, locally and on a
#                          local cluster (graphrun launch)
#   make test              build and run the whole ctest suite
#   make test SANITIZE=1   the same under AddressSanitizer + UBSan
#   make test-busy         the distributed tests twice at once: each on a busy machine
#   make test-slurm        graphrun under a real Slurm started by the test (root; in the suite too)
#   make test-mpi          graphrun servers under Open MPI's mpirun (in the suite too)
#   make bench-NAME        build and run one benchmark (executor, matmul, mlp, train, conv, transfer,
#                          recovery, ...; docs/benchmarks.md); ARGS="..." passes it flags
#   make soak-recovery     100 kills of random tasks of a training cluster (the suite runs 20)
#   make soak-placement    100,000 random programs on random placements of a cluster, compared
#                          with one process (the suite runs 1,000); SEEDS=FIRST:COUNT
#   make fuzz-dsl          libFuzzer on the DSL front end (clang), FUZZ_SECONDS=60
#   make fuzz-graph        libFuzzer on serialized-graph decoding (clang)
#   make fuzz-wire         libFuzzer on wire frames, messages, tensors and graphs (clang)
#   make fuzz-image        libFuzzer on the PNG and JPEG decoders and the resize (clang)
#   make format            clang-format every source file

MAKEFLAGS += --no-print-directory
SANITIZE ?= 0
JOBS     ?= $(shell nproc 2>/dev/null || echo 2)
ifeq ($(SANITIZE),1)
  BUILD_DIR  ?= build-asan
  BUILD_TYPE ?= RelWithDebInfo
else
  BUILD_DIR  ?= build
  BUILD_TYPE ?= Release
endif

# Debian packages the build needs (checked with dpkg, installed with apt-get).
DEB_PACKAGES := gcc make cmake pkg-config libopenblas-dev libdnnl-dev libevent-dev \
                libmsgpack-dev libxxhash-dev libjansson-dev libssl-dev openssl libsqlite3-dev zlib1g-dev \
                libpng-dev libjpeg62-turbo-dev libjpeg-turbo-progs sqlite3 dataset-fashion-mnist \
                libgraphviz-dev libjs-chart.js
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)

.PHONY: all deps configure build demo test test-busy bench-% fuzz-dsl fuzz-graph fuzz-wire fuzz-image soak-ckpt \
        soak-recovery soak-placement format clean test-slurm test-mpi

all: build

deps:
	@missing=""; for p in $(DEB_PACKAGES) $(EXTRA_PACKAGES); do \
	  dpkg-query -W -f='$${Status}' $$p 2>/dev/null | grep -q "install ok installed" || missing="$$missing $$p"; \
	done; \
	if [ -n "$$missing" ]; then \
	  echo "installing Debian packages:$$missing"; \
	  $(SUDO) apt-get update -qq && \
	  DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq --no-install-recommends $$missing; \
	fi

configure: deps
	@cmake -S . -B $(BUILD_DIR) -DCMAKE_BUILD_TYPE=$(BUILD_TYPE) -DGR_SANITIZE=$(SANITIZE) >/dev/null

build: configure
	@cmake --build $(BUILD_DIR) -j $(JOBS)

demo: build
	@echo "== the classic first program, in C (examples/basics.c) and as a graph file =="
	@$(BUILD_DIR)/examples/basics
	@$(BUILD_DIR)/graphrun run examples/basics.gr
	@echo
	@echo "== Fashion-MNIST MLP, 5 epochs, built in C (examples/fashion_mlp.c) =="
	@$(BUILD_DIR)/examples/fashion_mlp
	@echo
	@echo "== the same model as a graph file, checkpointed every 500 steps =="
	@$(BUILD_DIR)/graphrun run examples/fashion_mlp.gr --steps 2345 --eval accuracy --seed 1 \
	  --ckpt $(BUILD_DIR)/fashion.ckpt --save-every 500 --no-restore
	@echo
	@echo "checkpoints: $(BUILD_DIR)/graphrun ckpt ls $(BUILD_DIR)/fashion.ckpt"
	@$(BUILD_DIR)/graphrun ckpt ls $(BUILD_DIR)/fashion.ckpt
	@echo "or with SQLite itself: sqlite3 $(BUILD_DIR)/fashion.ckpt 'select step, metadata from checkpoints'"
	@echo
	@echo "== a local cluster: 3 graphrun server processes; x on the ps, a term on each worker =="
	@$(BUILD_DIR)/graphrun launch --ps 1 --workers 2 examples/cluster_basics.gr
	@echo
	@echo "== Fashion-MNIST on the cluster: variables on the ps, the layers split over 2 workers =="
	@$(BUILD_DIR)/graphrun launch --quiet --ps 1 --workers 2 examples/fashion_mlp_cluster.gr \
	  --steps 2345 --eval accuracy --seed 1 --ckpt $(BUILD_DIR)/fashion_cluster_ckpt --save-every 500 \
	  --no-restore
	@$(BUILD_DIR)/graphrun ckpt ls $(BUILD_DIR)/fashion_cluster_ckpt

test: build
	@cd $(BUILD_DIR) && ctest --output-on-failure -j $(JOBS) --timeout 900

# the distributed tests (ctest -R ^test_dist_) twice at once, each pass in its own ctest
# tree, so that every one runs while the other pass keeps the machine busy (tests/run_busy.sh)
test-busy: build
	@tests/run_busy.sh $(BUILD_DIR)

# the suite opens `graphrun board`'s page in headless Chromium (tests/unit/test_board.c), runs
# jobs under a Slurm it starts (slurm-wlm's daemons and client, and munge: test_slurm.c), servers
# under mpirun (test_mpi.c) and reads the Kubernetes manifests (python3-yaml: test_kubernetes.c)
CLUSTER_PACKAGES := slurmctld slurmd slurm-client munge openmpi-bin python3-yaml
test: EXTRA_PACKAGES = chromium $(CLUSTER_PACKAGES)
test-slurm test-mpi: EXTRA_PACKAGES = $(CLUSTER_PACKAGES)

test-slurm: build
	@cd $(BUILD_DIR) && ctest --output-on-failure -R '^test_slurm$$' --timeout 900

test-mpi: build
	@cd $(BUILD_DIR) && ctest --output-on-failure -R '^test_mpi$$' --timeout 900

# bench-mlp compares with PyTorch, which it installs (Debian's python3-torch).
bench-train: EXTRA_PACKAGES = python3-torch
bench-mlp: EXTRA_PACKAGES = python3-torch
bench-conv: EXTRA_PACKAGES = python3-torch
bench-parallel: EXTRA_PACKAGES = python3-torch
# bench-NAME runs tests/bench/bench_NAME.c (a '-' in NAME is a '_': bench-placer-real)
bench-%: build
	@cmake --build $(BUILD_DIR) --target bench_$(subst -,_,$*) -j $(JOBS) >/dev/null
	@$(BUILD_DIR)/tests/bench/bench_$(subst -,_,$*) $(ARGS)

# checkpoint crash test with 1,000 SIGKILLs (the suite runs 200)
soak-ckpt: build
	@cmake --build $(BUILD_DIR) --target test_ckpt_crash -j $(JOBS) >/dev/null
	@$(BUILD_DIR)/tests/unit/test_ckpt_crash 1000

# cluster recovery test with 100 SIGKILLs of random tasks (the suite runs 20);
# SEED=N repeats a run (the test prints its seed)
soak-recovery: build
	@cmake --build $(BUILD_DIR) --target test_dist_kills -j $(JOBS) >/dev/null
	@$(BUILD_DIR)/tests/unit/test_dist_kills 100 $(SEED)

# placement differential test over 100,000 random programs (the suite runs 1,000):
# SEEDS=FIRST:COUNT picks the series; each failure prints its seed, placement and what
# differs; the first 5 of each family are dumped as .gr files (and their nodes) into
# $(BUILD_DIR)/placement_failures/;
# GR_DIFF_SEED=N $(BUILD_DIR)/tests/unit/test_dist_placement_diff reruns one (docs/placement.md)
SEEDS ?= 0:100000
soak-placement: build
	@cmake --build $(BUILD_DIR) --target test_dist_placement_diff -j $(JOBS) >/dev/null
	@cd $(BUILD_DIR) && tests/unit/test_dist_placement_diff soak $(subst :, ,$(SEEDS))

# fuzz-dsl (the .gr front end), fuzz-graph (serialized graphs), fuzz-wire
# (frames, messages, tensor descriptors and graphs) and fuzz-image (the PNG and
# JPEG decoders) build in build-fuzz/ with clang and libFuzzer; `make test`
# needs none of them.
FUZZ_SECONDS ?= 60
fuzz-dsl fuzz-graph fuzz-wire fuzz-image: EXTRA_PACKAGES = clang libclang-rt-14-dev
fuzz-dsl fuzz-graph fuzz-wire fuzz-image: deps
	@tests/fuzz/run_fuzz.sh $(@:fuzz-%=%) $(FUZZ_SECONDS)

format:
	@clang-format -i $$(git ls-files '*.c' '*.h')

clean:
	rm -rf build build-asan build-fuzz
