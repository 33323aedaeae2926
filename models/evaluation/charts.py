"""PNG charts of the diagnostics, drawn with matplotlib's Agg backend (no display needed).

Kept apart from the metric modules so that computing a number never imports a plotting stack.
"""

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt
import numpy as np

from models.evaluation.heros import DISPLAY_ORDER, HerosResult
from models.evaluation.sts import Scoring

SCORING_TITLES = {
    Scoring.COSINE: "cosine",
    Scoring.RANK: "rank vectors only (Eq. 2-3)",
    Scoring.BLEND: "Eq. 7 blend",
}
DPI = 110


def _save(figure: plt.Figure, path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=DPI, bbox_inches="tight")
    plt.close(figure)
    return path


def heros_chart(
    results: Sequence[HerosResult],
    path: Path,
    *,
    scorings: Sequence[Scoring] = (Scoring.COSINE, Scoring.BLEND),
    title: str = "",
) -> Path:
    """HEROS Figures 1-2 as grouped bars: one panel per scoring, one group per subset, one bar
    per model; the height is the mean normalised similarity (Appendix D)."""
    if not results:
        raise ValueError("no HEROS results to draw")
    subsets = [s for s in DISPLAY_ORDER if all(s in r.pairs for r in results)]
    figure, axes = plt.subplots(
        1,
        len(scorings),
        figsize=(4.2 * len(scorings) + 1.2, 4.6),
        sharey=True,
        squeeze=False,
        layout="constrained",
    )
    width = 0.8 / len(results)
    rotation = 90 if len(results) > 2 else 0
    positions = np.arange(len(subsets))
    colours = plt.get_cmap("tab10").colors
    for axis, scoring in zip(axes[0], scorings, strict=True):
        for k, result in enumerate(results):
            values = [result.mean_normalised[scoring][s] for s in subsets]
            bars = axis.bar(
                positions + (k - (len(results) - 1) / 2) * width,
                values,
                width,
                label=result.model,
                color=colours[k % len(colours)],
            )
            # Side-by-side labels collide from three models on; stand them upright instead.
            axis.bar_label(bars, fmt="%.2f", fontsize=7, padding=1, rotation=rotation)
        lambda_note = f" (λ={results[0].lambda_inf:g})" if scoring is Scoring.BLEND else ""
        axis.set_title(SCORING_TITLES[scoring] + lambda_note)
        axis.set_xticks(positions, [s.value.replace(" ", "\n") for s in subsets], fontsize=8)
        axis.axhline(0.0, color="black", linewidth=0.6)
        axis.grid(axis="y", alpha=0.3)
    axes[0][0].set_ylabel("mean normalised similarity\n(cos − cos_avg) / (1 − cos_avg)")
    handles, labels = axes[0][0].get_legend_handles_labels()
    figure.legend(
        handles, labels, loc="outside lower center", ncol=len(results), fontsize=8, frameon=False
    )
    lows = [min(r.mean_normalised[s][sub] for s in scorings for sub in subsets) for r in results]
    axes[0][0].set_ylim(min(0.0, min(lows) - 0.05), 1.12 if rotation else 1.05)
    first = results[0]
    subtitle = (
        f"{first.originals} originals, baseline over {first.baseline_half}×{first.baseline_half}"
        " pairs of originals"
    )
    figure.suptitle(f"{title}\n{subtitle}" if title else subtitle, fontsize=10)
    return _save(figure, path)


def similar_pairs_chart(rows: Sequence[dict[str, Any]], path: Path, *, title: str = "") -> Path:
    """RankEncoder Figure 5: Spearman x 100 on the similar STS-B pairs, one bar per row."""
    labels = [f"{row['row']}\n{row['model']}" for row in rows]
    values = [row["similar"] for row in rows]
    figure, axis = plt.subplots(figsize=(1.6 * len(rows) + 1.5, 3.8))
    bars = axis.bar(np.arange(len(rows)), values, color=plt.get_cmap("tab10").colors[: len(rows)])
    axis.bar_label(bars, fmt="%.2f", fontsize=8, padding=1)
    axis.set_xticks(np.arange(len(rows)), labels, fontsize=7)
    axis.set_ylabel("Spearman × 100")
    low, high = min(values), max(values)
    axis.set_ylim(max(0.0, low - 5.0), high + 3.0)
    axis.grid(axis="y", alpha=0.3)
    axis.set_title(title or "STS-B pairs with normalised gold in [0.67, 1.0]", fontsize=10)
    return _save(figure, path)


def geometry_chart(results: Sequence[dict[str, Any]], path: Path, *, title: str = "") -> Path:
    """RankCSE Figure 4 style: alignment (x) against uniformity (y); lower-left is better."""
    figure, axis = plt.subplots(figsize=(5.2, 4.2))
    colours = plt.get_cmap("tab10").colors
    for k, result in enumerate(results):
        for space, marker in (("embeddings", "o"), ("rank_vectors", "^")):
            point = result[space]
            axis.scatter(
                point["alignment"],
                point["uniformity"],
                marker=marker,
                s=60,
                color=colours[k % len(colours)],
                label=f"{result['model']}: {space.replace('_', ' ')}",
            )
    axis.set_xlabel("alignment  ℓ_align (lower is better)")
    axis.set_ylabel("uniformity  ℓ_uniform (lower is better)")
    axis.grid(alpha=0.3)
    axis.legend(fontsize=7)
    axis.set_title(title or "STS-B dev: positives = gold ≥ 4.0", fontsize=10)
    return _save(figure, path)
