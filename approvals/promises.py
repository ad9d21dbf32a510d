"""The structural payment-promise rule, and the outcome sentence the runtime
adds once finance has decided.

Before finance approves, a draft reply to the customer may not:
- state an amount: a currency symbol or code with digits, digits with decimals, or a number
  (in digits or written out, in English, Spanish, French, German, Portuguese or Italian) next
  to a currency word;
- say that money was, is being or will be paid, credited, sent, refunded, returned, processed,
  issued or is on its way, in any tense: an inherently monetary verb (refund, reimburse,
  credit...) in any verb form, or a payout verb (sent, paid, processed, transferred...) near a
  money word (refund, money, amount...) or a destination (your card, your account...).

It is a rule about what kind of sentence a draft may contain, not a list of phrases: a reply
that needs to talk about money is the runtime's job, from `reply_outcome_sentence`, once the
outcome is decided. "Refund request" and its translations are the one way a reply may name a
refund: they are masked before the check. A negation right before a verb ("we cannot refund")
is not a promise.
"""

import re
import unicodedata
from decimal import Decimal

# --- amounts -------------------------------------------------------------------------------

_CURRENCY_SYMBOLS = "$€£¥₹₩₽₺"
_CURRENCY_CODES = "usd|eur|gbp|cad|aud|jpy|chf|sek|nok|dkk|brl|mxn|nzd|pln|czk|inr|cny|hkd|sgd|zar"
_CURRENCY_WORDS = (
    r"dollars?|bucks|cents?|euros?|eur|pounds?|quid|pence|francs?|franken|yen|kronor|kroner|krona|krone|"
    r"dolares|dolar|libras?|centimos?|centavos?|reais|real|pesos?|livres?|sterlings?|pfund|rappen|"
    r"dollari|sterline|centesimi|yuan|rupees?"
)
_NUMBER_WORDS = (
    # English
    r"one|two|three|four|five|six|seven|eight|nine|ten|eleven|twelve|thirteen|fourteen|fifteen|sixteen|"
    r"seventeen|eighteen|nineteen|twenty|thirty|forty|fifty|sixty|seventy|eighty|ninety|hundred|thousand|"
    r"a\s+hundred|a\s+thousand|"
    # Spanish / Portuguese
    r"uno|una|dos|tres|cuatro|cinco|seis|siete|ocho|nueve|diez|veinte|treinta|cuarenta|cincuenta|sesenta|"
    r"setenta|ochenta|noventa|cien|ciento|cientos|doscientos|trescientos|quinientos|mil|um|uma|dois|duas|"
    r"quatro|sete|oito|nove|dez|vinte|trinta|quarenta|cinquenta|sessenta|cem|cento|duzentos|trezentos|"
    r"quinhentos|veinticinco|vinte e cinco|"
    # French
    r"un|deux|trois|quatre|cinq|sept|huit|neuf|dix|vingt|trente|quarante|cinquante|soixante|cent|cents|mille|"
    # German
    r"eins|ein|einen|zwei|drei|vier|funf|sechs|sieben|acht|neun|zehn|zwanzig|dreissig|vierzig|funfzig|"
    r"sechzig|siebzig|achtzig|neunzig|hundert|einhundert|zweihundert|tausend|"
    # Italian
    r"due|tre|quattro|sei|sette|otto|dieci|venti|trenta|quaranta|cinquanta|sessanta|settanta|ottanta|"
    r"novanta|duecento|trecento|mille"
)
_AMOUNT_PATTERNS = [
    # A currency symbol next to digits: $120, € 45, 120€, R$ 99
    rf"[{_CURRENCY_SYMBOLS}]\s?\d|\d\s?[{_CURRENCY_SYMBOLS}]",
    # A currency code or word next to digits: 120 USD, EUR 45, 30 dollars, 12 euros
    rf"\b\d[\d.,\s]*\s?(?:{_CURRENCY_CODES}|{_CURRENCY_WORDS})\b",
    rf"\b(?:{_CURRENCY_CODES})\s?\d",
    # Digits with decimals (not a date or a version): 120.00, 45,50
    r"(?<![\d.,])\d{1,3}(?:[.,\s]\d{3})*[.,]\d{2}(?![\d]|[.,]\d)",
    # A number written out next to a currency word: "one hundred twenty dollars", "cien euros"
    rf"\b(?:{_NUMBER_WORDS})(?:[\s-]+(?:and|y|e|et|und|(?:{_NUMBER_WORDS})))*[\s-]+(?:{_CURRENCY_WORDS})\b",
    rf"\b\d+\s+(?:{_CURRENCY_WORDS})\b",
]
_AMOUNT_RE = re.compile("|".join(_AMOUNT_PATTERNS))

# --- saying that money moves ------------------------------------------------------------

