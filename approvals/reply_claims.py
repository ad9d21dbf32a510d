"""Does a model-written reply speak of money moving to the customer?

The structural rule (docs/architecture.md, "The customer reply"): every sentence about money
moving (refunded, credited, paid back, voided, on its way, in any tense or language) comes
from the product's own outcome-bound templates (`refundagent/replies.py`), which follow the
ticket's outcome. The part of a reply a model writes may not speak of money movement at all:
`reply_money_claims` finds where it does, and the gate escalates such a draft.

It is a classifier over the meaning of a clause, not a list of promises. A clause speaks of money
movement when, not negated, it has
- a verb that means money goes to the customer in any of its forms (refunded, reimburse,
  credited, paid back, topped up, erstattet, reembolsaremos, rimborsato, teruggestort...);
- a verb of sending, returning, arriving or processing next to a money word (money, refund,
  funds, credit, an amount with its currency...): "the funds are on their way back";
- a verb that undoes a charge next to a charge word: "we voided the charge", "l'addebito è
  stato annullato";
- a refund named with an amount: "a refund of 45 euros".
Facts stay out of it on purpose: an amount alone (a price), a card, a wallet, a time or a weight
is no claim, nor is money the customer paid us ("you paid with Apple Pay", "we received your
payment"), nor a negation ("we cannot refund this order"). "Refund request" and its kin are
how a reply names the case without promising anything: they are masked first.

English, Spanish, French, German, Portuguese, Italian and Dutch. Deterministic, so that a policy
replay decides as the gate did. A second, independent model check may add a claim the rule
missed (refundagent.agent.reply_check, where REPLY_MODEL_CHECK is on): it runs in the agent's
decision, beside the other model calls, and reaches the gate as a fact of the proposal.
"""

import re
import unicodedata
from dataclasses import dataclass


@dataclass(frozen=True)
class MoneyClaim:
    """One place where a reply speaks of money moving: which test found it, the clause (as
    normalised) and the word that made it a claim."""

    kind: str  # "money_verb", "money_moves", "charge_undone", "refund_amount", "model"
    clause: str
    cue: str

    def __str__(self) -> str:
        # Short: it becomes the ticket's stop reason, and the draft itself is on the RefundDraft.
        clause = self.clause if len(self.clause) <= 80 else self.clause[:77] + "..."
        return f"{self.cue!r} in {clause!r}"


# --- normalising ---------------------------------------------------------------------------


def _normalise(text: str) -> str:
    text = unicodedata.normalize("NFKD", text)
    text = "".join(char for char in text if not unicodedata.combining(char))
    return text.replace("ß", "ss").replace("’", "'").replace("‘", "'").lower()


# How a reply names the case without promising anything: masked before the check.
_CASE_WORDS = re.compile(
    r"\b(?:refund|reimbursement|return)\s+(?:request|claim|application|case|ticket|inquiry|enquiry|query|"
    r"window|policy|policies|rules?|terms|process|team|department|desk|form)s?\b"
    r"|\brequest(?:s|ed|ing)?\s+(?:for\s+)?(?:a\s+|the\s+|your\s+)?refund\b"
    r"|\b(?:eligible|eligibility)\s+for\s+(?:a\s+|any\s+)?(?:further\s+)?refund\b"
    r"|\bget(?:ting)?\s+back\s+to\s+you\b|\bwrite\s+back\b|\bcall\s+(?:you\s+)?back\b"
    r"|\b(?:solicitud|peticion|reclamacion|pedido|solicitacao)\s+de\s+(?:reembolso|devolucion|estorno)\b"
    r"|\b(?:demande|requete|reclamation)\s+de\s+remboursement\b"
    r"|\b(?:richiesta|pratica)\s+di\s+rimborso\b"
    r"|\b(?:ruck)?erstattungs(?:antrag|anfrage|anliegen)\w*\b"
    r"|\b(?:antrag|anfrage)\s+auf\s+(?:eine\s+)?(?:ruck)?erstattung\b"
    r"|\bterugbetalingsverzoek\w*\b|\bverzoek\s+om\s+terugbetaling\b"
)

