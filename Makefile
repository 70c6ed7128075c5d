# deepinfer: the two commands a fresh machine needs are `make run` and `make test`.
BUILD_DIR ?= build
JOBS ?= $(shell nproc)
MODEL ?= models/default
PROMPT_IDS ?= 0,10,20,30,40
MAX_TOKENS ?= 32

.PHONY: all deps build test run clean

all: build

# Installs missing Debian and PyPI packages (once per machine; tools/install_deps.sh is idempotent).
deps:
	@bash tools/install_deps.sh

build: deps
	@cmake -S . -B $(BUILD_DIR) -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
	@cmake --build $(BUILD_DIR) -j $(JOBS)

# Every CPU test; GPU tests carry the `gpu` label and run on the GPU box (tools/gpu/check.sh).
test: build
	@cd $(BUILD_DIR) && ctest -LE gpu --output-on-failure -j $(JOBS)

# Greedy generation on the bundled default model (a tiny model in DeepSeek's official layout).
run: build
	@$(BUILD_DIR)/deepinfer generate --model $(MODEL) --prompt-ids $(PROMPT_IDS) --max-tokens $(MAX_TOKENS)

clean:
	rm -rf $(BUILD_DIR)
