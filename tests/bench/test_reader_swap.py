"""`crag-bench eval --record-prompts` / `--prompts-only` and `crag-bench eval-reader`: the
prompts a run sent its generator, answered again by a generator, reproduce the run."""

import json
from pathlib import Path
from typing import Any

import pytest
from langchain_core.language_models.fake_chat_models import FakeListChatModel
from langchain_core.messages import AIMessage, HumanMessage, SystemMessage

from crag.generator.factory import load_chat_model
from crag.generator.gguf import converted_folder, ensure_converted
from crag_bench.cli import main
from crag_bench.prompt_recording import (
    PromptRecorder,
    PromptsOnlyChatModel,
    RecordedCall,
    messages_of,
)
from crag_bench.reader_swap import NOT_REPLAYABLE, distinct_prompts, questions_of, reanswer
from crag_bench.runner import Row

MAIN_RUN = [
    *("--limit", "3", "--corpus-size", "40", "--experiments", "main", "--no-performance"),
    "--no-gold-removal-curve",  # the curve-only runs: more prompts, nothing more to replay
    # Three passages, not ten: the generator reads every prompt twice here (recorded, then
    # replayed); with ten this file took 67 s, with three 41 s (2 cores), replaying the same.
    *("--set", "top_k=3"),
]


def _rows(out: Path) -> list[dict[str, Any]]:
    lines = (out / "rows.jsonl").read_text(encoding="utf-8").splitlines()
    return [json.loads(line) for line in lines]


def _results(out: Path) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((out / "results.json").read_text(encoding="utf-8"))
    return data


def _row(prompts: list[RecordedCall] | None, **fields: Any) -> Row:
    values: dict[str, Any] = {
        "experiment": "crag",
        "id": "q1",
        "question": "Who painted the Mona Lisa?",
        "answers": ["Leonardo da Vinci"],
        "answer": "recorded answer",
        "correct": False,
        "action": "correct",
        "gold_in_top_k": True,
        "answer_in_knowledge": True,
        "passages": 10,
        "internal": 5,
        "external": 0,
        "seconds": 1.0,
        "stages": {"retrieve": 0.1, "generate": 0.9},
        "notes": [],
        "prompts": prompts,
    }
    values.update(fields)
    return Row(**values)


CALL: RecordedCall = {
    "node": "generate",
    "messages": [
        {"role": "system", "content": "Answer from the knowledge."},
        {"role": "human", "content": "Who painted the Mona Lisa?"},
    ],
}


# --- units ----------------------------------------------------------------------------------


def test_recorder_keeps_each_prompt_with_its_roles() -> None:
    recorder = PromptRecorder()
    model = PromptsOnlyChatModel()
    reply = model.invoke(
        [SystemMessage("be brief"), HumanMessage("why?")], config={"callbacks": [recorder]}
    )
    assert reply.text == ""
    model.invoke([HumanMessage("again")], config={"callbacks": [recorder]})
    assert recorder.calls == [
        {
            "node": None,
            "messages": [
                {"role": "system", "content": "be brief"},
                {"role": "human", "content": "why?"},
            ],
        },
        {"node": None, "messages": [{"role": "human", "content": "again"}]},
    ]


def test_recorded_messages_round_trip_and_unknown_roles_are_refused() -> None:
    messages = messages_of(CALL)
    assert [type(m) for m in messages] == [SystemMessage, HumanMessage]
    assert [m.text for m in messages] == [
        "Answer from the knowledge.",
        "Who painted the Mona Lisa?",
    ]
    assert isinstance(
        messages_of({"node": None, "messages": [{"role": "ai", "content": "x"}]})[0], AIMessage
    )
    with pytest.raises(ValueError, match="unknown role 'tool'"):
        messages_of({"node": None, "messages": [{"role": "tool", "content": "x"}]})


def test_reanswer_asks_single_calls_keeps_abstentions_and_refuses_two_calls() -> None:
    rows = [
        _row([CALL]),
        _row([], id="q2", answer="I could not find the answer.", abstained=True),
        _row([CALL, CALL], id="q3", experiment="tutorial"),
    ]
    new = reanswer(rows, PromptsOnlyChatModel(), workers=2)
    asked, kept, refused = new
    assert asked.answer == "" and asked.correct is False and asked.error is None
    assert asked.stages["retrieve"] == 0.1 and asked.stages["generate"] == asked.seconds
    assert asked.timed is False
    assert kept.answer == "I could not find the answer." and kept.abstained
    assert refused.error == NOT_REPLAYABLE and refused.answer == ""
    assert [r.id for r in new] == ["q1", "q2", "q3"]


