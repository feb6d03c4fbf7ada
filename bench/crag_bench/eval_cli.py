"""``crag-bench eval``: CRAG against RAG and the paper's ablations, with latency and memory."""

from __future__ import annotations

import argparse
import functools
import json
import logging
import random
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

logger = logging.getLogger(__name__)

DEFAULT_OUT = ".crag/eval"
DEFAULT_INGESTION_DOCUMENTS = 200
"""Bundled summaries the ingestion measurement ingests (about 200 chunks: 10 s on 2 cores)."""
DEFAULT_WORKERS = 1
"""Questions ``crag-bench eval`` runs at once by default: one, so that a run is reproducible
(``--workers 4`` is faster. A generator on onnxruntime then decodes each prompt alone, so the
answers are those of one worker; one that transformers decodes decodes in batches, in float32
unless its dtype is set, so its answers do not depend on which prompts meet)."""


def add_eval_command(sub: Any) -> None:
    """Register ``crag-bench eval`` on the CLI's subparsers."""
    run = sub.add_parser(
        "eval",
        help="benchmark CRAG against RAG, ablations and a peer baseline",
        description="Run every experiment over FanOutQA leaf questions (or a bundled "
        "open-domain QA set, or a PopQA-format question file) and write results.json, "
        "rows.jsonl, report.md and PNG plots.",
    )
    _question_options(run)
    _output_and_store_options(run)
    _experiment_options(run)
    _workload_options(run)
    _recording_options(run)
    run.set_defaults(func=cmd_eval)


def _question_options(run: argparse.ArgumentParser) -> None:
    """Which questions (FanOutQA ids, a PopQA-format file or a bundled set), over which corpus."""
    from crag_bench.datasets import dataset_names

    questions = run.add_mutually_exclusive_group()
    questions.add_argument(
        "--ids",
        type=Path,
        metavar="FILE",
        help="JSON list of FanOutQA top-level question ids (default: the split file's dev ids)",
    )
    questions.add_argument(
        "--questions",
        type=Path,
        metavar="FILE",
        help="questions in PopQA's format (.jsonl, .json, .tsv or .csv with question and "
        "possible_answers; optional id, gold_sources and s_wiki_title)",
    )
    questions.add_argument(
        "--dataset",
        metavar="NAME",
        help="a bundled open-domain QA set over the bundled corpus (tune on *-dev; *-test "
        "for acceptance runs only): " + ", ".join(dataset_names()),
    )
    run.add_argument(
        "--corpus",
        type=Path,
        nargs="+",
        metavar="PATH",
        help="your own documents (files or folders) to answer --questions from; they are "
        "ingested into OUT/store (default: the bundled Wikipedia summaries)",
    )
    run.add_argument("--limit", type=int, default=0, metavar="N", help="first N questions only")


def _output_and_store_options(run: argparse.ArgumentParser) -> None:
    """Where the results go, and which store (or smaller store) the questions are asked of."""
    run.add_argument(
        "--out",
        type=Path,
        default=Path(DEFAULT_OUT),
        help=f"output folder (default: {DEFAULT_OUT})",
    )
    run.add_argument(
        "--store", help="Chroma store of the bundled corpus (default: the usual .crag/chroma)"
    )
    run.add_argument(
        "--corpus-size",
        type=int,
        default=0,
        metavar="N",
        help="a smaller store in OUT/store: the questions' gold summaries plus N others "
        "(seeded); 0: the whole bundled corpus",
    )


def _experiment_options(run: argparse.ArgumentParser) -> None:
    """Which experiments, the gold-removed share, the seed and the settings they all share."""
    from crag_bench.experiments import DEFAULT_GOLD_REMOVED_SHARE, PRESETS, experiment_names

    run.add_argument(
        "--experiments",
        metavar="NAMES",
        help="comma-separated experiments or presets to run (default: all): "
        + ", ".join(experiment_names())
        + "; presets: "
        + ", ".join(PRESETS)
        + f" (main: {', '.join(PRESETS['main'])}; each holds crag)",
    )
    run.add_argument(
        "--gold-removed-share",
        type=int,
        default=DEFAULT_GOLD_REMOVED_SHARE,
        metavar="PERCENT",
        help="share of the questions (seeded) whose gold documents rag-gold-removed and "
        f"crag-gold-removed remove from the store (default: {DEFAULT_GOLD_REMOVED_SHARE})",
    )
    run.add_argument("--seed", type=int, default=0, help="seed of every random choice")
    run.add_argument(
        "--max-new-tokens",
        type=int,
        default=48,
        help="longest answer in tokens (default 48: answers are one short sentence)",
    )
    run.add_argument(
        "--set",
        action="append",
        metavar="KEY=VALUE",
        help="a setting for every experiment (repeatable), of any kind: a per-run setting "
        "(e.g. top_k), a parameter of the method (e.g. strips_kept; an experiment's own "
        "parameters override it) or a deployment setting (e.g. evaluator, generator)",
    )