# How a reply may name a refund without promising one: masked before the verb check.
_REQUEST_COMPOUNDS = re.compile(
    r"\b(?:refund|reimbursement|return)\s+(?:request|claim|application|case|ticket|inquiry|enquiry|query)s?\b"
    r"|\brequest(?:s|ed)?\s+(?:for\s+)?(?:a\s+|the\s+|your\s+)?refund\b"
    r"|\b(?:solicitud|peticion|reclamacion|pedido|pedidos|solicitacao)\s+de\s+(?:reembolso|devolucion|estorno)\b"
    r"|\b(?:demande|requete|reclamation)\s+de\s+remboursement\b"
    r"|\b(?:richiesta|pratica)\s+di\s+rimborso\b"
    r"|\b(?:erstattungs|ruckerstattungs)(?:antrag|anfrage|anliegen)\w*\b"
    r"|\b(?:antrag|anfrage)\s+auf\s+(?:eine\s+)?(?:ruck)?erstattung\b"
    r"|\brefund\s+(?:window|policy|policies|rules?|terms|process|team|department)\b"
    r"|\bget(?:ting)? back to you\b|\bapplied for\b"
)

# Verbs that mean "money goes to the customer" in every form except their noun: any verb form
# is a promise (refunded, refunding, will refund, reembolsaremos, erstattet, rimborsato...).
_MONETARY_VERB = re.compile(
    r"^(?:refunded|refunding|reimburs(?:ed|ing|e|es)|credited|crediting|"
    r"reembols(?:ad[oa]s?|ar|are|aremos|amos|aran|ara|a|o|ou|amos|ei|ara|ado|ada|ando)|"
    r"rembours(?:e|es|ee|ees|er|erons|era|ons|ez|ait)|"
    r"erstatt(?:et|en|e|ten|ete)|zuruckerstatt\w*|ruckerstatt(?:et|en)|zuruckgezahlt|gutgeschrieben|"
    r"gutschreiben|ausgezahlt|ausbezahlt|uberwiesen|"
    r"rimbors(?:ato|ata|ati|ate|are|eremo|iamo|era|o|a)|accreditat[oaie]|accrediter\w*|"
    r"estornad[oa]s?|estornar\w*|estorn(?:amos|ei|ou)|creditad[oa]s?|creditar\w*|"
    r"acreditad[oa]s?|acreditar\w*|abonad[oa]s?|abonar\w*|abonaremos|"
    r"credite[es]?|crediter\w*|recredit\w*|rembourse)$"
)
# The same verbs' base form, a promise after an auxiliary or a subject: "we will refund you".
_MONETARY_BASE = {"refund", "reimburse", "credit", "repay", "compensate"}
_BASE_AUX = {"will", "ll", "shall", "would", "to", "we", "i", "they", "gonna", "going", "can", "could"}

# Verbs (in a form that reports or announces it) that move money when money is their subject
# or object: "your money was sent", "the amount has been transferred", "pagamos o valor".
_PAYOUT_VERB = re.compile(
    r"^(?:paid|pay|paying|pays|sent|sending|send|returned|returning|processed|processing|issued|issuing|"
    r"transferred|transferring|transfer|deposited|depositing|deposit|wire|wired|wiring|released|releasing|expect|"
    r"approved|authori[sz]ed|credited|received|receive|receiving|get|getting|dispatched|"
    r"initiated|completed|posted|applied|arrive|arriving|arrived|reflected|"
    # Spanish / Portuguese
    r"pagad[oa]s?|pagamos|pagaremos|enviad[oa]s?|enviamos|enviaremos|enviar|transferid[oa]s?|"
    r"transferimos|transferiremos|procesad[oa]s?|processad[oa]s?|emitid[oa]s?|devuelt[oa]s?|devolvid[oa]s?|"
    r"devolvemos|devolveremos|devolver|devolveremos|recibira|recibiras|recibir|recibe|recebera|receber|"
    r"aprobad[oa]s?|aprovad[oa]s?|depositad[oa]s?|ingresad[oa]s?|reintegrad[oa]s?|"
    # French
    r"verse[es]?|verserons|virement|vire[es]?|envoye[es]?|enverrons|traite[es]?|emis|emise|recevrez|recevoir|"
    r"approuve[es]?|rendu|rendus|restitue[es]?|paye[es]?|payerons|"
    # German
    r"gezahlt|bezahlt|zahlen|zahlt|uberweisen|uberweist|gesendet|geschickt|bearbeitet|veranlasst|genehmigt|"
    r"erhalten|bekommen|zuruck|freigegeben|angewiesen|"
    # Italian
    r"pagat[oaie]|paghiamo|pagheremo|inviat[oaie]|invieremo|restituit[oaie]|restituiremo|trasferit[oaie]|"
    r"elaborat[oaie]|emess[oaie]|riceverai|riceverete|ricevera|ricevere|approvat[oaie]|bonificat[oaie]|"
    r"versat[oaie]|accreditat[oaie])$"
)
_MONEY_WORDS = {
    "refund",
    "refunds",
    "money",
    "amount",
    "payment",
    "funds",
    "fund",
    "credit",
    "reimbursement",
    "sum",
    "cash",
    "balance",
    "compensation",
    "payout",
    "chargeback",
    "card",
    "account",
    "bank",
    "wallet",
    "paypal",
    "statement",
    "reembolso",
    "dinero",
    "importe",
    "pago",
    "fondos",
    "monto",
    "cantidad",
    "abono",
    "devolucion",
    "tarjeta",
    "cuenta",
    "remboursement",
    "argent",
    "montant",
    "paiement",
    "fonds",
    "somme",
    "avoir",
    "carte",
    "compte",
    "erstattung",
    "ruckerstattung",
    "geld",
    "betrag",
    "zahlung",
    "gutschrift",
    "summe",
    "karte",
    "konto",
    "kreditkarte",
    "dinheiro",
    "valor",
    "pagamento",
    "quantia",
    "estorno",
    "cartao",
    "conta",
    "rimborso",
    "denaro",
    "soldi",
    "importo",
    "somma",
    "accredito",
    "carta",
    "conto",
}
_NEGATIONS = {
    "not",
    "no",
    "never",
    "cannot",
    "cant",
    "can't",
    "won't",
    "wont",
    "don't",
    "dont",
    "didn't",
    "didnt",
    "unable",
    "nothing",
    "nicht",
    "kein",
    "keine",
    "nie",
    "pas",
    "jamais",
    "nao",
    "non",
    "nunca",
    "ni",
    "n't",
    "yet",
}
# Phrases that announce money on its way without a verb of the lists above.
_PHRASES = re.compile(
    r"\bon (?:its|their|the) way\b|\bmoney back\b|\bback (?:to|in|on|into) your\b|\bin your (?:account|card|bank)\b"
    r"|\ben camino\b|\ben route\b|\ben chemin\b|\bunterwegs\b|\bauf dem weg\b|\ba caminho\b|\bin arrivo\b"
    r"|\bsulla tua carta\b|\bna sua conta\b|\ben su cuenta\b|\bsur votre compte\b|\bauf ihr konto\b"
    r"|\bauf ihre karte\b|\bsur votre carte\b|\ben su tarjeta\b|\bno seu cartao\b|\bsul tuo conto\b"
)
_WINDOW = 6


