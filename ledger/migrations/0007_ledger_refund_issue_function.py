"""`ledger_refund_issue` as one PL/pgSQL function: the refund write in one round trip.

Superseded: migration 0009 drops the function again. The refund write is one implementation,
the ORM under the order's row lock in `ledger.services.ledger_refund_issue`, with the triggers
of 0002/0004 as its backstop; two implementations of the rule that moves money had to be kept
in step. The SQL stays here for the history, and 0009's reverse recreates it from FORWARD.

In one call, the function:
1. locks the order row (`FOR UPDATE`; the lock order is the order row first, then a gift card);
2. returns the entry already written under the idempotency key, if any (Python replays it or
   raises IdempotencyConflict);
3. refuses, by returning a refusal code and the numbers its message needs (never by raising:
   nothing is written and an outer transaction stays usable), a refund that is not positive, in
   another currency, to another customer's payment method, above what is still refundable (the
   order total less the effective amounts of its pending, succeeded and external entries: an
   entry's newest revision's new_amount, else its amount), or for named items (matched as
   `ledger.selectors.items_match` does: one unit per id, from the first line in line order with
   an unrefunded unit left) an unmatched item or above the matched items' price;
4. writes the entry, its first status event, its items, and grows a gift card's balance when
   asked (store credit that is not an import).

Every statement of a PL/pgSQL function takes a fresh snapshot under READ COMMITTED, so
everything after the lock sees what the previous holder of the lock committed: a single
statement (one CTE) would read with a snapshot taken before the lock was granted.

The entry columns came back in the model's field order; for a new entry only the values the
database chose (the arguments were stored as given: Python had them).
The deferred cap triggers of migrations 0002/0004 still re-checked the result at commit.
"""

from django.db import migrations

