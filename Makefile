# Quick start:
#   make ask Q="Who painted the Mona Lisa?"   install everything, answer from the default corpus
#   make test                                 install with dev tools, lint, type-check, check the
#                                             import layers (lint-imports), test
#   make serve                                LangGraph server, its chat page (printed address)
#                                             and Studio on 127.0.0.1:$(PORT), $(JOBS) runs at
#                                             once, generator batches of $(BATCH); STUDIO=1:
#                                             Studio's origin listed, its address printed
#   make page                                 rebuild the chat page (npm; app/web/dist)
#   make agent-chat-ui                        ask the README's question in LangChain's Agent Chat
#                                             UI (npm, headless Chromium) on a crag server: its
#                                             answer and sources must show (docs/agent-chat-ui.md)
#   make bench                                load test: runs at concurrency levels $(LEVELS) on a
#                                             local server (RUNS=N: one level of N runs)
#   make eval EVAL_ARGS="--limit 5"           the benchmark: CRAG vs RAG, ablations (crag-bench eval)
#   make dockerfile                           the LangGraph API server's Dockerfile (deploy/)
#   make cluster                              crag on $(REPLICAS) Aegra replicas behind nginx, with
#                                             PostgreSQL, Redis and a Chroma server, on
#                                             127.0.0.1:$(CLUSTER_PORT) (printed address);
#                                             make cluster-stop stops it (docs/deployment.md)
Q ?= Who painted the Mona Lisa?
PORT ?= 8123
LEVELS ?= 1,4,16,32
# RUNS=N measures one level of N concurrent runs instead of LEVELS.
RUNS ?=
# Runs the server executes at once: plain `langgraph dev` runs one at a time.
JOBS ?= 10
# 1: LangGraph Studio's origin may read the server's answers (it still needs the token).
STUDIO ?=
# Generator requests of overlapping runs decoded together (CRAG_GENERATOR_BATCH_SIZE; 1: off,
# each decoded alone by onnxruntime: 1.9 runs/s at 16 at once on 2 cores, against 1.1 in
# transformers' float32 batches of 8; docs/benchmark.md). A CRAG_GENERATOR_BATCH_SIZE line in
# .env takes precedence: the server applies .env last.
BATCH ?= 1
# Jobs of the server `make bench` starts: enough for its largest level to run at once.
BENCH_JOBS ?= 32
# pytest-xdist workers of `make test`, each taking whole test files: the cluster's two files
# (mostly waiting on their services) start first, beside the rest; four keep 2 cores busy where
# three left them idle a sixth of the run (docs/development.md).
TEST_WORKERS ?= 4

EVAL_ARGS ?=
# make cluster: Aegra replicas behind nginx; nginx's port (the others follow it: deploy/cluster).
REPLICAS ?= 2
CLUSTER_PORT ?= 8200

.PHONY: ask install install-dev install-browser install-cluster dev-checked test lint serve bench eval \
	dockerfile page cluster cluster-stop agent-chat-ui

install:
	scripts/bootstrap.sh

install-dev:
	scripts/bootstrap.sh dev

ask: install
	.venv/bin/crag ask "$(Q)"

lint:
	.venv/bin/ruff check .
	.venv/bin/ruff format --check .
	.venv/bin/python scripts/typecheck.py
	.venv/bin/lint-imports

install-browser:
	scripts/install_browser.sh

# The Python 3.12 environment Aegra needs (.crag/py312) and Debian's PostgreSQL, Redis and nginx
# (scripts/install_cluster.sh: about 2 to 4 minutes, 6 GB, once).
install-cluster:
	scripts/install_cluster.sh

dev-checked: install-dev
	$(MAKE) --no-print-directory lint

# The browser first (it and the cluster's install may both call apt-get), then .venv and its
# checks beside the cluster's environment (two pips, each mostly on one core), then the tests.
test: install-browser
	$(MAKE) --no-print-directory --jobs=2 --output-sync=target dev-checked install-cluster
	.venv/bin/python -m pytest -n $(TEST_WORKERS) --dist loadfile --no-loadscope-reorder \
		--durations=30 tests/cluster tests/bench tests/integration tests/unit

serve: install-dev
	STUDIO=$(STUDIO) scripts/serve.sh $(PORT) $(JOBS) $(BATCH)

bench: install-dev
	.venv/bin/crag-bench server $(if $(RUNS),--runs $(RUNS),--levels $(LEVELS)) --jobs $(BENCH_JOBS) \
		--set generator_batch_size=$(BATCH)

eval:
	scripts/bootstrap.sh eval
	.venv/bin/crag-bench eval $(EVAL_ARGS)

# Writes deploy/Dockerfile from langgraph.json (no Docker needed to write it; building it does).
dockerfile: install-dev
	mkdir -p deploy
	.venv/bin/langgraph dockerfile -c langgraph.json deploy/Dockerfile

# The chat page's front end (app/web/src) built into app/web/dist, which is committed and ships
# in the wheel: only this needs Node.js and npm, at development time.
page:
	cd app/web && npm ci --no-audit --no-fund && npm run build

# Agent Chat UI from npm (create-agent-chat-app's templates/nextjs) in a scratch folder outside
# the repository (/tmp/acui), a crag server with its token, headless Chromium: a few minutes,
# so not part of `make test`.
agent-chat-ui: install-dev install-browser
	.venv/bin/python scripts/agent_chat_ui.py

cluster: install-cluster
	REPLICAS=$(REPLICAS) CLUSTER_PORT=$(CLUSTER_PORT) deploy/cluster/start.sh

cluster-stop:
	deploy/cluster/stop.sh