def _workload_options(run: argparse.ArgumentParser) -> None:
    """How much is run beside the experiments, and how many questions at once."""
    run.add_argument(
        "--no-performance",
        action="store_true",
        help="skip the cold-start and ingestion measurements",
    )
    run.add_argument(
        "--ingestion-documents",
        type=int,
        default=DEFAULT_INGESTION_DOCUMENTS,
        metavar="N",
        help="bundled summaries the ingestion measurement ingests (default "
        f"{DEFAULT_INGESTION_DOCUMENTS})",
    )
    run.add_argument(
        "--workers",
        type=int,
        default=DEFAULT_WORKERS,
        metavar="N",
        help="questions run at once: faster (default 1: one at a time). A generator on "
        "onnxruntime decodes each prompt alone; one that transformers decodes decodes them in "
        "batches, in float32 (the answers decoded alone in float32, whatever meets in a batch)",
    )
    run.add_argument(
        "--latency-questions",
        type=int,
        default=50,
        metavar="N",
        help="with more than one worker: the first N questions run no retrieval, RAG and CRAG "
        "one at a time for the latency figures (default 50)",
    )
    run.add_argument(
        "--gold-removal-curve",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="run every question with its gold removed, for the curve over every removal "
        "level (--no-gold-removal-curve: only the removed share, about half the work of the "
        "gold-removed experiments)",
    )


def _recording_options(run: argparse.ArgumentParser) -> None:
    """What is kept besides the answers (prompts), and how the figures are printed."""
    run.add_argument(
        "--record-prompts",
        action="store_true",
        help="keep every generator prompt in rows.jsonl, for `crag-bench eval-reader`",
    )
    run.add_argument(
        "--prompts-only",
        action="store_true",
        help="record the prompts and generate no answer (no accuracy is reported): the "
        "input of `crag-bench eval-reader` on a machine with a faster generator",
    )
    run.add_argument("--json", action="store_true", help="print every figure as JSON")


def _fanoutqa(ids_file: Path | None) -> tuple[list[Any], str]:
    from crag.vectorstore.corpus import load_corpus
    from crag_bench.evaluator_report import read_ids_file, read_split
    from crag_bench.questions import fanoutqa_questions

    if ids_file is None:
        ids = read_split()["dev"]
        source = "FanOutQA leaf questions of the split file's dev ids"
    else:
        ids = read_ids_file(ids_file)
        source = f"FanOutQA leaf questions of the ids in {ids_file}"
    titles = {doc.title for doc in load_corpus() if doc.title}
    questions = fanoutqa_questions(ids, titles)
    return questions, f"{source}, gold article in the bundled corpus"


def _dataset(name: str) -> tuple[list[Any], str]:
    from crag_bench.datasets import is_dev, load_dataset

    questions = load_dataset(name)
    if not is_dev(name):
        logger.warning("%s is a test set: use it for acceptance runs only, tune on *-dev", name)
    return questions, (
        f"open-domain QA set {name} (DPR split; questions whose answer is in a few bundled "
        "summaries, their gold documents)"
    )


def _open_eval_store(out: Path, collection: str, embedder: str) -> tuple[str, Any]:
    """Open (or create) the eval's own store, ``out/store``, with the run's embedder."""
    from crag.vectorstore.embeddings import load_embeddings
    from crag.vectorstore.store import open_store

    path = str(out / "store")
    return path, open_store(path, collection, load_embeddings(embedder), create=True)


def _small_store(
    out: Path, questions: list[Any], size: int, seed: int, collection: str, embedder: str
) -> str:
    """Ingest the questions' gold summaries plus ``size`` others into ``out/store``."""
    from crag.vectorstore.corpus import load_corpus
    from crag.vectorstore.ingest import ingest_documents

    corpus = load_corpus()
    gold = {s for q in questions for s in q.gold_sources}
    chosen = [d for d in corpus if d.source in gold]
    others = [d for d in corpus if d.source not in gold]
    chosen += random.Random(seed).sample(others, min(size, len(others)))
    path, store = _open_eval_store(out, collection, embedder)
    ingest_documents(chosen, store)  # with a progress bar
    return path


def _user_store(out: Path, paths: list[Path], collection: str, embedder: str) -> str:
    """Ingest the user's documents into ``out/store``; unreadable files are logged."""
    from crag.vectorstore.ingest import ingest_paths

    path, store = _open_eval_store(out, collection, embedder)
    report = ingest_paths(paths, store)  # with a progress bar
    for source, error in report.failed:
        logger.warning("not ingested: %s: %s", source, error)
    return path


