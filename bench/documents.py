"""Retraining on the user's documents: does a student trained on a captions corpus beat one
trained on general text, on captions?

The "documents" are the sentences of SICK train (image and video captions), as a user's corpus
would hold them. Two students of the same parent, same method, teachers, recipe and budget:
one trains on the documents mixed with general text the way a retrain job with
`"text": "documents"` does (worker/training_text.py), the other on the general clean text alone
(Wikipedia + SNLI). Both are scored on SICK trial (the captions dev set) and STS-B dev, and the
documents student's SICK-trial advantage gets the gate's paired bootstrap interval.

    python -m bench.documents [--method M] [--teacher DIR ...] [--recipe quick|full]
        [--config FILE] [--share 0.5] [--out var/bench-documents]
"""

import argparse
import time
from pathlib import Path

from core.loading import settings_dev_setup, settings_encoder
from core.settings import DATA_DIR, get_settings
from models.evaluation.bootstrap import TaskScores, paired_bootstrap
from models.evaluation.sts import Scoring
from models.training.config import Recipe, TrainConfig
from models.training.data import read_text_file
from models.training.dev_eval import dev_metrics, dev_predictions
from models.training.methods import Method, method_config
from models.training.trainer import train
from worker.training_text import TextSource, training_text

SICK_TRAIN = DATA_DIR / "senteval" / "SICK" / "SICK_train.txt"
CAPTIONS = "SICKRelatedness-trial"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--method", type=Method, default=Method.SIMCSE)
    parser.add_argument("--teacher", type=Path, action="append", default=[])
    parser.add_argument("--recipe", type=Recipe, default=Recipe.QUICK)
    parser.add_argument("--config", type=Path, help="JSON or TOML overrides of the recipe")
    parser.add_argument("--share", type=float, default=0.5, help="documents' share of the text")
    parser.add_argument("--out", type=Path, default=Path("var/bench-documents"))
    args = parser.parse_args()

    settings = get_settings()
    config = method_config(args.method, args.recipe)
    if args.config:
        config = TrainConfig.from_file(args.config, base=config)
    dev = settings_dev_setup(settings, config.eval_anchor_count)
    general = settings.training_files(supervised=False)
    documents = training_text(
        TextSource.DOCUMENTS,
        general_files=general,
        documents=read_text_file(SICK_TRAIN),
        revision=0,
        share=args.share,
        seed=config.seed,
        out_dir=args.out / "text",
    )
    print(f"documents text: {documents.record}", flush=True)
    students = {}
    for name, files in (("documents", documents.files), ("general", general)):
        started = time.perf_counter()
        result = train(
            args.method,
            settings.model_path,
            list(args.teacher),
            files,
            args.out / name,
            config,
            cache_dir=settings.cache_dir,
            dev=dev,
            progress=True,
        )
        students[name] = result
        print(f"{name}: {result.steps} steps in {time.perf_counter() - started:.0f} s", flush=True)

    predictions = {
        name: dev_predictions(settings_encoder(settings, result.out_dir), dev)
        for name, result in students.items()
    }
    base = students["general"].metadata["dev_metrics"]["base"]
    print(f"\n{'model':<10} {'STS-B dev Eq.7':>15} {'SICK trial Eq.7':>16}")
    base_row = (base["blend"]["STSBenchmark-dev"], base["blend"][CAPTIONS])
    print(f"{'base':<10} {base_row[0]:>15.2f} {base_row[1]:>16.2f}")
    for name, scored in predictions.items():
        blend = dev_metrics(scored)[str(Scoring.BLEND)]
        print(f"{name:<10} {blend['STSBenchmark-dev']:>15.2f} {blend[CAPTIONS]:>16.2f}")
    sick = {name: next(p for p in got if p.task == CAPTIONS) for name, got in predictions.items()}
    interval = paired_bootstrap(
        [
            TaskScores(
                sick["documents"].gold,
                sick["general"].scores[Scoring.BLEND],
                sick["documents"].scores[Scoring.BLEND],
            )
        ]
    )
    print(
        f"\nSICK trial, documents minus general: {interval.difference:+.2f} "
        f"(95% interval {interval.low:+.2f} .. {interval.high:+.2f}, {interval.samples} resamples)"
    )


if __name__ == "__main__":
    main()