# An amount: a currency symbol, code or word with a number (digits or written out), or digits
# with two decimals that are not a measure ("2.35 kg", "17.30 uur"). Becomes the token `amountx`.
_CURRENCY_CODES = r"usd|eur|gbp|cad|aud|jpy|chf|sek|nok|dkk|brl|mxn|nzd|pln|czk|inr|cny|hkd|sgd|zar"
_CURRENCY_WORDS = (
    r"dollars?|bucks|cents?|euros?|pounds? sterling|quid|pence|francs?|franken|yen|kronor|kroner|"
    r"dolares|libras?|centimos?|centavos?|reais|pesos?|livres?|dollari|sterline|centesimi|rupees?|"
    r"pounds?"
)
_NUMBER = (
    r"\d[\d.,]*|one|two|three|four|five|six|seven|eight|nine|ten|twenty|thirty|forty|fifty|sixty|seventy|"
    r"eighty|ninety|hundred|thousand|uno|dos|tres|cinco|diez|veinte|cincuenta|cien|ciento|mil|cem|cento|"
    r"deux|trois|cinq|dix|vingt|trente|cinquante|cent|zwei|drei|funf|zehn|zwanzig|funfzig|hundert|"
    r"tausend|due|dieci|venti|cinquanta|twee|drie|vijf|tien|twintig|vijftig|honderd"
)
_UNITS = r"kg|g|gr|grams?|lbs?|oz|cm|mm|m|km|l|ml|h|hrs?|hours?|uur|uhr|heures?|horas?|ore|%"
# "From 9.00 to 17.00": a time of day, not an amount (one fixed-width lookbehind per word).
_NOT_AFTER_A_TIME_WORD = "".join(
    f"(?<!{word} )"
    for word in ("from", "between", "until", "till", "at", "to", "von", "bis", "dalle", "alle", "van", "tot", "entre")
)
_AMOUNT = re.compile(
    rf"(?:[$€£¥₹]|r\$)\s?\d[\d.,]*|\d[\d.,]*\s?[$€£¥₹]"
    rf"|\b(?:{_CURRENCY_CODES})\s?\d[\d.,]*\b|\b\d[\d.,]*\s?(?:{_CURRENCY_CODES})\b"
    rf"|\b(?:(?:{_NUMBER})[\s-]+(?:and\s+|y\s+|e\s+|et\s+|und\s+|en\s+)?)+(?:{_CURRENCY_WORDS})\b"
    rf"|(?<![\d.,:]){_NOT_AFTER_A_TIME_WORD}\d{{1,6}}[.,]\d{{2}}(?!\d|[.,:]\d)(?!\s?(?:{_UNITS})\b)"
)

_SENTENCE_SPLIT = re.compile(r"(?<!\d)[.!?;]+|[.!?;]+(?!\d)|\n")
# Clauses: a sentence, or the parts of one joined by a comma or a conjunction.
_CLAUSE_SPLIT = re.compile(
    r"(?<!\d)[.!?;:]+|[.!?;:]+(?!\d)|\n|,\s|\s[-–—]\s"
    r"|\s(?:and|but|so|while|y|pero|et|mais|und|aber|ma|maar)\s"
)


def _words(clause: str) -> list[str]:
    clause = re.sub(r"(\w)n't\b", r"\1nt", clause)  # don't -> dont: one negation word
    return re.findall(r"[a-z0-9]+", clause.replace("'", " "))


# --- the vocabulary of money moving -------------------------------------------------------