def test_a_prompt_recorded_by_several_rows_is_asked_once_and_answers_them_all() -> None:
    other: RecordedCall = {
        "node": "generate",
        "messages": [{"role": "human", "content": "Who wrote Hamlet?"}],
    }
    rows = [
        _row([CALL], experiment="rag"),
        _row([other], id="q2"),
        _row([CALL], experiment="crag"),
        _row([CALL], experiment="rag-gold-removed"),
    ]
    assert sorted(map(len, distinct_prompts(rows).values())) == [1, 3]
    reader = FakeListChatModel(responses=["Leonardo da Vinci", "Shakespeare", "third call"])
    new = reanswer(rows, reader, workers=1)
    assert [r.answer for r in new] == ["Leonardo da Vinci", "Shakespeare"] + [
        "Leonardo da Vinci"
    ] * 2
    assert [r.correct for r in new] == [True, False, True, True]
    # the same text closed-book keeps its [n] markers: another prompt for the reader
    closed = _row([CALL], experiment="no-retrieval")
    assert len(distinct_prompts([*rows, closed])) == 3


def test_questions_are_rebuilt_from_rows_in_run_order() -> None:
    rows = [
        _row([CALL], id="b", gold_sources=["wikipedia:B"]),
        _row([CALL], id="a"),
        _row([CALL], id="b", experiment="rag", gold_sources=["wikipedia:B"]),
    ]
    questions = questions_of(rows)
    assert [q.id for q in questions] == ["b", "a"]
    assert questions[0].gold_sources == ("wikipedia:B",) and questions[1].gold_source is None


def test_gguf_spec_errors_name_the_file(tmp_path: Path) -> None:
    missing = tmp_path / "absent.gguf"
    with pytest.raises(ValueError, match=r"no GGUF model file at .*absent\.gguf"):
        load_chat_model(f"gguf:{missing}")
    not_gguf = tmp_path / "notes.gguf"
    not_gguf.write_text("plain text, not a model", encoding="utf-8")
    with pytest.raises(ValueError, match=r"cannot read .*notes\.gguf as a GGUF model"):
        ensure_converted(not_gguf, tmp_path / "converted")
    assert not (tmp_path / "converted").exists()


def test_converted_folder_changes_with_the_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CRAG_CACHE_DIR", str(tmp_path / "cache"))
    model = tmp_path / "Reader-1B.Q4.gguf"
    model.write_bytes(b"x" * 10)
    first = converted_folder(model)
    assert first.parent == tmp_path / "cache" / "models"
    assert first.name == "reader-1b.q4-10"
    model.write_bytes(b"x" * 11)
    assert converted_folder(model) != first


# --- the command line ----------------------------------------------------------------------


