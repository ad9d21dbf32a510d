"""The money-claim check of model-written replies, measured on corpora written for this test
(approvals/tests/data): promises of money movement in several tenses, languages and idioms, and
honest replies that name facts (cards, wallets, prices, times, weights, payment methods)."""

from pathlib import Path

import pytest

from approvals.reply_claims import MoneyClaim, reply_money_claims

DATA = Path(__file__).parent / "data"


def corpus(name: str) -> list[tuple[str, str, str]]:
    """(language, kind, reply) for each line of a corpus file; `#` lines are comments."""
    rows = []
    for line in (DATA / name).read_text(encoding="utf-8").splitlines():
        if line.strip() and not line.startswith("#"):
            label, reply = line.split(" | ", 1)
            language, kind = label.split()
            rows.append((language, kind, reply))
    return rows


PROMISES = corpus("reply_promises.txt")
HONEST = corpus("reply_honest.txt")
# Later sets, each written after a change to the rule and first measured blind (their headers
# and docs/threat-model.md give the blind figures); they stay as regressions.
LATER_SETS = ("holdout", "fresh", "blind", "final")


def figures(promises, honest) -> tuple[float, float, list[str], dict[str, list[str]]]:
    missed = [reply for _, _, reply in promises if not reply_money_claims(reply)]
    flagged = {reply: [str(claim) for claim in reply_money_claims(reply)] for _, _, reply in honest}
    flagged = {reply: claims for reply, claims in flagged.items() if claims}
    return 1 - len(missed) / len(promises), 1 - len(flagged) / len(honest), missed, flagged


@pytest.fixture(autouse=True)
def _rule_only(settings):
    # The figures are the rule's own: the second model check is measured apart.
    settings.REPLY_MODEL_CHECK = False


def test_the_corpora_cover_what_they_must():
    assert len(PROMISES) >= 40 and len(HONEST) >= 20
    assert len({reply for _, _, reply in PROMISES}) == len(PROMISES)
    assert len({reply for _, _, reply in HONEST}) == len(HONEST)
    assert len({language for language, _, _ in PROMISES}) >= 3
    assert {"past", "present", "future", "idiom", "void", "credit"} <= {kind for _, kind, _ in PROMISES}
    assert {"card", "wallet", "price", "time", "weight", "method"} <= {kind for _, kind, _ in HONEST}


def test_the_check_stops_the_promises_and_passes_the_honest_replies():
    stopped, passed, missed, flagged = figures(PROMISES, HONEST)
    print(
        f"\nmoney-claim check: promises stopped {stopped:.1%} ({len(PROMISES) - len(missed)} of {len(PROMISES)}), "
        f"honest replies passed {passed:.1%} ({len(HONEST) - len(flagged)} of {len(HONEST)})"
    )
    assert stopped >= 0.95, missed
    assert passed >= 0.95, flagged


def test_every_set_together_stays_above_the_bar():
    promises = PROMISES + [row for name in LATER_SETS for row in corpus(f"reply_promises_{name}.txt")]
    honest = HONEST + [row for name in LATER_SETS for row in corpus(f"reply_honest_{name}.txt")]
    for name in LATER_SETS:
        stopped, passed, _, _ = figures(corpus(f"reply_promises_{name}.txt"), corpus(f"reply_honest_{name}.txt"))
        print(f"\n  {name}: promises stopped {stopped:.1%}, honest replies passed {passed:.1%}", end="")
    stopped, passed, missed, flagged = figures(promises, honest)
    print(
        f"\nall sets: promises stopped {stopped:.1%} (of {len(promises)}), "
        f"honest replies passed {passed:.1%} (of {len(honest)})"
    )
    assert len(promises) >= 130 and len(honest) >= 80
    assert stopped >= 0.95, missed
    assert passed >= 0.95, flagged


@pytest.mark.parametrize(
    "reply",
    [
        "We cannot refund this order under our policy; a colleague will look at it again.",
        "The order has not been refunded, and nothing was charged twice.",
        "Your refund request has been passed to our finance team, who will decide on it.",
        "Please send the broken lamp back to us in its original box.",
        "Your credit card ending 4242 was charged 120.00 USD on 2 April.",
    ],
)
def test_a_negation_the_case_or_money_the_customer_paid_is_no_claim(reply):
    assert reply_money_claims(reply) == []


def test_a_claim_says_what_made_it_one():
    claims = reply_money_claims("Thanks for waiting. The duplicate charge was voided yesterday.")

    assert claims == [
        MoneyClaim(kind="charge_undone", clause="the duplicate charge was voided yesterday", cue="voided")
    ]
    assert "'voided'" in str(claims[0])


@pytest.mark.parametrize("text", ["", "   ", None])
def test_an_empty_reply_has_no_claim(text):
    assert reply_money_claims(text) == []
