from collections import Counter
from pathlib import Path

import pytest

from models.evaluation.heros import Subset, read_heros, write_heros
from models.evaluation.heros_generate import generate_heros, make_typo
from models.evaluation.negation import negate_main


@pytest.mark.parametrize(
    ("sentence", "negated"),
    [
        # auxiliaries, copulas and modals take "not"; can becomes cannot
        ("The bridge was built in 1850.", "The bridge was not built in 1850."),
        ("You can see the mountains from here.", "You cannot see the mountains from here."),
        ("The museum will reopen next spring.", "The museum will not reopen next spring."),
        ("He has finished the report.", "He has not finished the report."),
        ("It's a beautiful day.", "It's not a beautiful day."),
        # an already negated main verb loses its negation and keeps the auxiliary (HEROS 2.2.6)
        ("I can't stay here.", "I can stay here."),
        ("I don't know what to do.", "I do know what to do."),
        ("Tom won't sign the contract.", "Tom will sign the contract."),
        ("The shop is not open today.", "The shop is open today."),
        # do-support for lexical verbs, with the lemma
        ("He moved to Paris in 1920.", "He did not move to Paris in 1920."),
        ("The team won the championship.", "The team did not win the championship."),
        ("She plays the violin.", "She does not play the violin."),
        ("We live near the river.", "We do not live near the river."),
        (
            "She has a large collection of stamps.",
            "She does not have a large collection of stamps.",
        ),
        ("They had to leave early.", "They did not have to leave early."),
        ("He did his homework.", "He did not do his homework."),
        # the main clause follows an introductory phrase's comma
        (
            "In 1990, the company expanded into Europe.",
            "In 1990, the company did not expand into Europe.",
        ),
        ("When the war ended, he returned home.", "When the war ended, he did not return home."),
    ],
)
def test_negation_main_rules(sentence: str, negated: str) -> None:
    assert negate_main(sentence) == negated


@pytest.mark.parametrize(
    "sentence",
    [
        "Did you see that?",  # a question (HEROS footnote 4)
        "The man who was arrested later died in prison.",  # relative clause before the verb
        "He never returned to England.",  # "never" would need rewording, not a "not"
        "The church built by monks stands on the hill.",  # reduced passive
        "The church, built in 1400, stands on the hill.",  # apposition before the verb
        "When the war ended he returned.",  # subordinate clause without its comma
        "There had been no agreement at all.",  # one more "not" makes a double negative
    ],
)
def test_negation_skips_sentences_it_cannot_parse(sentence: str) -> None:
    assert negate_main(sentence) is None


def edit_kind(word: str, typo: str) -> str | None:
    """Which single edit turns `word` into `typo`, if any."""
    if len(typo) == len(word) - 1:
        return (
            "deletion" if any(word[:p] + word[p + 1 :] == typo for p in range(len(word))) else None
        )
    if len(typo) != len(word):
        return None
    diff = [p for p in range(len(word)) if word[p] != typo[p]]
    if len(diff) == 1:
        return "substitution"
    if len(diff) == 2 and diff[1] == diff[0] + 1 and Counter(word) == Counter(typo):
        return "swap" if word[diff[0]] == typo[diff[1]] else None
    return None


def test_typo_is_one_seeded_edit_of_one_content_word() -> None:
    sentence = "The orchestra performed several symphonies during the summer festival."
    kinds = Counter()
    for seed in range(60):
        typo = make_typo(sentence, seed)
        assert typo == make_typo(sentence, seed)  # deterministic in (seed, sentence)
        changed = [(a, b) for a, b in zip(sentence.split(), typo.split(), strict=True) if a != b]
        assert len(changed) == 1
        word, edited = (part.strip(".") for part in changed[0])
        assert word.islower() and len(word) >= 4 and word != "the"
        kind = edit_kind(word, edited)
        assert kind is not None, (word, edited)
        kinds[kind] += 1
    assert set(kinds) == {"deletion", "substitution", "swap"}


def test_typo_needs_a_content_word() -> None:
    assert make_typo("I am a cat.", 0) is None


def test_generate_keeps_only_sentences_with_both_variants(tmp_path: Path) -> None:
    sentences = [
        "The old mill was converted into a museum in 1985.",
        "Did the committee approve the new budget last year?",  # question
        "Too short to use.",  # under nine words
        "The man who was arrested later died in prison last year.",  # not negatable
        "The village hosted a large music festival every summer for decades.",
        "The old mill was converted into a museum in 1985.",  # duplicate
    ]
    data, stats = generate_heros(sentences, seed=3)
    assert (stats.read, stats.eligible, stats.kept, stats.no_negation) == (6, 3, 2, 1)
    assert sorted(data.originals) == sorted([sentences[0], sentences[4]])
    assert set(data.subsets) == {Subset.TYPO, Subset.NEGATION_MAIN}
    again, _ = generate_heros(sentences, seed=3)
    assert again == data
    limited, limited_stats = generate_heros(sentences, seed=3, limit=1)
    assert limited_stats.kept == 1 and len(limited.originals) == 1

    path = tmp_path / "generated.tsv"
    write_heros(path, data)
    assert read_heros(path) == data
    first_row = path.read_text().splitlines()[1].split("\t")
    assert first_row[1] == first_row[2] == first_row[4] == first_row[6] == ""