# Verb forms that by themselves mean money goes to the customer (their nouns are not here:
# "refund", "reembolso", "remboursement", "rimborso" name the case, not a movement).
_MONEY_VERB = re.compile(
    r"^(?:refunded|refunding|reimburs(?:e|es|ed|ing)|repaid|repay(?:s|ing)?|credited|crediting|"
    r"compensat(?:e|es|ed|ing)|topped|topping|"
    r"reembols(?!os?$)[a-z]+|abon(?:ad[oa]s?|amos|aremos|ara|aran|ar|are|e|o|a)|acredit(?:ad[oa]s?|amos|aremos|ar|ara)|"
    r"reintegr(?:ad[oa]s?|amos|aremos|ar|ara)|"
    r"rembours(?:e|es|ee|ees|er|era|erai|erons|erez|ons|ez|ait)|credit(?:e|ee|es|ees|er|era|erons)|"
    r"erstatt(?:et|en|e|ete|eten)|zuruckerstatt[a-z]*|ruckerstatt(?:et|en)|zuruckgezahlt|zuruckzahlen|"
    r"zuruckuberwiesen|zuruckuberweisen|gutgeschrieben|gutschreiben|ausgezahlt|ausbezahlt|"
    r"estorn(?:ad[oa]s?|amos|aremos|ar|ara|ei|ou)|creditad[oa]s?|creditamos|creditaremos|"
    r"rimbors(?!o$|i$)[a-z]+|riaccredit[a-z]+|accredit(?:at[oaie]|eremo|iamo|are)|"
    r"terugbetaald|terugbetalen|teruggestort|terugstorten|gestorneerd|vergoed|vergoeden|gecrediteerd)$"
)
# A base form that is a promise after a subject or an auxiliary: "we will refund you".
_MONEY_BASE = {"refund", "credit"}
_SUBJECT_OR_AUX = {"we", "i", "will", "ll", "shall", "would", "can", "could", "to", "gonna", "may", "might"}
_PAY_OUT = {"back", "out", "you"}  # "pay you back", "paid out": paying the customer
_PAY = {"pay", "pays", "paid", "paying"}
_GO = {"go", "goes", "going", "went", "gone", "push", "pushed", "pushing", "put", "get", "gets", "got"}
_PHRASES = re.compile(
    r"\bmade? you whole\b|\bmake you whole\b|\bmaking you whole\b|\btop(?:ped|ping)? up\b"
    r"|\bevery (?:penny|cent)\b|\bin your pocket\b"
)

# Verbs that move money when money is what they speak of: sending, returning, arriving,
# processing, adding. "Receive", "get" and the like only with the customer receiving.
_MOVE_VERB = re.compile(
    r"^(?:send|sends|sent|sending|return|returns|returned|returning|transferred|transferring|wire|wired|wiring|"
    r"deposit|deposited|depositing|issue|issued|issuing|process|processed|processing|release|released|releasing|"
    r"initiated|completed|complete|done|back|coming|heading|way|post|follow|follows|arrive|arrives|"
    r"arriving|arrived|land|lands|landing|left|added|add|adding|adds|loaded|load|loading|put|putting|restored|"
    r"approved|applied|expect|returning|reach|reaches|reached|reaching|hits?|"
    # arriving, in the languages below: llegara, chegara, arrivera, arriveranno, ankommen...
    r"lleg(?:a|ara|aran|o|ado|ada|ue)|cheg(?:a|ara|arao|ou|ado|ada)|arriv(?:e|era|eront|ee|ees|eranno|ato|ata)|"
    r"ankommen|eingehen|eingegangen|aankomen|komt|procede|procedons|reverse[es]?|reverserons|"
    # Spanish / Portuguese
    r"devuelt[oa]s?|devolvemos|devolveremos|devolvera|devolver|devolvid[oa]s?|enviad[oa]s?|enviamos|enviaremos|"
    r"transferid[oa]s?|transferimos|realizara|realizado|realizamos|procesad[oa]s?|processad[oa]s?|"
    r"recargad[oa]s?|recargamos|recarregad[oa]s?|camino|caminho|ingresad[oa]s?|depositad[oa]s?|"
    r"aprobad[oa]s?|aprovad[oa]s?|feito|hecho|emitid[oa]s?|"
    # French
    r"verse[es]?|verserons|vire[es]?|envoye[es]?|enverrons|restitue[es]?|effectue[es]?|cours|route|chemin|"
    r"rendu[es]?|approuve[es]?|traite[es]?|emis[es]?|"
    # German
    r"uberwiesen|uberweisen|zuruck|veranlasst|angewiesen|unterwegs|weg|gesendet|geschickt|aufgestockt|"
    r"bearbeitet|freigegeben|genehmigt|"
    # Italian
    r"restituit[oaie]|restituiremo|inviat[oaie]|invieremo|indietro|arrivo|bonificat[oaie]|versat[oaie]|"
    r"effettuat[oaie]|elaborat[oaie]|approvat[oaie]|emess[oaie]|"
    # Dutch
    r"terug|gestort|overgemaakt|onderweg)$"
)
_RECEIVE_VERB = re.compile(
    r"^(?:receive|receives|receiving|received|get|gets|getting|got|see|recibiras|recibira|recibe|recibir|"
    r"recevrez|recevoir|recevra|erhalten|bekommen|bekommst|recebera|receber|recebe|riceverai|riceverete|"
    r"ricevera|ricevere|krijgt|krijg|ontvangt|ontvangen)$"
)
_FIRST_PERSON = {"we", "i", "our", "nosotros", "hemos", "nous", "wir", "nos", "noi", "abbiamo", "wij"}
_TOWARD_US = {"us", "me", "nos", "nous", "uns", "ci", "ons"}

