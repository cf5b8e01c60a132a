# Portico: `make run` starts a demo (MinIO origin + Portico), `make test` runs every test.
# Tools the project needs are installed on first use into $(TOOLS_DIR) and reused.

SHELL := /bin/bash
TOOLS_DIR ?= $(HOME)/.cache/portico-tools
MINIO_VERSION := v0.0.0-20260212201848-7aac2a2c5b7c
MINIO := $(TOOLS_DIR)/bin/minio-$(MINIO_VERSION)

export PORTICO_MINIO := $(MINIO)

.PHONY: run test ci fmt-check clippy build bench tools clean-demo

## run: build Portico and start it in front of a local MinIO with demo data (Ctrl-C stops both)
run: tools build
	scripts/run-demo.sh

## test: the whole test suite, unit and integration (against a real MinIO)
test: tools
	cargo test --workspace

## ci: exactly what CI runs: format check, clippy with warnings as errors, all tests
ci: fmt-check clippy test

fmt-check:
	cargo fmt --all -- --check

clippy:
	cargo clippy --workspace --all-targets -- -D warnings

build:
	cargo build --bin portico

## bench: hot-hit throughput and latency vs MinIO direct, and peak RSS of a 1 GiB GET (release build)
bench: tools
	cargo bench --bench hot_hits

tools: $(MINIO)

$(MINIO):
	@command -v go >/dev/null || { echo "Go is needed once to build MinIO ($(MINIO_VERSION)); install Go and re-run" >&2; exit 1; }
	@echo "Installing MinIO $(MINIO_VERSION) into $(TOOLS_DIR)/bin (first time only; takes a few minutes)"
	@mkdir -p $(TOOLS_DIR)/bin $(TOOLS_DIR)/gobin
	GOBIN=$(TOOLS_DIR)/gobin GOFLAGS=-buildvcs=false go install github.com/minio/minio@$(MINIO_VERSION)
	mv $(TOOLS_DIR)/gobin/minio $@

clean-demo:
	rm -rf target/demo
