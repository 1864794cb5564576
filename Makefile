# One entry point for a fresh machine. Every target is idempotent: stamps skip
# work that is already done, so `make test` after `make demo` starts testing at once.
PYTHON ?= python3.11
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.flinkai-installed-2
EXTRAS ?= torch,triton,rag,risk,dev

.PHONY: demo test setup install jars model lint typecheck bench clean-cache deploy-check

demo: setup  ## Run the main job on local Kafka + the Flink MiniCluster
	$(BIN)/flinkai demo

test: setup  ## Run the test suite (unit + integration on real Kafka/Flink/model)
	$(BIN)/python -m pytest

setup: install jars model

install: $(STAMP)

$(STAMP): pyproject.toml benchmarks/pyproject.toml constraints.txt
	@command -v $(PYTHON) >/dev/null || { echo "$(PYTHON) is required"; exit 1; }
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade "pip==26.3"
	$(BIN)/python -m pip install --quiet -c constraints.txt -e ".[$(EXTRAS)]" -e ./benchmarks
	$(BIN)/python -m pip check
	touch $@

jars: install  ## Connector, Kafka broker, SQL Gateway and JMX exporter jars from Maven Central
	$(BIN)/flinkai setup

model: install  ## Export all-MiniLM-L6-v2 and SmolLM2-135M-Instruct to ONNX (torch is used only here)
	$(BIN)/flinkai model export
	$(BIN)/flinkai model export-llm

lint:
	$(BIN)/ruff check flinkai tests benchmarks conftest.py
	$(BIN)/ruff format --check flinkai tests benchmarks conftest.py

typecheck:
	$(BIN)/mypy

deploy-check: install  ## helm lint/template, kubeconform (offline schemas), hadolint
	.ci/deploy-check

clean-cache:  ## Remove jars, models and broker data (FLINKAI_HOME)
	rm -rf "$${FLINKAI_HOME:-$$HOME/.cache/flinkai}"
