"""Negation (Main) of HEROS (Chiang et al., 2023, Section 2.2.6), by rule: negate the main verb.

An auxiliary, copula or modal gets "not" (can -> cannot); an already negated one loses its
"not" / "n't" and keeps the auxiliary, as HEROS does; a lexical verb in the past or
third-person present gets do-support ("went" -> "did not go"), with the verb's lemma from
LemmInflect (which HEROS also used). Questions are skipped (HEROS footnote 4), and so is every
sentence whose main verb the rules cannot find with confidence: a comma or a relative pronoun
before the first verb, "never", a reduced passive ("built by").

Without a parser these rules miss some sentences and misread a few; they are meant for a
diagnostic that averages hundreds of pairs, not for training data.
"""

import re
import string
from dataclasses import dataclass

from lemminflect import getAllInflections, getAllLemmas

BE = frozenset({"am", "is", "are", "was", "were"})
MODALS = frozenset({"can", "could", "will", "would", "shall", "should", "may", "might", "must"})
HAVE = {"has": "does", "have": "do", "had": "did"}  # main-verb have takes do-support
DO = frozenset({"do", "does", "did"})
NEGATED_AUXILIARIES = {
    "isn't": "is",
    "aren't": "are",
    "wasn't": "was",
    "weren't": "were",
    "can't": "can",
    "cannot": "can",
    "couldn't": "could",
    "won't": "will",
    "wouldn't": "would",
    "shan't": "shall",
    "shouldn't": "should",
    "mightn't": "might",
    "mustn't": "must",
    "hasn't": "has",
    "haven't": "have",
    "hadn't": "had",
    "don't": "do",
    "doesn't": "does",
    "didn't": "did",
}
# Pronouns that carry a contracted auxiliary: I'm, you're, it's, there's, we've, she'll, they'd.
CONTRACTION_HOSTS = frozenset(
    {"i", "you", "he", "she", "it", "we", "they", "there", "that", "what", "who", "here"}
)
CONTRACTED_AUX = re.compile(r"^(\w+)'(m|re|s|ve|ll|d)$")
PLURAL_SUBJECTS = frozenset({"i", "you", "we", "they"})
SINGULAR_PRONOUNS = frozenset(
    {"he", "she", "it", "this", "that", "one", "everyone", "someone", "nobody", "everybody"}
)


def word_set(words: str) -> frozenset[str]:
    return frozenset(words.split())


# A verb right after one of these is a noun, an infinitive or an adjective, not the main verb.
NOT_BEFORE_VERB = word_set(
    "a an the this these those his her its their our my your to of in on at for with from by "
    "about as into onto over under than and or but not no every each some any many much most "
    "such very more less"
)
# Have followed by one of these is an auxiliary even when no participle follows at once.
PERFECT_ADVERBS = word_set("already just also always recently long since only finally yet")
# A sentence opening with one of these (a subordinate clause or a prepositional phrase) has its
# main clause after the first comma.
INTRODUCERS = word_set(
    "when while if because although though since unless whereas after before once until "
    "whenever as in on at during by from with for under following despite upon throughout "
    "according between within over around"
)
# Met before the main verb, these open a relative or subordinate clause whose verb is not it.
CLAUSE_MARKERS = word_set("who which whom whose where when while if because although that")
NEGATIVE_WORDS = word_set("never no nothing none nobody neither nor")
PUNCTUATION = string.punctuation + "\u201c\u201d\u2018\u2019\u2014\u2013\u2026\u00ab\u00bb"


@dataclass
class Token:
    lead: str
    core: str
    trail: str

    @property
    def lower(self) -> str:
        return self.core.lower().replace("\u2019", "'")

    def render(self) -> str:
        return f"{self.lead}{self.core}{self.trail}"


def tokenise(sentence: str) -> list[Token]:
    """Whitespace tokens with their leading and trailing punctuation split off."""
    parts = []
    for raw in sentence.split():
        core = raw.strip(PUNCTUATION)
        lead = raw[: raw.index(core)] if core else raw
        parts.append(Token(lead, core, raw[len(lead) + len(core) :]))
    return parts


def join_tokens(tokens: list[Token]) -> str:
    return " ".join(token.render() for token in tokens if token.render())


def _match_case(word: str, like: str) -> str:
    return word[:1].upper() + word[1:] if like[:1].isupper() else word


def _verb_lemma(word: str, form: str) -> str | None:
    """The lemma whose `form` (VBD, VBZ, VBP) is `word`, per LemmInflect's lexicon."""
    for lemma in getAllLemmas(word, upos="VERB").get("VERB", ()):
        if word in getAllInflections(lemma, upos="VERB").get(form, ()):
            return lemma
    return None


