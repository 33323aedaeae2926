"""Similar-pair analysis of RankEncoder (Seonwoo et al., ACL 2023), Section 5.4, Figure 5, Table 5.

STS-B pairs whose gold score, scaled to [0, 1], lies in [0.67, 1.0] (the `-similar` subset of
`load_sts_tasks`), scored by Spearman x 100 under the paper's four rows:

- E: the base encoder's cosine;
- RankEncoder_E: the base encoder's rank vectors alone (Eq. 2-3, lambda = 1);
- RankEncoder_E - retrain: a retrained student's cosine (Eq. 5);
- RankEncoder_E - retrain - inf: the student with the Eq. 7 blend, its rank vectors taken
  against anchors that the student itself encoded.

The base encoder with Eq. 7 is reported too (it is what the service does without retraining),
and every row also carries the full STS-B dev score for context.
"""

from collections.abc import Sequence
from typing import Any

from models.evaluation.senteval import StsTask
from models.evaluation.sts import PairScorer, Scoring, spearman_x100

SIMILAR_SUFFIX = "-similar"


# (row name in the paper, scoring) for the base encoder and for each retrained student.
BASE_ROWS = (
    ("E", Scoring.COSINE),
    ("RankEncoder_E", Scoring.RANK),
    ("E + Eq. 7", Scoring.BLEND),
)
STUDENT_ROWS = (
    ("RankEncoder_E - retrain", Scoring.COSINE),
    ("RankEncoder_E - retrain - inf", Scoring.BLEND),
)


def similar_pairs_rows(
    base: tuple[str, PairScorer],
    students: Sequence[tuple[str, PairScorer]],
    task: StsTask,
    similar: StsTask,
) -> list[dict[str, Any]]:
    """Table 5 rows for a base encoder and any students: Spearman x 100 on `similar` and `task`.

    `base` and each student are (label, scorer); the scorer returns every Scoring for a list of
    pairs (see `models.evaluation.sts.model_scorer`).
    """
    if not similar.name.endswith(SIMILAR_SUFFIX) or len(similar.pairs) < 2:
        raise ValueError(f"{similar.name}: expected a non-empty similar-pairs subset")
    rows = []
    for (label, scorer), row_specs in [(base, BASE_ROWS)] + [(s, STUDENT_ROWS) for s in students]:
        on_similar = scorer(similar.pairs)
        on_all = scorer(task.pairs)
        for row, scoring in row_specs:
            rows.append(
                {
                    "row": row,
                    "model": label,
                    "scoring": str(scoring),
                    "similar": spearman_x100(similar.gold, on_similar[scoring]),
                    "all": spearman_x100(task.gold, on_all[scoring]),
                    "pairs_similar": len(similar.pairs),
                    "pairs_all": len(task.pairs),
                }
            )
    return rows


def find_similar_task(tasks: Sequence[StsTask], name: str) -> tuple[StsTask, StsTask]:
    """The task called `name` and its `-similar` subset, from `load_sts_tasks`' output."""
    by_name = {task.name: task for task in tasks}
    if name not in by_name or name + SIMILAR_SUFFIX not in by_name:
        raise ValueError(f"{name} and {name}{SIMILAR_SUFFIX} are needed; found {sorted(by_name)}")
    return by_name[name], by_name[name + SIMILAR_SUFFIX]
