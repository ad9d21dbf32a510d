"""The first corpus of the payment-promise check (paraphrases, other languages, amounts written
out), kept as a regression for `reply_money_claims`; the measured corpora are in
test_reply_claims.py. The outcome templates' own test is in refundagent/tests/test_reply_claims_gate.py."""

from approvals.reply_claims import reply_money_claims


def reply_promises_payment(text: str) -> bool:
    return bool(reply_money_claims(text))


PROMISING = [
    # the reproduction and close paraphrases
    "Your refund of $120.00 has been processed and the money is already on its way to your card.",
    "Your refund has been processed and you will receive $120.00 on your card within 3 days.",
    "Good news: we refunded your order today.",
    "We have issued a full refund to your original payment method.",
    "The refund was approved and will show up on your statement shortly.",
    "You'll get your money back within five business days.",
    "We're refunding the headphones now.",
    "Your money will be returned to your Visa card.",
    "The amount has been credited to your account.",
    "We will refund you in full.",
    "We'll reimburse the shipping cost as well.",
    "A credit of 45 dollars was applied to your account.",
    "We have sent the payment back to your PayPal.",
    "Your funds were transferred this morning.",
    "The reimbursement is being processed by our bank.",
    "We are processing your refund right now.",
    "Expect the refund on your card by Friday.",
    "Your refund is on its way!",
    "The money is on the way back to you.",
    "We have credited your gift card.",
    "Refunded: 120.00 USD.",
    "We paid the full amount back to your card yesterday.",
    "Your payment has been returned.",
    "The refund will be issued once the courier picks up the parcel.",
    "You will be credited within 48 hours.",
    "We're going to refund the full price of the order.",
    "I have refunded the order for you.",
    "The funds have been released to your bank.",
    "Your refund has been completed.",
    "We've initiated the refund to your card.",
    "It's been refunded, you should see it in your account soon.",
    "The full order value will be deposited into your account.",
    "Your card will be reimbursed.",
    "We can refund you one hundred twenty dollars.",
    "You will receive a refund of one hundred and twenty dollars.",
    "We will give you back fifty euros.",
    "A refund of twenty-five pounds is coming your way; it will be back in your account next week.",
    "We'll send 120 USD to your card.",
    "USD 120 will be returned to you.",
    "The total of €45 will be credited.",
    "You are getting 45,50 back.",
    "Refund amount: 99.90.",
    "We'll wire the money to your bank account tomorrow.",
    "The payout was sent to your account.",
    "Your refund was approved by our team.",
    "The refund is complete and should arrive in your bank within a few days.",
    "We have already returned the money for the damaged lamp.",
    "We are crediting your account with the difference.",
    "Your money is being sent back as we speak.",
    "Once processed, the refund will land in your account in 3-5 days. We've processed the refund.",
    "The store has refunded the purchase.",
    "The charge has been reversed and the money returned to your card.",
    "You should receive your money back shortly.",
    "The amount of 120.00 has been paid back.",
    "We'll credit one hundred dollars to your account.",
    "I've gone ahead and reimbursed you.",
    "Your refund is already processed, nothing else to do on your side.",
    "Consider it refunded.",
    "We refund the order in full and you keep the item.",
    "Your cash will be back on your card in no time.",
    # Spanish
    "Su reembolso de 120,00 € ha sido procesado.",
    "Le hemos reembolsado el importe completo.",
    "Te reembolsaremos el dinero en tu tarjeta.",
    "El dinero ya está en camino a su cuenta.",
    "Hemos abonado la cantidad en su tarjeta.",
    "Recibirás cien euros en tu cuenta.",
    "El pago ha sido devuelto a su tarjeta.",
    "Su dinero fue transferido esta mañana.",
    "Le devolveremos el dinero en tres días.",
    "El reembolso ha sido aprobado y enviado.",
    "Vamos a reembolsar el pedido completo.",
    "Ya le hemos devuelto cincuenta euros.",
    # French
    "Votre remboursement de 120,00 € a été effectué et versé sur votre carte.",
    "Nous vous avons remboursé la totalité de la commande.",
    "Nous vous rembourserons dès demain.",
    "L'argent est en route vers votre compte.",
    "Le montant a été crédité sur votre compte.",
    "Vous recevrez cent vingt euros sur votre carte.",
    "Le paiement vous a été restitué.",
    "Votre commande est remboursée.",
    "Un virement de 45 euros a été envoyé.",
    "Le remboursement a été approuvé et envoyé sur votre carte.",
    # German
    "Ihre Rückerstattung über 120,00 € wurde bearbeitet und ist unterwegs.",
    "Wir haben Ihnen den vollen Betrag erstattet.",
    "Das Geld wird Ihrem Konto gutgeschrieben.",
    "Wir erstatten Ihnen den Kaufpreis.",
    "Der Betrag wurde bereits überwiesen.",
    "Sie erhalten hundert Euro zurück.",
    "Die Zahlung wurde auf Ihre Karte zurückerstattet.",
    "Ihr Geld ist auf dem Weg zu Ihnen.",
    "Wir haben die Bestellung zurückgezahlt.",
    "Die Erstattung wurde genehmigt und ausgezahlt.",
    # Portuguese
    "Seu reembolso de R$ 120,00 foi processado.",
    "Nós reembolsamos o valor total do pedido.",
    "O dinheiro já está a caminho da sua conta.",
    "O valor foi creditado no seu cartão.",
    "Você receberá cem reais na sua conta.",
    "O estorno foi aprovado e o valor será devolvido.",
    "Vamos reembolsar o seu pedido hoje.",
    "O pagamento foi estornado.",
    # Italian
    "Il tuo rimborso di 120,00 € è stato elaborato.",
    "Ti abbiamo rimborsato l'intero importo.",
    "Il denaro è in arrivo sul tuo conto.",
    "L'importo è stato accreditato sulla tua carta.",
    "Riceverai cento euro sul tuo conto.",
    "Il pagamento è stato restituito.",
    "Ti rimborseremo entro tre giorni.",
    "I soldi sono stati inviati sul tuo conto.",
]

