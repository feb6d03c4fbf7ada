"""Setting variables in a ``.env`` file (:mod:`crag.app.cli.env_file`): the rest kept as it was."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest

from crag.app.cli.env_file import Change, default_env_file, edited_text, set_variables

PAIR = {"CRAG_UPPER_THRESHOLD": "0.41", "CRAG_LOWER_THRESHOLD": "-0.2"}


def test_lines_setting_a_variable_are_replaced_and_every_other_byte_kept() -> None:
    text = (
        "# keys\n"
        "OPENAI_API_KEY='sk-x'  # not printed\n"
        "CRAG_UPPER_THRESHOLD = 0.59 # the paper's\r\n"
        "#CRAG_LOWER_THRESHOLD=-0.9\n"
        "CRAG_UPPER_THRESHOLDS=7\n"  # another name
        "\n"
        'export CRAG_LOWER_THRESHOLD="-0.5"\n'
        "CRAG_TOP_K=5\n"
    )
    edited, changes = edited_text(text, PAIR)
    assert edited == (
        "# keys\n"
        "OPENAI_API_KEY='sk-x'  # not printed\n"
        "CRAG_UPPER_THRESHOLD=0.41\r\n"
        "#CRAG_LOWER_THRESHOLD=-0.9\n"
        "CRAG_UPPER_THRESHOLDS=7\n"
        "\n"
        "CRAG_LOWER_THRESHOLD=-0.2\n"
        "CRAG_TOP_K=5\n"
    )
    assert changes == [
        Change("CRAG_UPPER_THRESHOLD", "0.59", "0.41"),
        Change("CRAG_LOWER_THRESHOLD", "-0.5", "-0.2"),
    ]
    assert [c.line() for c in changes] == [
        "CRAG_UPPER_THRESHOLD: 0.59 -> 0.41",
        "CRAG_LOWER_THRESHOLD: -0.5 -> -0.2",
    ]


def test_missing_variables_are_appended_and_an_empty_one_is_unset() -> None:
    edited, changes = edited_text("A=1\r\nCRAG_LOWER_THRESHOLD=", PAIR)
    assert edited == "A=1\r\nCRAG_LOWER_THRESHOLD=-0.2\r\nCRAG_UPPER_THRESHOLD=0.41\r\n"
    assert [c.line() for c in changes] == [
        "CRAG_UPPER_THRESHOLD: unset -> 0.41",
        "CRAG_LOWER_THRESHOLD: unset -> -0.2",
    ]
    assert edited_text("", PAIR)[0] == "CRAG_UPPER_THRESHOLD=0.41\nCRAG_LOWER_THRESHOLD=-0.2\n"


def test_every_line_of_a_variable_set_twice_is_replaced_the_last_is_its_old_value() -> None:
    edited, changes = edited_text("CRAG_UPPER_THRESHOLD=1\nCRAG_UPPER_THRESHOLD=0.3\n", PAIR)
    assert edited.splitlines()[:2] == ["CRAG_UPPER_THRESHOLD=0.41"] * 2
    assert changes[0] == Change("CRAG_UPPER_THRESHOLD", "0.3", "0.41")


def test_the_file_is_replaced_whole_with_its_mode_and_bytes_not_utf8_kept(tmp_path: Path) -> None:
    env = tmp_path / ".env"
    env.write_bytes(b"# caf\xe9\nCRAG_UPPER_THRESHOLD=0.59\n")
    env.chmod(0o640)
    before = env.stat().st_ino
    changes = set_variables(env, PAIR)
    assert env.read_bytes() == (
        b"# caf\xe9\nCRAG_UPPER_THRESHOLD=0.41\nCRAG_LOWER_THRESHOLD=-0.2\n"
    )
    assert stat.S_IMODE(env.stat().st_mode) == 0o640
    assert env.stat().st_ino != before  # renamed over it, not written in place
    assert os.listdir(tmp_path) == [".env"]  # no temporary file left
    assert changes[0].old == "0.59" and changes[1].old is None


def test_a_missing_file_is_made_readable_by_its_owner_alone(tmp_path: Path) -> None:
    env = tmp_path / ".env"
    set_variables(env, PAIR)
    assert env.read_text() == "CRAG_UPPER_THRESHOLD=0.41\nCRAG_LOWER_THRESHOLD=-0.2\n"
    assert stat.S_IMODE(env.stat().st_mode) == 0o600


def test_a_link_is_followed_and_stays_a_link(tmp_path: Path) -> None:
    real = tmp_path / "shared.env"
    real.write_text("A=1\n")
    link = tmp_path / ".env"
    link.symlink_to(real.name)
    set_variables(link, PAIR)
    assert link.is_symlink()
    assert real.read_text() == "A=1\nCRAG_UPPER_THRESHOLD=0.41\nCRAG_LOWER_THRESHOLD=-0.2\n"


def test_a_file_that_cannot_be_written_is_one_sentence(tmp_path: Path) -> None:
    missing = tmp_path / "no-folder" / ".env"
    with pytest.raises(ValueError) as raised:
        set_variables(missing, PAIR)
    assert str(raised.value) == f"cannot write env file {missing}: No such file or directory"
    assert not missing.parent.exists()


def test_a_folder_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"is a directory, not a file$"):
        set_variables(tmp_path, PAIR)


def test_the_default_is_the_file_langgraph_json_names(tmp_path: Path) -> None:
    assert default_env_file(tmp_path) == tmp_path / ".env"  # no langgraph.json
    config = tmp_path / "langgraph.json"
    config.write_text(json.dumps({"env": "deploy/server.env"}))
    assert default_env_file(tmp_path) == tmp_path / "deploy/server.env"
    config.write_text(json.dumps({"env": {"CRAG_TOP_K": "5"}}))  # values, not a file
    assert default_env_file(tmp_path) == tmp_path / ".env"
    config.write_text("{not json")
    assert default_env_file(tmp_path) == tmp_path / ".env"


def test_the_project_serves_with_the_dot_env_of_its_root() -> None:
    root = Path(__file__).resolve().parents[2]
    assert default_env_file(root) == root / ".env"
