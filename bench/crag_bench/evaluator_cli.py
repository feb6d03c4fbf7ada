"""``crag-bench evaluator ...``: build pairs, train, calibrate, report on and time evaluators.

Commands:

``mine``
    (question, passage, label) and (question, strip, label) pairs from every question of the
    DPR dev sets over the store, split into train / select / measure (the shipped evaluator's
    training data; :mod:`crag_bench.pair_mining`).
``ship``
    Write a cross-encoder trained from the installed MiniLM as the shipped evaluator's weight
    file (what training changed, float16: :mod:`crag.evaluator.shipped`).
``pairs``
    (question, passage, label) pairs from FanOutQA ``train`` or ``dev`` questions over the
    store, as JSON Lines.
``train``
    Fine-tune a cross-encoder or T5 evaluator on pair files.
``calibrate``
    Fit the action trigger's upper and lower thresholds on scored pairs for a target precision.
``report``
    Pair accuracy, ROC AUC and the paper's action-vs-gold table per evaluator back end.
``bench``
    Pairs per second, batched against one pair per call and the paper's way, float and int8.

``calibrate`` and ``report`` take ``--int8``: the cross-encoder and T5 back ends then run with
their Linear layers int8 dynamically quantised (CPU only; scores drift slightly).

FanOutQA ids outside the split file's ``train`` and ``dev`` lists are held out: every command
refuses them. Results go to stdout; errors the user can fix raise ``ValueError``,
``EvaluatorError`` or ``StoreError``, which ``crag`` prints as one line (exit code 2).
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from dataclasses import asdict, is_dataclass, replace
from pathlib import Path
from typing import Any

from crag_bench.evaluator_calibration import PAPER_LOWER, PAPER_UPPER, Thresholds

logger = logging.getLogger(__name__)

MODEL_BACKENDS: tuple[str, ...] = ("t5", "cross-encoder")
"""Back ends that need a checkpoint (``--model BACKEND=PATH``)."""


def _out(text: str = "") -> None:
    """Write one line for people to stdout."""
    sys.stdout.write(text + "\n")


def _json_out(data: Any) -> None:
    sys.stdout.write(json.dumps(data, indent=2, ensure_ascii=False) + "\n")


def _figure(value: float | None, digits: int = 3) -> str:
    return "n/a" if value is None else f"{value:.{digits}f}"


def _int8_applies(name: str, int8: bool) -> bool:
    """Whether ``--int8`` changes back end ``name`` (only the model back ends quantise)."""
    return int8 and name.strip().lower() in MODEL_BACKENDS


def _split(args: argparse.Namespace) -> dict[str, list[str]]:
    from crag_bench.evaluator_report import read_split

    path = getattr(args, "split_file", None)
    return read_split(Path(path) if path else None)


def _open_store(args: argparse.Namespace) -> Any:
    """Open the project store (``--store``/``--collection`` or the settings' defaults)."""
    from crag.settings.deployment import deployment_settings
    from crag.vectorstore.embeddings import load_embeddings
    from crag.vectorstore.store import open_store

    defaults = deployment_settings()
    path = args.store or defaults.store_path
    collection = args.collection or defaults.collection
    logger.info("opening store %s (collection %s)", path, collection)
    return open_store(path, collection, load_embeddings(defaults.embedder), create=False)


def _check_pair_parts(pairs: list[Any], split: dict[str, list[str]], purpose: str) -> None:
    """Refuse pairs of held-out questions; note pairs of ``dev`` questions when training."""
    from crag_bench.evaluator_report import pair_parts

    parts = pair_parts(pairs, split)
    if parts["held_out"]:
        raise ValueError(
            f"{parts['held_out']} pair(s) come from held-out FanOutQA questions (in neither "
            f"train nor dev of the split file); they may not be used to {purpose}"
        )
    if purpose == "train" and parts["dev"]:
        _out(
            f"note: {parts['dev']} of the pairs come from dev questions; the split reserves "
            "dev for tuning and reporting, train for training"
        )


# --- pairs -----------------------------------------------------------------------------------


def cmd_pairs(args: argparse.Namespace) -> int:
    """Build labelled pairs from FanOutQA questions of one split part over the store."""
    from crag_bench.evaluator_report import check_ids, read_ids_file
    from crag_bench.pairs import pairs_from_cases, retrieval_cases, write_pairs

    if args.k < 1:
        raise ValueError(f"--k must be at least 1, got {args.k}")
    split = _split(args)
    ids = read_ids_file(Path(args.ids)) if args.ids else split[args.split]
    check_ids(ids, split, (args.split,))
    store = _open_store(args)
    from crag.vectorstore.embeddings import load_embeddings
    from crag_bench.pair_mining import store_retriever

    # exact search over the store's vectors: the same pairs every time (training data)
    exact = store_retriever(store, load_embeddings(), args.k)
    cases = retrieval_cases(ids, store, k=args.k, retrieve=exact)
    with_gold = [case for case in cases if case.gold_passages]
    pairs = pairs_from_cases(with_gold)
    written = write_pairs(Path(args.out), pairs)
    positives = sum(1 for pair in pairs if pair.label > 0)
    _out(
        f"{args.split}: {len(ids)} questions, {len(cases)} leaf questions, "
        f"{len(with_gold)} with their gold page in the store "
        f"({len(cases) - len(with_gold)} skipped), "
        f"{sum(1 for c in cases if c.gold_in_top_k)} with it in the top {args.k}"
    )
    _out(
        f"wrote {written} pairs ({positives} positive, {written - positives} negative) "
        f"to {args.out}"
    )
    return 0


def cmd_mine(args: argparse.Namespace) -> int:
    """Mine labelled pairs from the DPR dev sets (and FanOutQA train) over the store."""
    import tempfile

    from crag.vectorstore.corpus import load_corpus
    from crag.vectorstore.embeddings import load_embeddings
    from crag_bench.dpr_sets import download_jar
    from crag_bench.pair_mining import (
        Labeller,
        MiningOptions,
        measured_ids,
        mine_pairs,
        read_dev_sets,
        store_retriever,
        write_mined,
    )

    if args.k < 1:
        raise ValueError(f"--k must be at least 1, got {args.k}")
    store = _open_store(args)
    with tempfile.TemporaryDirectory() as folder:
        jar = Path(args.jar) if args.jar else download_jar(Path(folder))
        questions = read_dev_sets(jar)
    if args.limit:
        questions = {name: items[: args.limit] for name, items in questions.items()}
    labeller = Labeller([(doc.source, doc.text) for doc in load_corpus()])
    retriever = store_retriever(store, load_embeddings(), args.k)
    mined = mine_pairs(questions, retriever, labeller, measured_ids(), MiningOptions(k=args.k))
    counts = write_mined(Path(args.out), mined)
    for split, number in sorted(counts.questions.items()):
        with_positive = counts.questions_with_positive.get(split, 0)
        _out(f"{split}: {number} questions, {with_positive} with a positive pair")
    for key, number in sorted(counts.pairs.items()):
        positives = counts.positives.get(key, 0)
        _out(f"  {key}: {number} pairs, {positives} positive ({positives / number:.1%})")
    _out(f"wrote {args.out}/{{train,select,measure}}.jsonl and counts.json")
    return 0


# --- train -----------------------------------------------------------------------------------


def _describe(result: Any) -> list[str]:
    if is_dataclass(result) and not isinstance(result, type):
        return [f"  {key}: {value}" for key, value in asdict(result).items()]
    return [f"  {result!r}"]


def cmd_train(args: argparse.Namespace) -> int:
    """Fine-tune an evaluator on pair files."""
    from crag_bench.evaluator_training.options import TrainingOptions
    from crag_bench.evaluator_training.trainer import train_evaluator
    from crag_bench.held_out import refuse_held_out
    from crag_bench.pairs import read_pairs

    pairs = read_pairs(Path(p) for p in args.pairs)
    if not pairs:
        raise ValueError("the pair files hold no pairs")
    refuse_held_out((pair.question_id for pair in pairs), "train")
    _check_pair_parts(pairs, _split(args), "train")
    positives = sum(1 for pair in pairs if pair.label > 0)
    _out(
        f"training a {args.kind} evaluator on {len(pairs)} pairs ({positives} positive, "
        f"{len(pairs) - positives} negative) into {args.out}"
    )
    options = TrainingOptions(
        base_model=args.base_model,
        epochs=args.epochs,
        batch_size=args.batch_size,
        learning_rate=args.learning_rate,
        seed=args.seed,
        resume=not args.no_resume,
        progress=True,
        train_layers=args.train_layers,
        freeze_embeddings=args.freeze_embeddings,
        lora_rank=args.lora_rank,
        prior=args.prior,
        group_by_length=args.group_by_length,
        checkpoint_every=args.checkpoint_every,
        loss=args.loss,
    )
    if args.max_length is not None:
        options = replace(options, max_length=args.max_length)
    result = train_evaluator(args.kind, pairs, Path(args.out), options)
    _out("done:")
    for line in _describe(result):
        _out(line)
    _out(
        f"use it with: --set evaluator={args.kind} --set evaluator_model={args.out} "
        f"(calibrate first: crag-bench evaluator calibrate --evaluator {args.kind} "
        f"--model {args.out} --pairs DEV_PAIRS.jsonl)"
    )
    return 0


def cmd_ship(args: argparse.Namespace) -> int:
    """Write a trained cross-encoder as the shipped evaluator's delta file."""
    from crag.evaluator.shipped import DELTA_FILE, write_delta

    out = Path(args.out) if args.out else DELTA_FILE
    written = write_delta(Path(args.model), out)
    _out(
        f"wrote {out}: {written['tensors']} tensors, {written['parameters']:,} parameters, "
        f"{written['bytes'] / 2**20:.1f} MiB (and {out.with_suffix('.json').name})"
    )
    return 0


# --- calibrate -------------------------------------------------------------------------------


def score_pairs(evaluator: Any, pairs: list[Any]) -> list[float]:
    """Score pairs with one evaluator call per question (its passages batched together)."""
    by_question: dict[str, list[int]] = {}
    for index, pair in enumerate(pairs):
        by_question.setdefault(pair.question, []).append(index)
    scores = [0.0] * len(pairs)
    for question, indices in by_question.items():
        values = evaluator.score(question, [pairs[i].passage for i in indices])
        for index, value in zip(indices, values, strict=True):
            scores[index] = float(value)
    return scores


def cmd_calibrate(args: argparse.Namespace) -> int:
    """Fit the upper and lower thresholds of the action trigger on scored pairs."""
    from crag.evaluator.registry import load_evaluator
    from crag_bench.evaluator_calibration import fit_thresholds
    from crag_bench.evaluator_metrics import pair_accuracy, roc_auc
    from crag_bench.pairs import read_pairs

    if not 0.0 < args.target_precision <= 1.0:
        raise ValueError(f"--target-precision must be in (0, 1], got {args.target_precision}")
    from crag_bench.held_out import refuse_held_out

    pairs = read_pairs(Path(p) for p in args.pairs)
    if not pairs:
        raise ValueError("the pair files hold no pairs")
    refuse_held_out((pair.question_id for pair in pairs), "calibrate")
    _check_pair_parts(pairs, _split(args), "calibrate")
    evaluator = load_evaluator(
        args.evaluator, model=args.model or "", batch_size=args.batch_size, int8=args.int8
    )
    scores = score_pairs(evaluator, pairs)
    labels = [pair.label for pair in pairs]
    fit = fit_thresholds(scores, labels, args.target_precision)
    setting = f"--set evaluator={args.evaluator}"
    if args.model:
        setting += f" --set evaluator_model={args.model}"
    setting += f" {fit.set_arguments()}"
    if args.json:
        _json_out(
            {
                "evaluator": args.evaluator,
                "model": args.model or None,
                "int8": _int8_applies(args.evaluator, args.int8),
                **asdict(fit),
                "used_defaults": fit.used_defaults,
                "coverage": fit.coverage,
                "pair_accuracy": pair_accuracy(scores, labels),
                "auc": roc_auc(scores, labels),
                "arguments": setting,
            }
        )
        return 0
    _print_calibration(args, fit, scores, labels)
    _out(f"use: crag ask QUESTION {setting}")
    return 0


def _print_calibration(
    args: argparse.Namespace, fit: Thresholds, scores: list[float], labels: list[int]
) -> None:
    """The calibration's figures and notes, for people."""
    from crag_bench.evaluator_metrics import pair_accuracy, roc_auc

    int8_note = " (int8)" if _int8_applies(args.evaluator, args.int8) else ""
    _out(
        f"{args.evaluator}{int8_note}: {fit.pairs} pairs ({fit.positives} positive, "
        f"{fit.negatives} negative), target precision {fit.target_precision:g}; pair accuracy "
        f"{_figure(pair_accuracy(scores, labels))}, ROC AUC {_figure(roc_auc(scores, labels))}"
    )
    upper_note = "" if fit.upper_fitted else "  (no threshold reaches the target: paper's default)"
    lower_note = "" if fit.lower_fitted else "  (no threshold reaches the target: paper's default)"
    _out(
        f"  upper {fit.upper!r}: {fit.correct} pairs Correct, precision "
        f"{_figure(fit.upper_precision)}, recall {_figure(fit.upper_recall)} of positives"
        f"{upper_note}"
    )
    _out(
        f"  lower {fit.lower!r}: {fit.incorrect} pairs Incorrect, precision "
        f"{_figure(fit.lower_precision)}, recall {_figure(fit.lower_recall)} of negatives"
        f"{lower_note}"
    )
    _out(
        f"  Correct / Ambiguous / Incorrect: {fit.correct} / {fit.ambiguous} / {fit.incorrect} "
        f"pairs (coverage {fit.coverage:.3f})"
    )
    if fit.crossed:
        _out("  note: the fitted thresholds crossed; they were merged into one (no Ambiguous)")
    if int8_note:
        _out("  note: fitted on int8 scores; use them with --set evaluator_int8=true")


# --- report ----------------------------------------------------------------------------------


def _models(values: list[str] | None) -> dict[str, str]:
    models: dict[str, str] = {}
    for value in values or []:
        name, sep, path = value.partition("=")
        if not sep or not name.strip() or not path.strip():
            raise ValueError(f"--model takes BACKEND=PATH, got {value!r}")
        models[name.strip().lower()] = path.strip()
    return models


def _backends(spec: str | None, models: dict[str, str]) -> list[str]:
    if spec:
        names = [name.strip().lower() for name in spec.split(",") if name.strip()]
        if not names:
            raise ValueError("--backends needs at least one back end name")
    else:
        names = ["embedding", *(name for name in models if name != "embedding")]
    missing = [name for name in names if name in MODEL_BACKENDS and name not in models]
    if missing:
        raise ValueError(
            f"back end(s) {', '.join(missing)} need a checkpoint: add "
            + " ".join(f"--model {name}=PATH" for name in missing)
        )
    return list(dict.fromkeys(names))


def cmd_report(args: argparse.Namespace) -> int:
    """Report pair figures and the action-vs-gold table per evaluator back end."""
    from crag.evaluator.registry import load_evaluator
    from crag_bench.evaluator_report import (
        check_ids,
        evaluate_backend,
        format_report,
        read_ids_file,
    )
    from crag_bench.pairs import retrieval_cases

    if args.k < 1:
        raise ValueError(f"--k must be at least 1, got {args.k}")
    if args.lower > args.upper:
        raise ValueError(f"--lower {args.lower} is above --upper {args.upper}")
    split = _split(args)
    ids = read_ids_file(Path(args.ids)) if args.ids else split["dev"]
    check_ids(ids, split, ("train", "dev"))
    models = _models(args.model)
    names = _backends(args.backends, models)
    evaluators = [
        load_evaluator(name, model=models.get(name, ""), batch_size=args.batch_size, int8=args.int8)
        for name in names
    ]
    store = _open_store(args)
    cases = retrieval_cases(ids, store, k=args.k)
    results: list[dict[str, Any]] = []
    for name, evaluator in zip(names, evaluators, strict=True):
        report = evaluate_backend(evaluator, cases, args.upper, args.lower, progress=True)
        if args.json:
            results.append(
                {
                    **report.to_dict(),
                    "model": models.get(name),
                    "int8": _int8_applies(name, args.int8),
                    "k": args.k,
                    "top_level_questions": len(ids),
                }
            )
        else:
            _out(format_report(report, args.k))
            if models.get(name):
                int8_note = " (int8)" if _int8_applies(name, args.int8) else ""
                _out(f"  model: {models[name]}{int8_note}")
            _out()
    if args.json:
        _json_out(results)
    return 0


# --- bench -----------------------------------------------------------------------------------


def cmd_bench(args: argparse.Namespace) -> int:
    """Time batched, one-pair-per-call, the paper's way and int8 batched scoring."""
    import torch

    from crag_bench.evaluator_bench import MODELS, format_bench, run_bench

    names = [name.strip().lower() for name in args.models.split(",") if name.strip()]
    unknown = [name for name in names if name not in MODELS]
    if not names or unknown:
        raise ValueError(f"--models takes a list of {', '.join(MODELS)}; got {args.models!r}")
    if args.pairs is not None and args.pairs < 1:
        raise ValueError(f"--pairs must be at least 1, got {args.pairs}")
    if args.threads is not None:
        if args.threads < 1:
            raise ValueError(f"--threads must be at least 1, got {args.threads}")
        torch.set_num_threads(args.threads)
    if not args.json:
        _out(f"device cpu, torch {torch.__version__}, {torch.get_num_threads()} threads")
    results = []
    for name in names:
        result = run_bench(
            name,
            args.pairs,
            passages_per_question=args.per_question,
            batch_size=args.batch_size,
            repeats=args.repeat,
        )
        if args.json:
            results.append(result.to_dict())
        else:
            _out(format_bench(result))
    if args.json:
        _json_out(results)
    return 0


# --- parser ----------------------------------------------------------------------------------


def _store_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--store", help="Chroma store directory (default: .crag/chroma)")
    parser.add_argument("--collection", help="collection name (default: crag)")


def _int8_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--int8",
        action="store_true",
        help="run t5/cross-encoder with int8 dynamically quantised Linear layers (CPU only; "
        "faster, scores drift slightly)",
    )


