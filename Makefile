# vkformer: `make demo` and `make test` each set up a fresh Debian 12 machine, build, and run.
BUILD ?= build
JOBS ?= $(shell nproc)
CMAKE_FLAGS ?= -DCMAKE_BUILD_TYPE=Release

.PHONY: all setup configure build test demo bench clean

all: build

setup:
	@bash scripts/setup.sh

configure: setup
	@cmake -S . -B $(BUILD) -G Ninja $(CMAKE_FLAGS) >/dev/null

build: configure
	@cmake --build $(BUILD) -j $(JOBS)

# The whole suite, with the Vulkan validation layer on and every message an error.
test: build
	cd $(BUILD) && VKF_VALIDATE=1 ctest --output-on-failure -j $(JOBS) --timeout 900

# The main job on its embedded default: train a byte-level BPE tokenizer and pre-train a small
# Llama from scratch on Debian's fortunes-min quotations, then sample from it (scripts/demo.sh).
demo: build
	bash scripts/demo.sh $(BUILD)/vkformer $(BUILD)/demo

bench: build
	$(BUILD)/bench/matmul_bench

clean:
	rm -rf $(BUILD)