_MONEY_WORDS = {
    "amountx", "money", "cash", "funds", "price", "precio", "prix", "preis", "preco", "prezzo", "prijs", "refund", "refunds", "reimbursement", "repayment", "amount", "sum",
    "payment", "credit", "balance", "difference", "penny", "pennies", "cheque", "voucher", "payout", "value",
    "dinero", "importe", "reembolso", "reembolsos", "cantidad", "saldo", "abono", "monto", "pago", "credito",
    "argent", "montant", "remboursement", "somme", "paiement", "avoir", "fonds", "virement",
    "geld", "betrag", "erstattung", "ruckerstattung", "ruckzahlung", "summe", "zahlung", "guthaben", "gutschrift",
    "dinheiro", "valor", "estorno", "quantia", "pagamento",
    "soldi", "denaro", "importo", "rimborso", "somma",
    "bedrag", "terugbetaling", "betaling", "tegoed",
}  # fmt: skip
# What a customer is charged: undone by the verbs below, it is money going back.
_CHARGE_WORDS = {
    "charge", "charges", "hold", "authorisation", "authorization", "debit", "transaction", "payment",
    "cargo", "cobro", "prelevement", "belastung", "abbuchung", "lastschrift", "cobranca", "addebito",
    "afschrijving", "transaccion", "transacao", "transazione",
}  # fmt: skip
# Stems, so every tense counts: cancel, cancelled, cancelamos, annule, annullato, storniert...
_UNDO_VERB = re.compile(
    r"^(?:void[a-z]*|revers[a-z]*|cancel[a-z]*|wiped|removed|lifted|released|dropped|gone|undone|"
    r"disappear[a-z]*|anul[a-z]*|annul[a-z]*|revert[a-z]*|storn[a-z]*|aufgehoben|zuruckgebucht|ruckgangig|"
    r"estorn[a-z]*|geannuleerd|teruggeboekt|teruggedraaid|terugdraaien)$"
)
_REFUND_NOUNS = {
    "refund", "refunds", "reimbursement", "credit", "reembolso", "remboursement", "erstattung", "ruckerstattung",
    "estorno", "rimborso", "terugbetaling", "avoir", "gutschrift",
}  # fmt: skip
_NEGATIONS = {
    "not", "no", "never", "cannot", "cant", "wont", "dont", "didnt", "isnt", "hasnt", "havent", "arent",
    "wasnt", "werent", "unable", "neither", "nor", "ne", "pas", "jamais", "nicht", "kein", "keine", "keinen",
    "nie", "nao", "non", "nunca", "niet", "geen", "nooit",
}  # fmt: skip
_WINDOW = 6
# "Your refund would be at most 49.00, if finance agrees": what a person may decide, not a promise.
_CONDITIONAL = {"if", "would", "could", "might", "si", "wenn", "falls", "se", "als", "indien"}


