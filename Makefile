# compositor — common tasks. Every target installs what it needs (e2e/install-deps.sh).

SHELL := /bin/bash
CARGO ?= cargo
TESTBED_DIR ?= /tmp/compositor-testbed
export TESTBED_DIR
# Where cargo puts what it builds (CARGO_TARGET_DIR when set, as CI sets it).
RELEASE_DIR = $(or $(CARGO_TARGET_DIR),$(CURDIR)/target)/release
DEBUG_DIR = $(or $(CARGO_TARGET_DIR),$(CURDIR)/target)/debug

.PHONY: demo test unit lint deps up down crds bench image architecture

## demo: bring up the local test bed, with a node where the machine allows one (NODE=0 for
## none), and walk through what compositor does with it
demo: deps
	e2e/demo.sh

## test: unit tests, then integration tests against a fresh test bed with a node running the
## debug build's image (where the machine allows one; NODE=0 for none)
test: lint
	@start=$$SECONDS; $(CARGO) test --locked --all-targets --no-run && \
	  echo "[make test] build took $$((SECONDS - start))s"
	IMAGE_ARCHIVE=$$(COMPOSITOR_BIN=$(DEBUG_DIR)/compositor IMAGE_ARCHIVE=$(DEBUG_DIR)/compositor-image.tar e2e/image.sh) && \
	  TESTBED_DIR=$$(mktemp -d /tmp/compositor-testbed.XXXXXX) IMAGE_ARCHIVE=$$IMAGE_ARCHIVE \
	  e2e/with-testbed.sh $(CARGO) test --locked --all-targets

## unit: the tests that need no test bed
unit:
	$(CARGO) test --locked --lib --bins

## lint: formatting and clippy, warnings are errors
lint:
	$(CARGO) fmt --all -- --check
	$(CARGO) clippy --locked --all-targets -- -D warnings

## crds: write compositor's own CRDs from the API types, where the chart and the tests read them
crds:
	$(CARGO) run --locked --quiet -- crds > crds/compositor.dev.yaml
	cp crds/compositor.dev.yaml charts/compositor/crds/compositor.dev.yaml

## architecture: which module uses which (floors, circles, arrows between the two roles), and
## the files and functions past their length
architecture:
	tools/architecture.py

## image: compositor's image as an OCI archive, built without a container engine (release
## build; IMAGE_ARCHIVE=path chooses where); its path is printed last. Load it with
## `ctr -n k8s.io images import` or `docker load -i`
image: deps
	e2e/image.sh

## deps: install the test bed's parts (cached under ~/.cache/compositor)
deps:
	e2e/install-deps.sh

## up / down: a long-lived test bed in $(TESTBED_DIR) for manual work (`eval "$$(e2e/testbed.sh env)"`)
up: deps
	e2e/testbed.sh up
down:
	if [ -d "$(TESTBED_DIR)/edge" ]; then TESTBED_DIR=$(TESTBED_DIR)/edge e2e/testbed.sh down; fi
	e2e/testbed.sh down

## bench: release build, then schema conversion figures for the chart corpus, where one
## install's CPU and wall time go against a `helm install` (install_profile), the operator's
## definition → ready times and idle restart writes, 20 compositions rolled out to 2 clusters
## against 40 `helm install`s with local-only compositions timed beside a dead cluster, a
## deleted object restored against a `helm upgrade` by hand (and the memory of the drift watches
## and of health), against one fresh test bed (rollout_bench starts its second control plane
## itself); how soon a composition is Ready once its pod is, on a test bed with a node; then, on
## five fresh test beds, the controller's 50 compositions against 50 `helm install`s in turn and
## 4 at a time (with CPU per install, API requests per composition, idle resync writes and
## memory) and a chart-version patch moving 3 and 50 compositions against as many
## `helm upgrade`s (the default rollout's waves against the move all at once, and what a bad
## version touches before it is rolled back), with the median of each ratio; and with BENCH_SCALE=1000 one more run of
## that many compositions (the drift bench's watches are measured at that scale too)
bench: deps
	@start=$$SECONDS; $(CARGO) build --locked --release --bin compositor --examples && \
	  echo "[make bench] build took $$((SECONDS - start))s"
	TESTBED_DIR=$$(mktemp -d /tmp/compositor-testbed.XXXXXX) COMPOSITOR_BIN=$(RELEASE_DIR)/compositor \
	  e2e/with-testbed.sh bash -c 'set -e; for bench in convert_bench install_profile operator_bench rollout_bench drift_bench; do \
	    echo "[make bench] $$bench"; $(RELEASE_DIR)/examples/$$bench; done'
	@echo "[make bench] health_bench, on a test bed with a node"
	IMAGE_ARCHIVE=$$(COMPOSITOR_BIN=$(RELEASE_DIR)/compositor IMAGE_ARCHIVE=$(RELEASE_DIR)/compositor-image.tar e2e/image.sh | tail -1) && \
	  TESTBED_DIR=$$(mktemp -d /tmp/compositor-testbed.XXXXXX) IMAGE_ARCHIVE=$$IMAGE_ARCHIVE COMPOSITOR_BIN=$(RELEASE_DIR)/compositor \
	  e2e/with-testbed.sh $(RELEASE_DIR)/examples/health_bench
	@echo "[make bench] controller_bench and move_bench"
	COMPOSITOR_BIN=$(RELEASE_DIR)/compositor e2e/bench-controller.sh $(RELEASE_DIR)/examples/controller_bench
