# Portico: `make run` starts a demo (MinIO origin + Portico), `make test` runs every test.
# Tools the project needs are installed on first use into $(TOOLS_DIR) and reused.

SHELL := /bin/bash
TOOLS_DIR ?= $(HOME)/.cache/portico-tools
MINIO_VERSION := v0.0.0-20260212201848-7aac2a2c5b7c
MINIO := $(TOOLS_DIR)/bin/minio-$(MINIO_VERSION)

PYTHON_TOOLS := $(TOOLS_DIR)/python-boto3-1.43.11-s3cmd-2.4.0-kv-1.37.0
MOTO_VERSION := 5.2.5
MOTO_SERVER := $(TOOLS_DIR)/python-moto-$(MOTO_VERSION)/bin/moto_server
HELM_VERSION := v3.22.0
HELM := $(TOOLS_DIR)/bin/helm-$(HELM_VERSION)
CARGO_FUZZ_VERSION := 0.13.2
CARGO_FUZZ := $(TOOLS_DIR)/cargo-fuzz-$(CARGO_FUZZ_VERSION)/bin/cargo-fuzz
AWS_CLI ?= /usr/bin/aws
MVN := /usr/bin/mvn
# The AWS SDK for Java v2 client of the integration tests (tests/integration/java), compiled
# with Maven into target/java-client; its jars stay in Maven's ~/.m2.
JAVA_CLIENT_CLASSPATH := $(CURDIR)/target/java-client/classpath.txt
JAVA_CLIENT_SOURCES := tests/integration/java/pom.xml $(wildcard tests/integration/java/src/main/java/portico/*.java)
# The AWS SDK for JavaScript v3 client of the integration tests (tests/integration/js),
# installed with npm into target/js-client from its pinned package-lock.json.
NPM := /usr/bin/npm
JS_CLIENT := $(CURDIR)/target/js-client
JS_CLIENT_STAMP := $(JS_CLIENT)/node_modules/.package-lock.json
JS_CLIENT_SOURCES := tests/integration/js/package.json tests/integration/js/package-lock.json tests/integration/js/post_upload.mjs
NGINX := /usr/sbin/nginx
# promtool from Debian 12's prometheus package, unpacked (no service is installed).
PROMTOOL := $(TOOLS_DIR)/bin/promtool-debian12
# podman (with runc and slirp4netns) from Debian, and the container test's Debian 12 base
# image, made once with debootstrap from Debian's mirror (no image registry is needed).
PODMAN := /usr/bin/podman
DEBIAN_MIRROR ?= http://deb.debian.org/debian
IMAGE_BASE := $(TOOLS_DIR)/image/debian-bookworm-minbase.tar

export PORTICO_MINIO := $(MINIO)
export PORTICO_PYTHON := $(PYTHON_TOOLS)/bin/python
export PORTICO_S3CMD := $(PYTHON_TOOLS)/bin/s3cmd
export PORTICO_AWS_CLI := $(AWS_CLI)
export PORTICO_HELM := $(HELM)
export PORTICO_PROMTOOL := $(PROMTOOL)
export PORTICO_MOTO_SERVER := $(MOTO_SERVER)
export PORTICO_JAVA_CLASSPATH := $(JAVA_CLIENT_CLASSPATH)
export PORTICO_JS_CLIENT := $(JS_CLIENT)
export PORTICO_PODMAN := $(PODMAN)
export PORTICO_IMAGE_BASE := $(IMAGE_BASE)

# apt: as root, or through sudo.
SUDO := $(if $(filter 0,$(shell id -u)),,sudo)
APT_UPDATE := $(SUDO) apt-get update -q
# Lists are refreshed first: on a fresh machine they are empty or stale.
APT_INSTALL := $(APT_UPDATE) && $(SUDO) apt-get install -y -q

.PHONY: run test image-test ci fmt-check clippy build release bench fleet-scale soak soak-overwrites fleet-writes fuzz conformance tools java-client js-client clean-demo

## run: build Portico and start it in front of a local MinIO with demo data (Ctrl-C stops
## both). Needs only MinIO (built once) and curl: nothing the tests need is installed.
run: $(MINIO) build
	scripts/run-demo.sh

## test: the whole test suite: unit and integration tests (against a real MinIO), then the
## Helm chart, alert rule and container image tests (helm lint/template, Kubernetes schemas,
## promtool, check-config, and the image built and run with podman: see image-test), with a
## 75 s soak (testkit/src/bin/soak) from a fixed seed
test: tools $(PROMTOOL) $(JAVA_CLIENT_CLASSPATH) $(JS_CLIENT_STAMP) $(PODMAN) $(IMAGE_BASE)
	cargo test --workspace
	PORTICO_TEST_PEER_TLS=1 cargo test --test integration -- cluster
	SOAK_DURATION=75s SOAK_SEED=7 cargo run -q -p portico-testkit --bin soak
	PORTICO_BIN=$(CURDIR)/target/debug/portico $(PYTHON_TOOLS)/bin/python -m unittest discover -s tests/deploy -t tests/deploy

## image-test: builds docker/Dockerfile's runtime stage around target/debug/portico (on a
## Debian 12 base made with debootstrap) and runs it with podman against MinIO, as the
## chart's security context says: tests/deploy/test_container.py. Needs root (podman).
image-test: $(MINIO) $(HELM) $(PYTHON_TOOLS)/bin/s3cmd $(PODMAN) $(IMAGE_BASE) build
	PORTICO_BIN=$(CURDIR)/target/debug/portico $(PYTHON_TOOLS)/bin/python -m unittest discover -v -s tests/deploy -t tests/deploy -p test_container.py

## ci: exactly what CI runs: format check, clippy with warnings as errors, all tests
ci: fmt-check clippy test

fmt-check:
	cargo fmt --all -- --check

clippy:
	cargo clippy --workspace --all-targets -- -D warnings

## build: target/debug/portico, built as `cargo test` builds it. The tests switch on features
## of shared dependencies (tokio's test-util, the test kit's hyper and aws-sdk-s3 features),
## so a plain `cargo build` would compile some fifty crates a second time after `make test`
## (and the other way round). Compiling the test targets too costs less than that, once, and
## lets `make run` and `make test` share every compiled crate.
build:
	cargo test --workspace --no-run

## release: the optimised binary (target/release/portico); docker/Dockerfile runs exactly this
release:
	cargo build --release --locked --bin portico

## fleet-scale: what the fleet protocol costs at 3, 10, 100 and 1,000 members, by
## simulation (fleet/benches/scale.rs), and what one lease exchange costs each member in
## CPU (benches/peer_leases.rs); prints the tables in docs/benchmarks.md
fleet-scale: $(MINIO)
	cargo bench -p portico-fleet --bench scale
	cargo bench --bench peer_leases

## bench: the suite (cold-sequential, cold-herd, random-cold, hot-random against direct,
## nginx and Portico behind a 20 ms origin, direct-parallel, mixed, and hot-random-disk with
## a working set 4x the memory tier, repeated listings, cluster mode), then hot hits vs MinIO direct with the cost of
## SigV4, 500 slow readers against the memory budget, and the write-path figures (1 GiB PUT
## through Portico vs direct, a re-sync)
bench: tools $(NGINX)
	cargo bench --bench suite
	cargo bench --bench hot_hits
	cargo bench --bench slow_readers
	cargo build --release --bin portico
	scripts/bench-writes.sh

## soak: the read path's simulation and the fleet protocol's (SIMULATION_CASES generated
## schedules each, default 10,000; src/read/tests/simulation.rs, fleet/src/simulation),
## fleets of 3 to 1,000 simulated members under every fault (fleet/benches/scale.rs), then
## the soak (testkit/src/bin/soak): a single node and a fleet of SOAK_FLEET_MEMBERS
## (default 5 here) in front of MinIO under a randomized load and faults drawn from
## SOAK_SEED (default: drawn and printed) for SOAK_DURATION (default 10m), every answer
## checked against a model; prints a report per deployment and exits non-zero when an
## invariant broke. docs/operations.md says what it proves. Not part of `make test`
## (which runs 500 schedules of each simulation and a 75 s soak with a fleet of three).
SIMULATION_CASES ?= 10000
SOAK_DURATION ?= 10m
SOAK_FLEET_MEMBERS ?= 5
soak: $(MINIO) build
	SIMULATION_CASES=$(SIMULATION_CASES) cargo test -q --lib read::tests::simulation
	SIMULATION_CASES=$(SIMULATION_CASES) cargo test -q -p portico-fleet
	cargo bench -q -p portico-fleet --bench scale -- --check
	SOAK_FLEET_MEMBERS=$(SOAK_FLEET_MEMBERS) SOAK_DURATION=$(SOAK_DURATION) cargo run -q -p portico-testkit --bin soak

## soak-overwrites: the overwrite soak (testkit/src/bin/overwrites.rs): 3 writers and 12
## readers on 12 keys, every body checked against its version, against MinIO direct and
## through Portico (unversioned and versioned buckets, a fleet of three), SOAK_SECONDS each
## (default 600); prints the table in docs/benchmarks.md. Not part of `make test`.
SOAK_SECONDS ?= 600
soak-overwrites: $(MINIO) build
	cargo run -q -p portico-testkit --bin overwrites -- $(SOAK_SECONDS)

## fleet-writes: PUT latency through one member of a fleet of 1, 3 and 5 nodes, and straight
## to MinIO (testkit/src/bin/fleet_writes.rs), FLEET_PUTS PUTs per row (default 500); prints
## the table in docs/benchmarks.md. Not part of `make test`.
FLEET_PUTS ?= 500
fleet-writes: $(MINIO) build
	cargo run -q -p portico-testkit --bin fleet_writes -- $(FLEET_PUTS)

## fuzz: every fuzz target (Range, aws-chunked, request/SigV4 parsing) for FUZZ_SECONDS
## each (default 60); not part of `make test`
fuzz: $(CARGO_FUZZ)
	PATH="$(dir $(CARGO_FUZZ)):$$PATH" scripts/fuzz.sh

## conformance: the differential test (tests/integration/conformance.rs) for
## CONFORMANCE_CASES cases (default 1000; `make test` runs 40); PORTICO_CONFORMANCE_SEED
## picks another sequence
CONFORMANCE_CASES ?= 1000
conformance: $(MINIO)
	PORTICO_CONFORMANCE_CASES=$(CONFORMANCE_CASES) cargo test --test integration -- conformance --nocapture

$(CARGO_FUZZ):
	@echo "Installing cargo-fuzz $(CARGO_FUZZ_VERSION) into $(TOOLS_DIR) (first time only)"
	cargo install cargo-fuzz --version $(CARGO_FUZZ_VERSION) --locked --root $(TOOLS_DIR)/cargo-fuzz-$(CARGO_FUZZ_VERSION)

tools: $(MINIO) $(PYTHON_TOOLS)/bin/s3cmd $(AWS_CLI) $(HELM) $(MOTO_SERVER)

# boto3 and s3cmd for the client tests, kubernetes-validate (with the Kubernetes schemas)
# and PyYAML for the chart tests, in their own virtualenv.
$(PYTHON_TOOLS)/bin/s3cmd:
	@echo "Installing boto3, s3cmd and kubernetes-validate into $(PYTHON_TOOLS) (first time only)"
	python3 -m venv $(PYTHON_TOOLS)
	$(PYTHON_TOOLS)/bin/pip install --quiet boto3==1.43.11 s3cmd==2.4.0 kubernetes-validate==1.37.0 PyYAML==6.0.3

# moto's server mode: the local SQS server the event-notification tests send S3 events
# through, in its own virtualenv (its Flask stack stays out of the client tools').
$(MOTO_SERVER):
	@echo "Installing moto $(MOTO_VERSION) (a local SQS server) into $(TOOLS_DIR) (first time only)"
	python3 -m venv $(TOOLS_DIR)/python-moto-$(MOTO_VERSION)
	$(TOOLS_DIR)/python-moto-$(MOTO_VERSION)/bin/pip install --quiet 'moto[server]==$(MOTO_VERSION)'

# The Java SDK client: compiled, and its classpath listed for the tests (the SDK 2.57.8 and
# the CRT 0.49.0, pinned in its pom.xml); again only when its sources change.
$(JAVA_CLIENT_CLASSPATH): $(JAVA_CLIENT_SOURCES) | $(MVN)
	@echo "Building the AWS SDK for Java v2 test client with Maven (first time: downloads the SDK)"
	$(MVN) -B -q -f tests/integration/java/pom.xml compile dependency:build-classpath -Dmdep.outputFile=$@

## java-client: the AWS SDK for Java v2 client the integration tests run (built by `make test`)
java-client: $(JAVA_CLIENT_CLASSPATH)

# The JavaScript SDK client: its script and pinned packages (npm ci), when they change.
$(JS_CLIENT_STAMP): $(JS_CLIENT_SOURCES) | $(NPM)
	@echo "Installing the AWS SDK for JavaScript v3 test client with npm (first time: downloads the SDK)"
	mkdir -p $(JS_CLIENT)
	cp $(JS_CLIENT_SOURCES) $(JS_CLIENT)/
	cd $(JS_CLIENT) && $(NPM) ci --no-audit --no-fund --silent
	touch $@

## js-client: the AWS SDK for JavaScript v3 client the integration tests run (by `make test`)
js-client: $(JS_CLIENT_STAMP)

# Node.js and npm from Debian, for the JavaScript SDK client.
$(NPM):
	@echo "Installing Node.js and npm (Debian packages nodejs, npm)"
	$(APT_INSTALL) nodejs npm

# A JDK and Maven from Debian, for the Java SDK client.
$(MVN):
	@echo "Installing a JDK and Maven (Debian packages openjdk-17-jdk-headless, maven)"
	$(APT_INSTALL) openjdk-17-jdk-headless maven

# Helm 3 for the chart tests, built from source once (a few minutes).
$(HELM):
	@command -v go >/dev/null || { echo "Go is needed once to build Helm ($(HELM_VERSION)); install Go and re-run" >&2; exit 1; }
	@echo "Installing Helm $(HELM_VERSION) into $(TOOLS_DIR)/bin (first time only; takes a few minutes)"
	@mkdir -p $(TOOLS_DIR)/bin $(TOOLS_DIR)/gobin-helm
	GOBIN=$(TOOLS_DIR)/gobin-helm GOFLAGS=-buildvcs=false go install helm.sh/helm/v3/cmd/helm@$(HELM_VERSION)
	mv $(TOOLS_DIR)/gobin-helm/helm $@

# The aws CLI v2 from Debian (a pip-installed v1 elsewhere on PATH is not used).
$(AWS_CLI):
	@echo "Installing the aws CLI (Debian package awscli)"
	$(APT_INSTALL) awscli

$(PODMAN):
	@echo "Installing podman, runc, slirp4netns and debootstrap (Debian packages)"
	$(APT_INSTALL) --no-install-recommends podman runc slirp4netns debootstrap

# minbase with the CA bundle, without apt's lists, docs and locales (about 85 MB).
$(IMAGE_BASE): | $(PODMAN)
	@echo "Making the container test's Debian 12 base with debootstrap (first time only; about a minute)"
	@mkdir -p $(TOOLS_DIR)/image
	$(SUDO) rm -rf $(TOOLS_DIR)/image/rootfs
	$(SUDO) debootstrap --variant=minbase --include=ca-certificates bookworm $(TOOLS_DIR)/image/rootfs $(DEBIAN_MIRROR)
	cd $(TOOLS_DIR)/image/rootfs && $(SUDO) rm -rf var/cache/apt/* var/lib/apt/lists/* usr/share/doc/* usr/share/man/* usr/share/locale/*
	$(SUDO) tar -C $(TOOLS_DIR)/image/rootfs -cf $@.partial . && mv $@.partial $@
	$(SUDO) rm -rf $(TOOLS_DIR)/image/rootfs

# nginx from Debian (with the slice module), the caching proxy the suite compares against.
$(NGINX):
	@echo "Installing nginx (Debian package nginx-light)"
	$(APT_INSTALL) nginx-light

$(PROMTOOL):
	@echo "Installing promtool (Debian package prometheus, unpacked into $(TOOLS_DIR))"
	@mkdir -p $(TOOLS_DIR)/bin $(TOOLS_DIR)/deb
	cd $(TOOLS_DIR)/deb && rm -f prometheus_*.deb && { apt-get download prometheus 2>/dev/null || { $(APT_UPDATE) && apt-get download prometheus; }; }
	dpkg-deb -x $(TOOLS_DIR)/deb/prometheus_*.deb $(TOOLS_DIR)/deb/root
	mv $(TOOLS_DIR)/deb/root/usr/bin/promtool $@
	rm -rf $(TOOLS_DIR)/deb

$(MINIO):
	@command -v go >/dev/null || { echo "Go is needed once to build MinIO ($(MINIO_VERSION)); install Go and re-run" >&2; exit 1; }
	@echo "Installing MinIO $(MINIO_VERSION) into $(TOOLS_DIR)/bin (first time only; takes a few minutes)"
	@mkdir -p $(TOOLS_DIR)/bin $(TOOLS_DIR)/gobin
	GOBIN=$(TOOLS_DIR)/gobin GOFLAGS=-buildvcs=false go install github.com/minio/minio@$(MINIO_VERSION)
	mv $(TOOLS_DIR)/gobin/minio $@

clean-demo:
	rm -rf target/demo