def _negated(words: list[str], index: int) -> bool:
    return any(word in _NEGATIONS for word in words[max(0, index - 3) : index])


def _near(words: list[str], index: int, vocabulary: set[str]) -> str | None:
    return next((word for word in words[max(0, index - _WINDOW) : index + _WINDOW + 1] if word in vocabulary), None)


# German builds money nouns by compounding: Kaufpreis, Restbetrag, Erstattungsbetrag.
_GERMAN_MONEY_ENDINGS = ("preis", "betrag", "geld", "summe", "zahlung", "guthaben", "erstattung")


def _is_money(word: str) -> bool:
    return word in _MONEY_WORDS or (len(word) > 7 and word.endswith(_GERMAN_MONEY_ENDINGS))


def _destination_after(words: list[str], index: int) -> str | None:
    """The customer's own place for money ("your card", "Ihrem Konto") just after `index`."""
    for position in range(index + 1, min(len(words) - 1, index + _WINDOW)):
        if words[position] in _POSSESSIVES and _DESTINATIONS.match(words[position + 1]):
            return f"{words[position]} {words[position + 1]}"
    return None


def _money_near(words: list[str], index: int) -> str | None:
    """A money word near `index`, other than "credit card" (a card, not credit) and "you paid"
    counting as money ("what you paid is coming back")."""
    low, high = max(0, index - _WINDOW), min(len(words), index + _WINDOW + 1)
    for position in range(low, high):
        word = words[position]
        if position == index:
            continue
        if _is_money(word) and not (word == "credit" and position + 1 < len(words) and words[position + 1] == "card"):
            return word
        if word == "paid" and position > 0 and words[position - 1] == "you" and position < index:
            return "you paid"
    return None


_AUXILIARIES = {"is", "are", "was", "were", "will", "has", "have", "had", "be", "been", "being", "should", "now"}


def _clause_claims(clause: str, carried: list[str]) -> list[MoneyClaim]:
    """The claims of one clause. A clause that starts with its verb shares the subject of the one
    before ("your money is safe and heading home"): `carried`, the words before, are then read
    as its start, for context only."""
    own = _words(clause)
    claims = []
    starts_with_verb = bool(own) and (own[0] in _AUXILIARIES or bool(_MOVE_VERB.match(own[0])))
    context = carried[-_WINDOW:] if starts_with_verb else []
    words = context + own

    def claim(kind: str, cue: str) -> None:
        claims.append(MoneyClaim(kind=kind, clause=clause.strip(), cue=cue))

    phrase = _PHRASES.search(clause)
    if phrase:
        before = _words(clause[: phrase.start()])
        if not _negated(before, len(before)):
            claim("money_verb", phrase.group(0))
    for index, word in enumerate(words):
        if index < len(context) or _negated(words, index):
            continue
        following = words[index + 1] if index + 1 < len(words) else ""
        if _MONEY_VERB.match(word):
            claim("money_verb", word)
        elif word in _MONEY_BASE and index > 0 and words[index - 1] in _SUBJECT_OR_AUX and following != "card":
            claim("money_verb", word)
        elif word in _PAY and _PAY_OUT & set(words[index + 1 : index + 4]) and following not in {"with", "for", "by"}:
            claim("money_verb", f"{word} {' '.join(words[index + 1 : index + 3])}")
        elif word == "back" and (destination := _destination_after(words, index)):
            claim("money_moves", f"back ~ {destination}")  # "put back on your Visa"
        elif word in _PAY and {"into", "onto"} & set(words[index + 1 : index + 5]) and _destination_after(words, index):
            claim("money_verb", f"{word} into your")  # "paid the difference into your account"
        elif word == "through" and _GO & set(words[max(0, index - 3) : index]) and _money_near(words, index):
            claim("money_moves", "through")  # "the refund went through"
        elif (
            word == "yours" or (word == "with" and following == "you" and index > 0 and words[index - 1] == "be")
        ) and (money := _money_near(words, index)):
            claim("money_moves", f"{word} ~ {money}")  # "the cash is yours again", "will be with you"
        elif _UNDO_VERB.match(word) and _near(words, index, _CHARGE_WORDS):
            claim("charge_undone", word)
        elif _MOVE_VERB.match(word) and following not in _TOWARD_US and (money := _money_near(words, index)):
            claim("money_moves", f"{word} ~ {money}")
        elif _RECEIVE_VERB.match(word) and not _FIRST_PERSON & set(words[:index]):
            if money := _money_near(words, index):
                claim("money_moves", f"{word} ~ {money}")
    return claims