def _split_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--split-file",
        help="FanOutQA split file (default: crag_bench's own, data/fanoutqa-split.json)",
    )


def _add_pairs_parser(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """``crag-bench evaluator pairs``."""
    pairs = commands.add_parser(
        "pairs", help="labelled (question, passage) pairs from FanOutQA over the store"
    )
    pairs.add_argument("--split", required=True, choices=("train", "dev"))
    pairs.add_argument("--ids", help="JSON list of top-level ids (default: all of the split)")
    pairs.add_argument("--k", type=int, default=10, help="passages retrieved per question")
    pairs.add_argument("--out", required=True, help="output JSON Lines file")
    _store_options(pairs)
    _split_option(pairs)
    pairs.set_defaults(func=cmd_pairs)


def _add_mine_parser(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """``crag-bench evaluator mine``."""
    mine = commands.add_parser(
        "mine", help="labelled passage and strip pairs from the DPR dev sets over the store"
    )
    mine.add_argument(
        "--jar",
        help="anserini-0.14.3-fatjar.jar of pyserini==0.17.0 (default: pip download, 110 MB)",
    )
    mine.add_argument("--out", required=True, help="output folder")
    mine.add_argument("--k", type=int, default=10, help="passages retrieved per question")
    mine.add_argument("--limit", type=int, default=0, help="first N questions of each set")
    _store_options(mine)
    mine.set_defaults(func=cmd_mine)


def _add_train_parser(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """``crag-bench evaluator train``."""
    train = commands.add_parser("train", help="fine-tune a cross-encoder or T5 evaluator")
    train.add_argument("--kind", required=True, choices=("cross-encoder", "t5"))
    train.add_argument("--pairs", required=True, nargs="+", help="JSON Lines pair files")
    train.add_argument("--out", required=True, help="output folder")
    train.add_argument("--base-model", help="model folder or hub id to start from")
    train.add_argument("--epochs", type=int, default=1)
    train.add_argument("--batch-size", type=int, default=16)
    train.add_argument("--learning-rate", type=float, help="peak learning rate")
    train.add_argument("--max-length", type=int, help="token budget per pair (default 256)")
    train.add_argument("--seed", type=int, default=0)
    train.add_argument(
        "--no-resume", action="store_true", help="start afresh even if a checkpoint exists"
    )
    train.add_argument(
        "--train-layers", type=int, help="cross-encoder: fine-tune only the top N layers"
    )
    train.add_argument(
        "--freeze-embeddings",
        action="store_true",
        help="cross-encoder: keep the embedding layer as the base model's",
    )
    train.add_argument(
        "--lora-rank", type=int, default=0, help="cross-encoder: LoRA adapters of this rank (peft)"
    )
    train.add_argument(
        "--prior",
        action="store_true",
        help="cross-encoder: learn a correction of the embedding evaluator's map (the shipped "
        "evaluator's recipe)",
    )
    train.add_argument(
        "--group-by-length", action="store_true", help="batch pairs of similar length (faster)"
    )
    train.add_argument("--checkpoint-every", type=int, default=200, help="steps between saves")
    train.add_argument(
        "--loss",
        choices=("mse", "listwise"),
        default="mse",
        help="mse: the paper's regression; listwise: each question's texts ranked against each "
        "other (with --prior; --batch-size then counts questions)",
    )
    _split_option(train)
    train.set_defaults(func=cmd_train)


def _add_ship_parser(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """``crag-bench evaluator ship``."""
    ship = commands.add_parser(
        "ship", help="write a trained MiniLM cross-encoder as the shipped evaluator's weights"
    )
    ship.add_argument("--model", required=True, help="the trained cross-encoder folder")
    ship.add_argument("--out", help="the .safetensors file (default: the shipped one)")
    ship.set_defaults(func=cmd_ship)


def _add_calibrate_parser(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """``crag-bench evaluator calibrate``."""
    calibrate = commands.add_parser(
        "calibrate", help="fit the upper and lower thresholds on scored pairs"
    )
    calibrate.add_argument("--evaluator", required=True, help="back end name")
    calibrate.add_argument("--model", help="checkpoint of the back end (t5, cross-encoder)")
    calibrate.add_argument("--pairs", required=True, nargs="+", help="JSON Lines pair files")
    calibrate.add_argument("--target-precision", type=float, default=0.9)
    calibrate.add_argument("--batch-size", type=int, default=32)
    calibrate.add_argument("--json", action="store_true", help="print JSON")
    _int8_option(calibrate)
    _split_option(calibrate)
    calibrate.set_defaults(func=cmd_calibrate)


def _add_report_parser(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """``crag-bench evaluator report``."""
    report = commands.add_parser(
        "report", help="pair accuracy, ROC AUC and actions against gold per back end"
    )
    report.add_argument("--ids", help="JSON list of top-level ids (default: the dev ids)")
    report.add_argument(
        "--backends",
        help="comma-separated back ends (default: embedding and those given a --model)",
    )
    report.add_argument(
        "--model",
        action="append",
        metavar="BACKEND=PATH",
        help="checkpoint of a back end, e.g. t5=runs/t5 (repeatable)",
    )
    report.add_argument("--k", type=int, default=10, help="passages retrieved per question")
    report.add_argument(
        "--upper", type=float, default=PAPER_UPPER, help=f"upper threshold ({PAPER_UPPER})"
    )
    report.add_argument(
        "--lower", type=float, default=PAPER_LOWER, help=f"lower threshold ({PAPER_LOWER})"
    )
    report.add_argument("--batch-size", type=int, default=32)
    report.add_argument("--json", action="store_true", help="print JSON")
    _int8_option(report)
    _store_options(report)
    _split_option(report)
    report.set_defaults(func=cmd_report)


def _add_bench_parser(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """``crag-bench evaluator bench``."""
    bench = commands.add_parser(
        "bench", help="pairs/s batched against one pair per call, the paper's way and int8"
    )
    bench.add_argument(
        "--pairs", type=int, help="pairs to score (default: 64 for minilm, 16 for t5-large)"
    )
    bench.add_argument("--models", default="minilm,t5-large", help="comma-separated models")
    bench.add_argument(
        "--per-question",
        type=int,
        default=0,
        help="passages per question in a batched call (default 0: all pairs in one call)",
    )
    bench.add_argument("--batch-size", type=int, default=32, help="pairs per forward pass")
    bench.add_argument(
        "--repeat", type=int, help="rounds per mode, fastest kept (default: 3 minilm, 1 t5-large)"
    )
    bench.add_argument("--threads", type=int, help="torch CPU threads (default: torch's choice)")
    bench.add_argument("--json", action="store_true", help="print JSON")
    bench.set_defaults(func=cmd_bench)


def add_evaluator_commands(
    subparsers: argparse._SubParsersAction[argparse.ArgumentParser],
) -> None:
    """Add ``crag-bench evaluator pairs|train|calibrate|report|bench`` to the ``crag`` parser."""
    evaluator = subparsers.add_parser(
        "evaluator", help="build pairs, train, calibrate, report on and time evaluators"
    )
    commands = evaluator.add_subparsers(dest="evaluator_command", required=True)

    _add_mine_parser(commands)
    _add_pairs_parser(commands)
    _add_train_parser(commands)
    _add_ship_parser(commands)
    _add_calibrate_parser(commands)
    _add_report_parser(commands)
    _add_bench_parser(commands)
