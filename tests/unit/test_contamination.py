"""Training answers that recite an evaluation set are dropped, counted per set."""

from __future__ import annotations

from drafters.training.contamination import EvaluationIndex, drop_recitations
from evals.datasets.humaneval import problems
from evals.datasets.mt_bench import questions

HEX_KEY = next(p for p in problems() if "hex" in p.turns[0].lower() and "prime" in p.turns[0].lower())


def index() -> EvaluationIndex:
    return EvaluationIndex(
        {
            "mt_bench": [t for p in questions() for t in p.turns],
            "humaneval": [t for p in problems() for t in p.turns],
            "tiny": ["a short one of five words"],
        }
    )


def test_a_planted_recitation_is_dropped_and_counted_under_its_set():
    docstring = HEX_KEY.turns[0].split('"""')[1]
    recited = "Sure! Here is the function.\n" + " ".join(docstring.split()[10:30]) + "\nHope this helps."
    clean = "Sure! Here is a function that counts the vowels in a word, with a loop over its letters."
    result = drop_recitations([clean, recited, clean.upper(), "and " + recited.lower()], index())
    assert result.kept == [0, 2]
    assert result.dropped == {"mt_bench": 0, "humaneval": 2, "tiny": 0}


def test_a_run_one_word_short_of_the_limit_is_kept():
    words = HEX_KEY.turns[0].split('"""')[1].split()
    # seven words in a row from the docstring, then words of our own: no eight-word run in common
    assert drop_recitations([" ".join(words[10:17]) + " zebra quokka", " ".join(words[10:18])], index()).kept == [0]


def test_a_short_evaluation_text_counts_when_it_appears_whole():
    result = drop_recitations(["then a short one of five words appears", "a short one of five"], index())
    assert result.kept == [1] and result.dropped["tiny"] == 1


def test_a_run_shared_by_two_sets_is_named_by_the_first_set_given():
    text = "one two three four five six seven eight"
    both = EvaluationIndex({"first": [text], "second": [text]})
    assert both.recited("so: " + text) == "first" and both.sizes == {"first": 1, "second": 1}