# Where the customer keeps money: money said to be in, on or toward one of these is moving there
# ("the funds in your account by Friday", "the refund should reach your card").
_POSSESSIVES = {
    "your", "tu", "su", "tus", "sus", "votre", "vos", "ihr", "ihre", "ihrem", "ihren", "ihrer", "seu", "sua",
    "tuo", "tua", "uw", "je",
}  # fmt: skip
_DESTINATIONS = re.compile(
    r"^(?:card|account|bank|paypal|wallet|statement|balance|visa|mastercard|amex|tarjeta|cuenta|carte|compte|"
    r"konto|kundenkonto|karte|kreditkarte|conta|cartao|conto|carta|rekening|kaart)$"
)
_FROM = {
    "from",
    "with",
    "by",
    "via",
    "using",
    "de",
    "del",
    "avec",
    "par",
    "mit",
    "von",
    "con",
    "com",
    "met",
    "van",
    "uit",
}
# A sentence about what the customer paid (or was charged) is a fact about their payment.
_PAID = re.compile(
    r"^(?:paid|pay|pays|paying|charged|cost|costs|bought|purchased|spent|placed|ordered|listed|checkout|"
    r"pagad[oa]|pagaste|pago|pagou|pago|costo|custou|paye[es]?|regle[es]?|bezahlt|gezahlt|kostete|pagat[oa]|"
    r"costava|betaald|kostte)$"
)


def _money_toward_the_customer(words: list[str]) -> str | None:
    if _NEGATIONS & set(words) or any(_PAID.match(word) or _NOT_A_MOVEMENT.match(word) for word in words):
        return None
    for index, word in enumerate(words[:-1]):
        if word in _POSSESSIVES and _DESTINATIONS.match(words[index + 1]):
            if index > 0 and words[index - 1] in _FROM:
                continue
            money = next((w for w in words[max(0, index - 8) : index + 10] if _is_money(w)), None)
            if money and not (money == "credit" and words[index + 1] == "card"):
                return f"{money} ~ {word} {words[index + 1]}"
    return None


