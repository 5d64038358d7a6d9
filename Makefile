# graphrun: the two commands (`make demo`, `make test`) and their helpers.
# Everything real lives in CMakeLists.txt; this file installs missing Debian
# packages, configures, builds and runs.
#
#   make demo              build (Release) and run the main example
#   make test              build and run the whole ctest suite
#   make test SANITIZE=1   the same under AddressSanitizer + UBSan
#   make bench-NAME        build and run one benchmark (executor, matmul)
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
DEB_PACKAGES := gcc make cmake pkg-config libopenblas-dev libevent-dev \
                libmsgpack-dev libsqlite3-dev zlib1g-dev sqlite3 dataset-fashion-mnist
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)

.PHONY: all deps configure build demo test bench-% format clean

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
	@$(BUILD_DIR)/examples/basics
	@echo
	@$(BUILD_DIR)/examples/fashion_mlp

test: build
	@cd $(BUILD_DIR) && ctest --output-on-failure -j $(JOBS) --timeout 900

# bench-mlp compares with PyTorch, which it installs (Debian's python3-torch).
bench-mlp: EXTRA_PACKAGES = python3-torch
bench-%: build
	@cmake --build $(BUILD_DIR) --target bench_$* -j $(JOBS) >/dev/null
	@$(BUILD_DIR)/tests/bench/bench_$*

format:
	@clang-format -i $$(git ls-files '*.c' '*.h')

clean:
	rm -rf build build-asan
