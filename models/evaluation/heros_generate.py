"""Build HEROS-style Typo and Negation (Main) subsets from any file of sentences.

HEROS (Chiang et al., 2023) was written by hand from Reddit comments; its Typo and Negation (Main)
rules (Sections 2.2.5 and 2.2.6) are mechanical enough to apply to a user's own domain:

- Typo: one word gets one character deleted, substituted, or two adjacent different characters
  swapped (the He et al. 2021 recipe HEROS uses for words outside its misspelling list). The word
  and the edit are drawn from a generator seeded by (seed, sentence), so one sentence always gets
  the same typo whatever else is in the file.
- Negation (Main): the main verb negated by the rules of models/evaluation/negation.py.
"""

import random
from dataclasses import dataclass

from models.evaluation.heros import HerosData, Subset
from models.evaluation.negation import join_tokens, negate_main, tokenise, word_set

# HEROS 2.2.1 keeps sentences of more than 8 and fewer than 25 words.
MIN_WORDS = 9
MAX_WORDS = 24
LETTERS = "abcdefghijklmnopqrstuvwxyz"
TYPO_EDITS = ("deletion", "substitution", "swap")
STOP_WORDS = word_set(
    "the and that this with from have were been their there which about would could should "
    "these those other than them then they into only also over such some when what your"
)


def _typo_word(word: str, rng: random.Random) -> str:
    """One seeded edit of `word`: deletion, substitution, or an adjacent swap of unequal letters."""
    swappable = [p for p in range(len(word) - 1) if word[p].lower() != word[p + 1].lower()]
    edit = rng.choice(TYPO_EDITS if swappable else TYPO_EDITS[:2])
    if edit == "deletion":
        p = rng.randrange(len(word))
        return word[:p] + word[p + 1 :]
    if edit == "substitution":
        p = rng.randrange(len(word))
        letter = rng.choice([c for c in LETTERS if c != word[p].lower()])
        return word[:p] + (letter.upper() if word[p].isupper() else letter) + word[p + 1 :]
    p = rng.choice(swappable)
    return word[:p] + word[p + 1] + word[p] + word[p + 2 :]


def make_typo(sentence: str, seed: int) -> str | None:
    """The Typo variant: one lower-case content word of 4+ letters gets one character edit.

    None when the sentence has no such word. Deterministic in (seed, sentence).
    """
    rng = random.Random(f"{seed}\t{sentence}")
    tokens = tokenise(sentence)
    eligible = [
        i
        for i, token in enumerate(tokens)
        if token.core.isalpha()
        and token.core.islower()
        and len(token.core) >= 4
        and token.core not in STOP_WORDS
    ]
    if not eligible:
        return None
    i = rng.choice(eligible)
    tokens[i].core = _typo_word(tokens[i].core, rng)
    return join_tokens(tokens)


@dataclass(frozen=True)
class GenerationStats:
    read: int  # non-empty lines in the input
    eligible: int  # within the word-count window and not a question
    kept: int
    no_negation: int  # eligible sentences whose main verb the rules could not negate
    no_typo: int

    def to_dict(self) -> dict[str, int]:
        return dict(self.__dict__)


def generate_heros(
    sentences: list[str],
    *,
    limit: int = 1000,
    seed: int = 0,
    min_words: int = MIN_WORDS,
    max_words: int = MAX_WORDS,
) -> tuple[HerosData, GenerationStats]:
    """Typo and Negation (Main) minimal pairs for up to `limit` sentences, drawn in seeded order.

    A sentence is kept only when both variants can be built, so both subsets share originals.
    """
    cleaned = [" ".join(sentence.split()) for sentence in sentences if sentence.strip()]
    eligible = [
        text
        for text in dict.fromkeys(cleaned)
        if min_words <= len(text.split()) <= max_words and not text.endswith("?")
    ]
    order = list(eligible)
    random.Random(seed).shuffle(order)
    originals: list[str] = []
    typos: list[str | None] = []
    negations: list[str | None] = []
    no_negation = no_typo = 0
    for text in order:
        if len(originals) >= limit:
            break
        negated = negate_main(text)
        typo = make_typo(text, seed)
        no_negation += negated is None
        no_typo += typo is None
        if negated is None or typo is None:
            continue
        originals.append(text)
        typos.append(typo)
        negations.append(negated)
    data = HerosData(
        originals=originals, variants={Subset.TYPO: typos, Subset.NEGATION_MAIN: negations}
    )
    stats = GenerationStats(
        read=len(cleaned),
        eligible=len(eligible),
        kept=len(originals),
        no_negation=no_negation,
        no_typo=no_typo,
    )
    return data, stats