# The default for a sentence about the customer's money: it is a claim unless it says why not.
# A sentence that names money of the customer's ("your refund", "votre argent", "Ihr Guthaben")
# speaks of it moving unless it is about a person deciding, a question, or a fact of what the
# customer paid: the wording of a new promise need not be known in advance.
_TOPIC = {
    "refund", "refunds", "reimbursement", "repayment", "money", "cash", "funds", "sum", "balance", "credit",
    "charge", "charges", "reembolso", "dinero", "importe", "saldo", "cargo", "cobro", "abono", "credito",
    "remboursement", "argent", "montant", "somme", "avoir", "prelevement", "debit", "erstattung",
    "ruckerstattung", "ruckzahlung", "geld", "betrag", "guthaben", "gutschrift", "belastung", "abbuchung",
    "dinheiro", "valor", "estorno", "cobranca", "rimborso", "soldi", "denaro", "importo", "somma", "addebito",
    "terugbetaling", "bedrag", "tegoed", "afschrijving",
}  # fmt: skip
_TO_THE_CUSTOMER = {
    "you", "your", "yours", "te", "tu", "tus", "usted", "vous", "votre", "vos", "sie", "ihr", "ihre", "ihrem",
    "ihren", "ihrer", "ihnen", "dir", "dein", "deine", "voce", "seu", "sua", "ti", "tuo", "tua", "vi", "vostro",
    "u", "uw", "je", "jouw",
}  # fmt: skip
_NOT_A_MOVEMENT = re.compile(
    r"^(?:case|review|reviews|reviewed|reviewing|decide|decides|decided|deciding|decision|look|looking|looked|"
    r"check|checking|checked|pass|passed|forward|forwarded|escalated?|eligible|policy|question|questions|"
    r"ask|asking|photo|photos|receipt|could|please|tell|describe|confirm|explain|understand|sorry|"
    r"paid|pay|charged|cost|costs|made|placed|bought|purchased|used|use|using|listed|shows?|appears?|ending|"
    r"digits|file|taken|once|twice|duplicate|shown|displayed|visible|valid|valable|valido|valida|gultig|geldig|"
    r"spent|spend|redeem|redeemed|einlosen|came|comes|from|aparece|aparecen|apparait|erscheint|compare|"
    r"revis[a-z]*|decid[a-z]*|examin[a-z]*|prufen|pruft|gepruft|entscheid[a-z]*|analis[a-z]*|verifi[a-z]*|"
    r"controll[a-z]*|beoordel[a-z]*|bekijken)$"
)


def _money_of_the_customer(words: list[str]) -> str | None:
    topic = next(
        (word for index, word in enumerate(words) if word in _TOPIC and words[index + 1 : index + 2] != ["card"]),
        None,
    )
    if topic is None or not _TO_THE_CUSTOMER & set(words) or _NEGATIONS & set(words):
        return None
    if any(_NOT_A_MOVEMENT.match(word) or _PAID.match(word) for word in words):
        return None
    return topic


def _rule_claims(text: str) -> list[MoneyClaim]:
    text = _CASE_WORDS.sub(" case ", _normalise(text))
    text = _AMOUNT.sub(" amountx ", text)
    claims = []
    for sentence in _SENTENCE_SPLIT.split(text):
        words = _words(sentence)
        # "A refund of 45 euros", "Refund amount: 99.90": a refund named with its amount.
        refund_noun = next(
            (
                word
                for word, after in zip(words, [*words[1:], ""], strict=False)
                if word in _REFUND_NOUNS and after != "card"
            ),
            None,
        )
        if refund_noun and "amountx" in words and not (_NEGATIONS | _CONDITIONAL) & set(words):
            claims.append(MoneyClaim(kind="refund_amount", clause=sentence.strip(), cue=refund_noun))
        if topic := _money_of_the_customer(words):
            claims.append(MoneyClaim(kind="customer_money", clause=sentence.strip(), cue=topic))
        if toward := _money_toward_the_customer(words):
            claims.append(MoneyClaim(kind="money_toward_customer", clause=sentence.strip(), cue=toward))
        carried: list[str] = []
        for clause in _CLAUSE_SPLIT.split(sentence):
            if clause and clause.strip():
                claims.extend(_clause_claims(clause, carried))
                carried = _words(clause)
    return claims


def reply_money_claims(text: str) -> list[MoneyClaim]:
    """Where a model-written reply speaks of money moving to the customer (see the module);
    empty when it does not."""
    if not text or not text.strip():
        return []
    return _rule_claims(text)