FORWARD = r"""
CREATE OR REPLACE FUNCTION ledger_refund_issue(
    p_order_id bigint,
    p_amount numeric,
    p_currency text,
    p_idempotency_key text,
    p_destination_id bigint,
    p_destination_customer_id bigint,
    p_destination_kind text,
    p_item_ids text[],
    p_source text,
    p_approval_ref text,
    p_reason text,
    p_created_by_id integer,
    p_request_hash text,
    p_gateway text,
    p_status text,
    p_grows_balance boolean,
    -- 'created', 'existing', 'order_not_found', or a refusal code
    OUT o_outcome text,
    -- the locked order's, for the refusals' messages
    OUT o_order_external_id text,
    OUT o_order_currency text,
    OUT o_order_total numeric,
    OUT o_refunded_total numeric,
    OUT o_items_value numeric,
    OUT o_unmatched integer[],  -- 1-based positions in p_item_ids
    -- the entry, in RefundEntry's field order: all of it when it existed; when created, only
    -- what the database gave it (id, tenant_id, created_at = status_changed_at): the rest is
    -- the arguments, stored as given
    OUT o_id bigint,
    OUT o_tenant_id bigint,
    OUT o_order_id bigint,
    OUT o_amount numeric,
    OUT o_currency text,
    OUT o_destination_id bigint,
    OUT o_destination_kind text,
    OUT o_idempotency_key text,
    OUT o_request_hash text,
    OUT o_source text,
    OUT o_approval_ref text,
    OUT o_reason text,
    OUT o_created_by_id integer,
    OUT o_created_at timestamptz,
    OUT o_status text,
    OUT o_status_changed_at timestamptz,
    OUT o_gateway text,
    OUT o_provider_ref text,
    OUT o_needs_review boolean
) AS $$
DECLARE
    v_tenant_id bigint;
    v_customer_id bigint;
    v_line_ids bigint[];
    v_line_items text[];
    v_line_prices numeric[];
    v_line_left integer[];
    v_units integer[];
    v_taken integer[] := '{}';  -- line positions, in the order first matched
    v_lines integer;
    v_hit integer;
    v_now timestamptz;
BEGIN
    -- Lock order: the order row first, always (docs/ledger.md).
    SELECT o.tenant_id, o.customer_id, o.external_id, o.total, o.currency
      INTO v_tenant_id, v_customer_id, o_order_external_id, o_order_total, o_order_currency
      FROM ledger_order o
     WHERE o.id = p_order_id
       FOR UPDATE;
    IF NOT FOUND THEN
        o_outcome := 'order_not_found';
        RETURN;
    END IF;

    -- Under the lock, in one statement (a fresh snapshot): the entry already written under the key,
    -- and what counts against the order: pending, succeeded and external entries
    -- (ledger.models.COUNTING_STATUSES), each at its effective amount (its newest revision's
    -- new_amount, else its amount: ledger.selectors.order_refunded_total).
    SELECT e.id, e.tenant_id, e.order_id, e.amount, e.currency, e.destination_id, e.destination_kind,
           e.idempotency_key, e.request_hash, e.source, e.approval_ref, e.reason, e.created_by_id,
           e.created_at, e.status, e.status_changed_at, e.gateway, e.provider_ref, e.needs_review,
           counted.total
      INTO o_id, o_tenant_id, o_order_id, o_amount, o_currency, o_destination_id, o_destination_kind,
           o_idempotency_key, o_request_hash, o_source, o_approval_ref, o_reason, o_created_by_id,
           o_created_at, o_status, o_status_changed_at, o_gateway, o_provider_ref, o_needs_review,
           o_refunded_total
      FROM (SELECT COALESCE(SUM(COALESCE(
                       (SELECT r.new_amount FROM ledger_refundrevision r
                         WHERE r.entry_id = c.id ORDER BY r.id DESC LIMIT 1),
                       c.amount)), 0.00) AS total
              FROM ledger_refundentry c
             WHERE c.order_id = p_order_id AND c.status IN ('pending', 'succeeded', 'external')) counted
      LEFT JOIN ledger_refundentry e ON e.idempotency_key = p_idempotency_key;
    IF o_id IS NOT NULL THEN
        o_outcome := 'existing';
        o_refunded_total := NULL;
        RETURN;
    END IF;

    IF p_amount <= 0 THEN
        o_outcome := 'refund_not_positive';
        RETURN;
    END IF;
    IF p_currency <> o_order_currency THEN
        o_outcome := 'currency_mismatch';
        RETURN;
    END IF;
    IF p_destination_id IS NOT NULL AND p_destination_customer_id IS DISTINCT FROM v_customer_id THEN
        o_outcome := 'foreign_destination';
        RETURN;
    END IF;

    IF p_amount > GREATEST(o_order_total - o_refunded_total, 0.00) THEN
        o_outcome := 'refund_exceeds_refundable';
        RETURN;
    END IF;

    IF cardinality(p_item_ids) > 0 THEN
        -- ledger.selectors.items_match: one unit per id, from the first line (by line_no) with
        -- the id and an unrefunded unit left; units of counting entries only.
        SELECT array_agg(oi.id ORDER BY oi.line_no),
               array_agg(oi.item_id ORDER BY oi.line_no),
               array_agg(oi.price ORDER BY oi.line_no),
               array_agg(oi.quantity - COALESCE(
                   (SELECT SUM(ri.quantity)
                      FROM ledger_refundentryitem ri
                      JOIN ledger_refundentry e ON e.id = ri.entry_id
                     WHERE ri.order_item_id = oi.id AND e.status IN ('pending', 'succeeded', 'external')), 0)
                   ORDER BY oi.line_no)
          INTO v_line_ids, v_line_items, v_line_prices, v_line_left
          FROM ledger_orderitem oi
         WHERE oi.order_id = p_order_id;
        v_lines := COALESCE(cardinality(v_line_ids), 0);
        v_units := array_fill(0, ARRAY[v_lines]);
        o_items_value := 0.00;
        o_unmatched := '{}';
        FOR i IN 1 .. cardinality(p_item_ids) LOOP
            v_hit := NULL;
            FOR j IN 1 .. v_lines LOOP
                IF v_line_items[j] = p_item_ids[i] AND v_line_left[j] > 0 THEN
                    v_hit := j;
                    EXIT;
                END IF;
            END LOOP;
            IF v_hit IS NULL THEN
                o_unmatched := o_unmatched || i;
            ELSE
                v_line_left[v_hit] := v_line_left[v_hit] - 1;
                IF v_units[v_hit] = 0 THEN
                    v_taken := v_taken || v_hit;
                END IF;
                v_units[v_hit] := v_units[v_hit] + 1;
                o_items_value := o_items_value + v_line_prices[v_hit];
            END IF;
        END LOOP;
        IF cardinality(o_unmatched) > 0 THEN
            o_outcome := 'item_not_refundable';
            RETURN;
        END IF;
        IF p_amount > o_items_value THEN
            o_outcome := 'refund_exceeds_items';
            RETURN;
        END IF;
    END IF;

    v_now := clock_timestamp();
    -- A key inserted meanwhile by a transaction not holding this order's lock (the same key on
    -- another order): nothing is written here, and the entry it wrote is returned below.
    INSERT INTO ledger_refundentry
           (tenant_id, order_id, amount, currency, destination_id, destination_kind, idempotency_key,
            request_hash, source, approval_ref, reason, created_by_id, created_at, status,
            status_changed_at, gateway, provider_ref, needs_review)
    VALUES (v_tenant_id, p_order_id, p_amount, p_currency, p_destination_id, p_destination_kind,
            p_idempotency_key, p_request_hash, p_source, p_approval_ref, p_reason, p_created_by_id, v_now,
            p_status, v_now, p_gateway, '', false)
    ON CONFLICT (idempotency_key) DO NOTHING
    RETURNING id, tenant_id, created_at INTO o_id, o_tenant_id, o_created_at;
    IF NOT FOUND THEN
        SELECT e.id, e.tenant_id, e.order_id, e.amount, e.currency, e.destination_id, e.destination_kind,
               e.idempotency_key, e.request_hash, e.source, e.approval_ref, e.reason, e.created_by_id,
               e.created_at, e.status, e.status_changed_at, e.gateway, e.provider_ref, e.needs_review
          INTO o_id, o_tenant_id, o_order_id, o_amount, o_currency, o_destination_id, o_destination_kind,
               o_idempotency_key, o_request_hash, o_source, o_approval_ref, o_reason, o_created_by_id,
               o_created_at, o_status, o_status_changed_at, o_gateway, o_provider_ref, o_needs_review
          FROM ledger_refundentry e
         WHERE e.idempotency_key = p_idempotency_key;
        o_outcome := 'existing';
        RETURN;
    END IF;

    INSERT INTO ledger_refundentryevent
           (entry_id, from_status, to_status, provider_ref, reason, source, event_ref, created_at)
    VALUES (o_id, '', p_status, '', '', 'issue', '', v_now);

    IF cardinality(v_taken) > 0 THEN
        INSERT INTO ledger_refundentryitem (entry_id, order_item_id, quantity, amount)
        SELECT o_id, v_line_ids[t.j], v_units[t.j], v_line_prices[t.j] * v_units[t.j]
          FROM unnest(v_taken) WITH ORDINALITY AS t(j, n)
         ORDER BY t.n;
    END IF;

    IF p_grows_balance THEN
        -- Lock order: the order row is held; the gift card row second.
        UPDATE ledger_paymentmethod
           SET balance = COALESCE(balance, 0.00) + p_amount
         WHERE id = p_destination_id;
    END IF;

    o_outcome := 'created';
END;
$$ LANGUAGE plpgsql;
"""

REVERSE = r"""
DROP FUNCTION IF EXISTS ledger_refund_issue(
    bigint, numeric, text, text, bigint, bigint, text, text[], text, text, text, integer, text, text, text, boolean
);
"""


def forward(apps, schema_editor):
    schema_editor.execute(FORWARD, params=None)


def reverse(apps, schema_editor):
    schema_editor.execute(REVERSE, params=None)


class Migration(migrations.Migration):
    dependencies = [("ledger", "0006_idempotencykey")]

    operations = [migrations.RunPython(forward, reverse, elidable=False)]