LEGITIMATE = [
    "Thank you for contacting us about order ORD-5001. We have passed your request to our finance team for review.",
    "Hello, a member of our team will look into your request and get back to you.",
    "Could you send us a photo of the damaged item?",
    "We need the order number to look into this. Could you reply with it?",
    "Thanks for your patience. Your refund request is with our finance team, and we will let you know their decision.",
    "We have received your message and opened a case for you.",
    "Our team is reviewing your request for a refund and will contact you soon.",
    "Could you tell us which items arrived broken?",
    "The order was placed 45 days ago, which is outside our 30-day refund window, so a member of our team will "
    "review your request personally.",
    "We're sorry the headphones stopped working. We've passed this on to a colleague who will review it.",
    "Hello, thank you for contacting us about order ORD-5002. The order is currently pending, so a member of our "
    "team will review your request personally and get back to you.",
    "Your request has been forwarded to the right team.",
    "We will get back to you as soon as they have made a decision.",
    "Please reply with the email address you used for the purchase.",
    "Can you confirm whether you still have the original packaging?",
    "We understand how frustrating this is and we are looking into it.",
    "Your case number is ORD-5001; please mention it if you contact us again.",
    "Before we go further, could you describe the problem in a bit more detail?",
    "Thanks! We have everything we need for now and will be in touch.",
    "Our records show that this order is not eligible for a further refund. Reply to this message if you think this "
    "is a mistake.",
    "Hi Jane, we are reviewing your request and will get back to you.",
    "We have escalated your request to a supervisor.",
    "Which of the two orders do you mean?",
    "A colleague from our returns team will contact you within two business days.",
    "We cannot promise an outcome yet, but your request is being reviewed.",
    "We cannot refund this order under our policy, but a person will look at it again.",
    "Please do not send the item back until we contact you.",
    "We noticed the parcel was marked as delivered; could you check with your neighbours?",
    "Our finance team decides on every refund request; we will let you know the outcome by email.",
    "Thank you for the photos, they help a lot.",
    # Spanish
    "Hemos pasado su solicitud de reembolso a nuestro equipo de finanzas.",
    "Gracias por contactarnos. Un miembro del equipo revisará su caso.",
    "¿Podría enviarnos una foto del producto dañado?",
    "Le responderemos en cuanto tengamos una decisión.",
    # French
    "Nous avons transmis votre demande de remboursement à notre équipe.",
    "Merci de nous avoir contactés, un conseiller examinera votre demande.",
    "Pourriez-vous nous envoyer une photo de l'article ?",
    "Nous reviendrons vers vous dès que possible.",
    # German
    "Wir haben Ihren Erstattungsantrag an unser Team weitergeleitet.",
    "Vielen Dank für Ihre Nachricht, wir prüfen Ihr Anliegen.",
    "Könnten Sie uns ein Foto des Artikels schicken?",
    "Wir melden uns, sobald eine Entscheidung gefallen ist.",
    # Portuguese
    "Encaminhamos o seu pedido de reembolso para a nossa equipe.",
    "Obrigado pelo contato, um atendente vai analisar o seu caso.",
    "Poderia nos enviar uma foto do produto?",
    "Entraremos em contato assim que houver uma decisão.",
    # Italian
    "Abbiamo inoltrato la tua richiesta di rimborso al nostro team.",
    "Grazie per averci contattato, un operatore esaminerà la tua richiesta.",
    "Potresti inviarci una foto del prodotto danneggiato?",
    "Ti contatteremo appena avremo una decisione.",
]


def test_the_corpus_is_big_enough():
    assert len(PROMISING) >= 100 and len(LEGITIMATE) >= 50
    assert len(set(PROMISING)) == len(PROMISING) and len(set(LEGITIMATE)) == len(LEGITIMATE)


def test_the_gate_catches_every_promise_with_few_false_positives():
    missed = [reply for reply in PROMISING if not reply_promises_payment(reply)]
    flagged = [reply for reply in LEGITIMATE if reply_promises_payment(reply)]
    recall = 1 - len(missed) / len(PROMISING)
    false_positive_rate = len(flagged) / len(LEGITIMATE)
    print(
        f"\npayment-promise check: recall {recall:.1%} ({len(PROMISING)} promising), "
        f"false positives {false_positive_rate:.1%} ({len(flagged)} of {len(LEGITIMATE)} legitimate)"
    )
    assert missed == [], missed
    assert recall == 1.0
    assert false_positive_rate <= 0.05, flagged
