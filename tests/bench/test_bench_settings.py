"""crag-bench's ``--set``: every kind of setting, parsed and kept by name."""

import pytest

from crag.settings.deployment import deployment_settings
from crag.settings.method import MethodConfig
from crag.settings.setting_checks import InvalidSettingError
from crag_bench.bench_settings import given_settings, method_with, settings_by_kind


def test_given_settings_take_every_kind_parsed_to_its_type() -> None:
    pairs = ["top_k=3", "strips-kept=2", "fetch_pages=false", "generator=smollm2"]
    assert given_settings(pairs) == {
        "fetch_pages": False,
        "generator": "smollm2",
        "strips_kept": 2,
        "top_k": 3,
    }
    assert given_settings(None) == {}


@pytest.mark.parametrize(
    ("pairs", "message"),
    [
        (["top_k=ten"], "top_k"),
        (["strips_kept=0"], "strips_kept must be at least 1"),
        (["chroma_port=0"], "chroma_port"),
        (["teleport=1"], "unknown setting 'teleport'"),
    ],
)
def test_given_settings_refuse_bad_values_and_names(pairs: list[str], message: str) -> None:
    with pytest.raises(InvalidSettingError, match=message):
        given_settings(pairs)


def test_settings_by_kind_sort_values_into_the_three_kinds() -> None:
    parsed = settings_by_kind({"top_k": 4, "strips_kept": 7, "store_path": "/s"})
    assert parsed.context.top_k == 4
    assert parsed.method == MethodConfig(strips_kept=7)
    assert parsed.deployment.store_path == "/s"
    assert parsed.deployment.collection == deployment_settings().collection
    with pytest.raises(InvalidSettingError, match="unknown setting 'k'"):
        settings_by_kind({"k": 1})


def test_method_with_takes_parameters_of_the_method_only() -> None:
    method = MethodConfig(strips_kept=7)
    assert method_with(method, {"force_action": "correct"}) == MethodConfig(
        strips_kept=7, force_action="correct"
    )
    assert method_with(method, {}) == method
    with pytest.raises(InvalidSettingError, match="unknown setting 'top_k'"):
        method_with(method, {"top_k": 3})
    with pytest.raises(InvalidSettingError, match="strips_kept"):
        method_with(method, {"strips_kept": 0})