def _is_participle(word: str) -> bool:
    """A past participle; LemmInflect lists VBN only where it differs from VBD ("built")."""
    for lemma in getAllLemmas(word, upos="VERB").get("VERB", ()):
        forms = getAllInflections(lemma, upos="VERB")
        if word in forms.get("VBN", ()) or word in forms.get("VBD", ()):
            return True
    return False


def _is_base_verb(word: str) -> bool:
    """A bare verb form: "did leave" has an auxiliary, "did his homework" a main verb."""
    return word in getAllLemmas(word, upos="VERB").get("VERB", ())


def _clause_start(tokens: list[Token]) -> int | None:
    """Index where the main clause starts; None when an introductory phrase has no comma.

    "However, ...", "In 1990, ...", "When the war ended, ..." all start after their first comma.
    """
    if tokens[0].trail.startswith(","):
        return 1
    if tokens[0].lower not in INTRODUCERS:
        return 0
    for i, token in enumerate(tokens):
        if token.trail.startswith(","):
            return i + 1
    return None


def _drop_not(tokens: list[Token], i: int) -> str:
    """Remove the "not" at index i, keeping any punctuation that followed it."""
    if tokens[i].trail:
        tokens[i - 1].trail += tokens[i].trail
    del tokens[i]
    return join_tokens(tokens)


def _negate_auxiliary(tokens: list[Token], i: int) -> str | None:
    word = tokens[i].lower
    following = tokens[i + 1].lower if i + 1 < len(tokens) else ""
    if following == "not":
        return _drop_not(tokens, i + 1)
    if NEGATIVE_WORDS.intersection(token.lower for token in tokens[i + 1 : i + 3]):
        return None  # "had been no agreement": one more "not" would make a double negative
    if word in HAVE and not (
        following in PERFECT_ADVERBS or following in {"been", "got"} or _is_participle(following)
    ):
        tokens[i].core = _match_case(f"{HAVE[word]} not have", tokens[i].core)
        return join_tokens(tokens)
    if word in DO and not _is_base_verb(following):
        tokens[i].core = _match_case(f"{word} not do", tokens[i].core)
        return join_tokens(tokens)
    tokens[i].core = (
        _match_case("cannot", tokens[i].core) if word == "can" else f"{tokens[i].core} not"
    )
    return join_tokens(tokens)


def _do_support(tokens: list[Token], i: int, start: int) -> str | None:
    """Negate a lexical finite verb at index i, or None when it does not look like one."""
    word = tokens[i].lower
    previous = tokens[i - 1]
    if i == start or previous.trail or previous.lower in NOT_BEFORE_VERB:
        return None
    if tokens[i].core[:1].isupper() or previous.lower.endswith("'s"):
        return None
    following = tokens[i + 1].lower if i + 1 < len(tokens) else ""
    if following == "by":
        return None  # "the church built by monks": a participle, not the main verb
    auxiliary, lemma = "did", _verb_lemma(word, "VBD")
    if lemma is None:
        auxiliary, lemma = "does", _verb_lemma(word, "VBZ")
        if lemma is not None and "NOUN" in getAllLemmas(word):
            lemma = lemma if previous.lower in SINGULAR_PRONOUNS else None
    if lemma is None and previous.lower in PLURAL_SUBJECTS:
        auxiliary, lemma = "do", _verb_lemma(word, "VBP")
    if lemma is None:
        return None
    tokens[i].core = f"{auxiliary} not {lemma}"
    return join_tokens(tokens)


def negate_main(sentence: str) -> str | None:
    """Negation (Main) of HEROS 2.2.6 by rule; None when the main verb is not found with confidence.

    Example: "The bridge was built in 1850." -> "The bridge was not built in 1850.";
    "He moved to Paris." -> "He did not move to Paris."; "I can't stay." -> "I can stay."
    """
    tokens = tokenise(sentence)
    if not tokens or sentence.rstrip().endswith("?"):
        return None
    start = _clause_start(tokens)
    if start is None:
        return None
    for i in range(start, len(tokens)):
        token = tokens[i]
        word = token.lower
        if word in NEGATED_AUXILIARIES:
            token.core = _match_case(NEGATED_AUXILIARIES[word], token.core)
            return join_tokens(tokens)
        if word in BE or word in MODALS or word in HAVE or word in DO:
            return _negate_auxiliary(tokens, i)
        contracted = CONTRACTED_AUX.match(word)
        if contracted and contracted.group(1) in CONTRACTION_HOSTS:
            if i + 1 < len(tokens) and tokens[i + 1].lower == "not":
                return _drop_not(tokens, i + 1)
            token.core = f"{token.core} not"
            return join_tokens(tokens)
        if word == "never" or (i > start and word in CLAUSE_MARKERS):
            return None
        negated = _do_support(tokens, i, start)
        if negated is not None:
            return negated
        if token.trail and token.trail[0] in ",;:":
            return None  # the subject ran past a comma: an apposition or a list we cannot parse
    return None