@pytest.fixture(scope="module")
def recorded_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Three questions, the main comparison, with the shipped generator and prompts kept."""
    out = tmp_path_factory.mktemp("record") / "run"
    assert main(["eval", *MAIN_RUN, "--record-prompts", "--out", str(out)]) == 0
    return out


@pytest.mark.integration
def test_recorded_rows_hold_each_generator_prompt(recorded_run: Path) -> None:
    rows = _rows(recorded_run)
    for row in rows:
        if row["abstained"]:
            assert row["prompts"] == [], row["experiment"]
            continue
        (call,) = row["prompts"]
        assert call["node"] == "generate"
        assert [m["role"] for m in call["messages"]] == ["system", "human"]
        assert row["question"] in call["messages"][1]["content"]
    rag = [r for r in rows if r["experiment"] == "rag"]
    assert all("<knowledge>" in r["prompts"][0]["messages"][1]["content"] for r in rag)
    closed = [r for r in rows if r["experiment"] == "no-retrieval"]
    assert all("<knowledge>" not in r["prompts"][0]["messages"][1]["content"] for r in closed)


@pytest.mark.integration
def test_same_generator_on_the_recorded_prompts_gives_the_same_answers(
    recorded_run: Path, tmp_path: Path
) -> None:
    out = tmp_path / "again"
    assert (
        main(["eval-reader", str(recorded_run), "--generator", "smollm2", "--out", str(out)]) == 0
    )
    before = {(r["experiment"], r["id"], r["gold_removed"]): r for r in _rows(recorded_run)}
    after = {(r["experiment"], r["id"], r["gold_removed"]): r for r in _rows(out)}
    assert after.keys() == before.keys()
    for key, row in after.items():
        assert row["answer"] == before[key]["answer"], key
        assert row["correct"] == before[key]["correct"], key
        assert row["answer_in_knowledge"] == before[key]["answer_in_knowledge"], key
    recorded, replayed = _results(recorded_run), _results(out)
    accuracy = {e["name"]: e["accuracy"] for e in recorded["experiments"]}
    assert {e["name"]: e["accuracy"] for e in replayed["experiments"]} == accuracy
    swap = replayed["meta"]["reader_swap"]
    abstained = sum(1 for r in before.values() if r["abstained"])
    assert swap["asked"] == len(before) - abstained and swap["kept"] == abstained
    assert swap["not_replayable"] == 0 and swap["recorded_generator"] == "smollm2"
    assert replayed["latency"]["experiments"] == {}
    assert len(replayed["statistics"]["comparisons"]) == len(recorded["statistics"]["comparisons"])
    report = (out / "report.md").read_text(encoding="utf-8")
    assert "**Reader swapped.**" in report and "| crag |" in report


@pytest.mark.integration
def test_prompts_only_run_records_without_answering(
    recorded_run: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "prompts"
    assert main(["eval", *MAIN_RUN, "--prompts-only", "--out", str(out)]) == 0
    rows = _rows(out)
    assert all(r["answer"] == "" or r["abstained"] for r in rows)
    recorded = {(r["experiment"], r["id"], r["gold_removed"]): r for r in _rows(recorded_run)}
    for row in rows:
        key = (row["experiment"], row["id"], row["gold_removed"])
        assert row["prompts"] == recorded[key]["prompts"], key
    assert _results(out)["meta"]["prompts_only"] is True
    report = (out / "report.md").read_text(encoding="utf-8")
    assert "## Prompts only" in report and "| crag |" not in report
    assert not list(out.glob("*.png"))
    capsys.readouterr()
    one = _first_question(out, tmp_path / "one-question")
    answered = tmp_path / "answered"
    assert main(["eval-reader", str(one), "--generator", "smollm2", "--out", str(answered)]) == 0
    assert "| crag |" in capsys.readouterr().out
    assert _results(answered)["meta"]["reader_swap"]["recorded_prompts_only"] is True
    new = {(r["experiment"], r["id"], r["gold_removed"]): r["answer"] for r in _rows(answered)}
    first_id = rows[0]["id"]
    assert {e for e, _, _ in new} == {r["experiment"] for r in rows}
    assert new == {key: r["answer"] for key, r in recorded.items() if key[1] == first_id}


def _first_question(run: Path, folder: Path) -> Path:
    """A copy of ``run`` holding only its first question's rows (every experiment's).

    The reader replays each experiment's prompts of that question; replaying the other
    questions' prompts again would only repeat what the test above proves on the full run.
    """
    folder.mkdir()
    (folder / "results.json").write_bytes((run / "results.json").read_bytes())
    lines = (run / "rows.jsonl").read_text(encoding="utf-8").splitlines()
    first_id = json.loads(lines[0])["id"]
    kept = [line for line in lines if json.loads(line)["id"] == first_id]
    (folder / "rows.jsonl").write_text("\n".join(kept) + "\n", encoding="utf-8")
    return folder


def test_eval_reader_needs_a_run_with_prompts(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert (
        main(["eval-reader", str(tmp_path), "--generator", "smollm2", "--out", str(tmp_path / "o")])
        == 2
    )
    assert "results.json not found" in capsys.readouterr().err
    (tmp_path / "results.json").write_text(json.dumps({"meta": {}}), encoding="utf-8")
    row = {k: v for k, v in _row(None).__dict__.items()}
    (tmp_path / "rows.jsonl").write_text(json.dumps(row) + "\n", encoding="utf-8")
    assert (
        main(["eval-reader", str(tmp_path), "--generator", "smollm2", "--out", str(tmp_path / "o")])
        == 2
    )
    assert (
        "did not record its prompts: run crag-bench eval with --record-prompts"
        in capsys.readouterr().err
    )
    (tmp_path / "rows.jsonl").write_text("{not json\n", encoding="utf-8")
    assert (
        main(["eval-reader", str(tmp_path), "--generator", "smollm2", "--out", str(tmp_path / "o")])
        == 2
    )
    assert "cannot read the run in" in capsys.readouterr().err
