# Quick start:
#   make ask Q="Who painted the Mona Lisa?"   install everything, answer from the default corpus
#   make test                                 install with dev tools, lint, type-check, test
Q ?= Who painted the Mona Lisa?

.PHONY: ask install install-dev test lint

install:
	scripts/bootstrap.sh

install-dev:
	scripts/bootstrap.sh dev

ask: install
	.venv/bin/crag ask "$(Q)"

lint:
	.venv/bin/ruff check .
	.venv/bin/ruff format --check .
	.venv/bin/mypy

test: install-dev lint
	.venv/bin/python -m pytest
