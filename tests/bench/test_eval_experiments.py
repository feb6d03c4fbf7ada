"""crag-bench eval's experiments: names, the names of earlier versions, presets."""

import re

import pytest

from crag_bench.experiments import (
    ALIASES,
    EXPERIMENTS,
    PRESETS,
    experiment_names,
    select_experiments,
)


def _names(spec: str | None) -> list[str]:
    return [e.name for e in select_experiments(spec)]


def test_names_are_unique_and_free_of_commas_and_spaces() -> None:
    names = experiment_names()
    assert len(set(names)) == len(names)
    assert all(re.fullmatch(r"[a-z]+(-[a-z]+)*", name) for name in names), names
    assert {"no-retrieval", "rag", "crag", "oracle", "rag-gold-removed"} <= set(names)
    assert not set(PRESETS) & set(names), "a preset hides an experiment"


def test_nothing_selects_every_experiment_in_run_order() -> None:
    assert _names(None) == _names("") == _names(" ") == experiment_names()
    assert _names("all") == experiment_names()


def test_a_list_keeps_run_order_and_ignores_case_and_blanks() -> None:
    assert _names("crag-gold-removed, RAG,,crag") == ["rag", "crag", "crag-gold-removed"]


def test_earlier_names_are_aliases() -> None:
    assert all(alias not in experiment_names() for alias in ALIASES)
    assert set(ALIASES.values()) <= set(experiment_names())
    assert _names("rag, gold removed,crag, gold removed") == [
        "rag-gold-removed",
        "crag-gold-removed",
    ]
    assert _names("crag,rag, gold removed") == ["crag", "rag-gold-removed"]
    assert _names("rag + web,langgraph tutorial,crag only incorrect") == [
        "crag-only-incorrect",
        "rag-web",
        "tutorial",
    ]


def test_presets_name_groups() -> None:
    assert _names("main") == [
        "no-retrieval",
        "rag",
        "crag",
        "oracle",
        "rag-gold-removed",
        "crag-gold-removed",
    ]
    assert _names("bounds") == ["no-retrieval", "crag", "oracle"]
    actions = _names("actions")
    assert actions[0] == "crag" and len(actions) == 7
    assert all(name == "crag" or name.startswith("crag-") for name in actions)
    assert _names("main,tutorial") == [*_names("main")[:4], "tutorial", *_names("main")[4:]]
    assert set(_names("ablations")) == {
        e.name for e in EXPERIMENTS if e.group in ("actions", "knowledge", "web", "peer")
    } | {"crag"}


def test_unknown_names_are_one_line_errors() -> None:
    with pytest.raises(ValueError, match=r"unknown experiment\(s\) teleport, warp; valid: ") as e:
        select_experiments("crag,teleport,warp")
    assert "\n" not in str(e.value)
    assert "preset: main" in str(e.value)


def test_experiments_change_parameters_of_the_method_only() -> None:
    from crag.settings.setting_kinds import METHOD_NAMES

    for experiment in EXPERIMENTS:
        assert set(experiment.settings) <= METHOD_NAMES, experiment.name