def _normalise(text: str) -> str:
    text = unicodedata.normalize("NFKD", text)
    text = "".join(c for c in text if not unicodedata.combining(c))
    text = text.replace("ß", "ss").replace("’", "'").replace("‘", "'")
    return text.lower()


def reply_states_amount(text: str) -> bool:
    return bool(_AMOUNT_RE.search(_normalise(text or "")))


def reply_says_money_moves(text: str) -> bool:
    text = _REQUEST_COMPOUNDS.sub(" case ", _normalise(text or ""))
    if _PHRASES.search(text):
        return True
    for sentence in re.split(r"[.!?;:\n]+", text):
        tokens = re.findall(r"[a-z0-9]+(?:'[a-z]+)?", sentence)
        # "we'll" -> "we", "ll"; "can't" stays a negation.
        words = []
        for token in tokens:
            if "'" in token and token not in _NEGATIONS:
                head, tail = token.split("'", 1)
                words.extend([head, tail])
            else:
                words.append(token)
        for i, word in enumerate(words):
            if _negated(words, i):
                continue
            if _MONETARY_VERB.match(word):
                return True
            if word in _MONETARY_BASE and i > 0 and words[i - 1] in _BASE_AUX:
                return True
            if _PAYOUT_VERB.match(word) and _near_money(words, i):
                return True
    return False


def _negated(words: list[str], i: int) -> bool:
    return any(w in _NEGATIONS for w in words[max(0, i - 3) : i])


def _near_money(words: list[str], i: int) -> bool:
    return any(w in _MONEY_WORDS for w in words[max(0, i - _WINDOW) : i + _WINDOW + 1])


def reply_promises_payment(text: str) -> bool:
    """True if a draft reply states an amount or says that money moves (see the module)."""
    return reply_states_amount(text) or reply_says_money_moves(text)


# --- the outcome sentence: the runtime's, once decided -----------------------------------

_OUTCOME_SENTENCES = {
    "refunded": "We have refunded {amount} {currency} to your {destination}; depending on your bank it can take a "
    "few days to appear.",
    "approved": "Your refund of {amount} {currency} to your {destination} has been approved and is being paid out.",
    "denied": "After review, we are not able to refund this order.",
    "payment_failed": "We could not complete the refund of {amount} {currency} yet; our team is looking into it and "
    "will contact you.",
}
_DESTINATION_WORDS = {"original": "original payment method", "gift_card": "gift card"}


def reply_outcome_sentence(
    *, outcome: str, amount: Decimal | str | None = None, currency: str = "", destination: str = "original"
) -> str:
    """The sentence the runtime adds to the customer's reply once the outcome is decided
    (`refunded`, `approved`, `denied`, `payment_failed`): the only text that states an amount or
    says money moves, built from the decided facts, never from the model's draft."""
    if outcome not in _OUTCOME_SENTENCES:
        raise ValueError(f"No outcome sentence for {outcome!r}.")
    return _OUTCOME_SENTENCES[outcome].format(
        amount="" if amount is None else f"{Decimal(amount):.2f}",
        currency=currency,
        destination=_DESTINATION_WORDS.get(destination, "payment method"),
    )
