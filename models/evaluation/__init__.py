"""Evaluation following the papers: SentEval STS Spearman, and diagnostics."""