def _check_numbers(args: argparse.Namespace) -> None:
    """Reject the numeric options out of their range, naming the option."""
    if args.limit < 0:
        raise ValueError(f"--limit must be 0 (all) or positive, not {args.limit}")
    if args.corpus_size < 0:
        raise ValueError(f"--corpus-size must be 0 (all) or positive, not {args.corpus_size}")
    if not 1 <= args.workers <= 64:
        raise ValueError(f"--workers must be from 1 to 64, not {args.workers}")
    if args.ingestion_documents < 1:
        raise ValueError(f"--ingestion-documents must be positive, not {args.ingestion_documents}")
    if args.latency_questions < 1:
        raise ValueError(f"--latency-questions must be positive, not {args.latency_questions}")
    if not 0 <= args.gold_removed_share <= 100:
        raise ValueError(
            f"--gold-removed-share must be a percent from 0 to 100, not {args.gold_removed_share}"
        )


def _load_questions(args: argparse.Namespace) -> tuple[list[Any], str]:
    """The questions to evaluate (the first ``--limit``) and a line saying where from."""
    from crag_bench.questions import read_popqa

    if args.questions:
        questions = read_popqa(args.questions)
        source = f"questions of {args.questions}"
    elif args.dataset:
        questions, source = _dataset(args.dataset)
    else:
        questions, source = _fanoutqa(args.ids)
    if args.limit:
        questions = questions[: args.limit]
    if not questions:
        raise ValueError(f"no questions to evaluate ({source})")
    return questions, source


@dataclass(frozen=True)
class _EvalStore:
    """The store the eval answers from, and how the report describes it."""

    path: str
    description: str
    default_corpus: bool


def _eval_store(
    args: argparse.Namespace,
    questions: list[Any],
    settings: dict[str, Any],
    collection: str,
    embedder: str,
) -> _EvalStore:
    """The user's documents, a small store of the bundled corpus, or the bundled corpus."""
    from crag.settings.deployment import deployment_settings

    if args.corpus:
        path = _user_store(args.out, args.corpus, collection, embedder)
        return _EvalStore(
            path, f"your documents ({', '.join(map(str, args.corpus))}) in {path}", False
        )
    if args.corpus_size:
        path = _small_store(args.out, questions, args.corpus_size, args.seed, collection, embedder)
        description = (
            f"the questions' gold summaries plus {args.corpus_size} other bundled summaries "
            f"(seed {args.seed}) in {path}"
        )
        return _EvalStore(path, description, False)
    path = args.store or str(settings.pop("store_path", deployment_settings().store_path))
    return _EvalStore(path, f"the bundled corpus (10,033 Wikipedia summaries) in {path}", True)


def build_options(args: argparse.Namespace) -> Any:
    """The eval's options from the command line (loads the questions, builds a store)."""
    from crag.settings.deployment import deployment_settings
    from crag.vectorstore.corpus import load_corpus
    from crag_bench.bench_settings import given_settings
    from crag_bench.experiments import select_experiments
    from crag_bench.runner import EvalOptions

    _check_numbers(args)
    experiments = select_experiments(args.experiments)
    if args.corpus and not args.questions:
        raise ValueError(
            "--corpus needs --questions (FanOutQA and --dataset runs use the bundled corpus)"
        )
    settings = given_settings(args.set)
    operator = deployment_settings()
    collection = str(settings.pop("collection", operator.collection))
    embedder = str(settings.get("embedder", operator.embedder))
    questions, source = _load_questions(args)
    gold_texts = {doc.source: doc.text for doc in load_corpus()}
    args.out.mkdir(parents=True, exist_ok=True)
    store = _eval_store(args, questions, settings, collection, embedder)
    settings.pop("store_path", None)
    return EvalOptions(
        questions=questions,
        question_source=source,
        store_path=store.path,
        collection=collection,
        default_corpus=store.default_corpus,
        store_description=store.description,
        gold_texts={} if args.corpus else gold_texts,
        experiments=experiments,
        settings=settings,
        max_new_tokens=args.max_new_tokens,
        seed=args.seed,
        gold_removed_share=args.gold_removed_share,
        performance=not args.no_performance,
        ingestion_docs=args.ingestion_documents,
        workers=args.workers,
        latency_questions=args.latency_questions,
        gold_removal_curve=args.gold_removal_curve,
        record_prompts=args.record_prompts,
        prompts_only=args.prompts_only,
    )


def cmd_eval(args: argparse.Namespace) -> int:
    """Run ``crag-bench eval`` and write its report."""
    from crag_bench.eval_report import main_table, write_report
    from crag_bench.runner import run_eval
    from crag_bench.stopping import remove_partial_rows, write_partial_rows

    options = build_options(args)
    options.on_stop = functools.partial(write_partial_rows, args.out, what="crag-bench eval")
    logger.info(
        "crag-bench eval: %d questions (%s)", len(options.questions), options.question_source
    )
    results = run_eval(options)
    written = write_report(results, args.out)
    remove_partial_rows(args.out)
    if args.json:
        figures = {k: v for k, v in results.items() if k != "rows"}
        sys.stdout.write(json.dumps(figures, indent=2) + "\n")
    else:
        sys.stdout.write(main_table(results) + "\n\n")
        sys.stdout.write("".join(f"wrote {path}\n" for path in written))
    sys.stdout.flush()
    return 0
