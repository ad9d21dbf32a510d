"""Ledger entry states, backed by PostgreSQL (extends migration 0002).

1. Every existing entry was paid out by hand: it gets one `succeeded` status event, so each
   entry's history starts with an event.
2. Status events are append-only (the 0002 trigger function refuses UPDATE and DELETE).
3. A refund entry may now be UPDATEd in one way only: its `status`, `provider_ref` (set once)
   and `status_changed_at`, along an allowed transition, and only to the status of the entry's
   newest event (the service appends the event first). Everything else of the row is as
   immutable as before; DELETE is still refused. Why a column and not "the newest event":
   the refundable amount and the deferred cap trigger filter on one indexed column instead of
   a newest-event subquery per entry, and the trigger keeps the column equal to the history.
4. The cap trigger counts only entries whose money is (or may be) out: pending, succeeded,
   external. A failed or canceled refund stops counting, for the total and for item units.
"""

from django.db import migrations

FORWARD = r"""
CREATE TRIGGER ledger_refundentryevent_append_only
    BEFORE UPDATE OR DELETE ON ledger_refundentryevent
    FOR EACH ROW EXECUTE FUNCTION ledger_refuse_change();

CREATE OR REPLACE FUNCTION ledger_refundentry_status_change() RETURNS trigger AS $$
DECLARE
    v_latest text;
BEGIN
    IF TG_OP = 'DELETE' THEN
        RAISE EXCEPTION 'ledger: DELETE on % is refused: the refund ledger is append-only', TG_TABLE_NAME
            USING ERRCODE = 'restrict_violation';
    END IF;
    IF (to_jsonb(NEW) - 'status' - 'provider_ref' - 'status_changed_at')
       IS DISTINCT FROM (to_jsonb(OLD) - 'status' - 'provider_ref' - 'status_changed_at') THEN
        RAISE EXCEPTION 'ledger: UPDATE of refund entry % is refused: the refund ledger is append-only (only its status and provider_ref move, after a status event)', OLD.id
            USING ERRCODE = 'restrict_violation';
    END IF;
    IF OLD.provider_ref <> '' AND NEW.provider_ref IS DISTINCT FROM OLD.provider_ref THEN
        RAISE EXCEPTION 'ledger: the provider_ref of refund entry % is set once', OLD.id
            USING ERRCODE = 'restrict_violation';
    END IF;
    IF NEW.status <> OLD.status AND NOT (
           (OLD.status = 'pending' AND NEW.status IN ('succeeded', 'failed', 'canceled'))
        OR (OLD.status = 'succeeded' AND NEW.status = 'failed')
        OR (OLD.status = 'external' AND NEW.status IN ('failed', 'canceled'))) THEN
        RAISE EXCEPTION 'ledger: refund entry % may not move from % to %', OLD.id, OLD.status, NEW.status
            USING ERRCODE = 'restrict_violation';
    END IF;
    SELECT to_status INTO v_latest FROM ledger_refundentryevent WHERE entry_id = OLD.id ORDER BY id DESC LIMIT 1;
    IF v_latest IS DISTINCT FROM NEW.status THEN
        RAISE EXCEPTION 'ledger: refund entry % status % is not its newest event''s (%): append the event first',
            OLD.id, NEW.status, v_latest
            USING ERRCODE = 'restrict_violation';
    END IF;
    RETURN NEW;
END;
$$ LANGUAGE plpgsql;

DROP TRIGGER ledger_refundentry_append_only ON ledger_refundentry;
CREATE TRIGGER ledger_refundentry_append_only
    BEFORE UPDATE OR DELETE ON ledger_refundentry
    FOR EACH ROW EXECUTE FUNCTION ledger_refundentry_status_change();

CREATE OR REPLACE FUNCTION ledger_order_check_refunds(p_order_id bigint) RETURNS void AS $$
DECLARE
    v_total numeric;
    v_refunded numeric;
    v_line record;
BEGIN
    SELECT total INTO v_total FROM ledger_order WHERE id = p_order_id FOR UPDATE;
    SELECT COALESCE(SUM(COALESCE(
               (SELECT r.new_amount FROM ledger_refundrevision r WHERE r.entry_id = e.id ORDER BY r.id DESC LIMIT 1),
               e.amount)), 0)
      INTO v_refunded
      FROM ledger_refundentry e
     WHERE e.order_id = p_order_id AND e.status IN ('pending', 'succeeded', 'external');
    IF v_refunded > v_total THEN
        RAISE EXCEPTION 'ledger: refunds of order % total %, above the order total %', p_order_id, v_refunded, v_total
            USING ERRCODE = 'check_violation';
    END IF;
    FOR v_line IN
        SELECT oi.id, oi.quantity, SUM(ri.quantity) AS refunded
          FROM ledger_orderitem oi
          JOIN ledger_refundentryitem ri ON ri.order_item_id = oi.id
          JOIN ledger_refundentry e ON e.id = ri.entry_id
         WHERE oi.order_id = p_order_id AND e.status IN ('pending', 'succeeded', 'external')
         GROUP BY oi.id, oi.quantity
        HAVING SUM(ri.quantity) > oi.quantity
    LOOP
        RAISE EXCEPTION 'ledger: order line % refunded % units of %', v_line.id, v_line.refunded, v_line.quantity
            USING ERRCODE = 'check_violation';
    END LOOP;
END;
$$ LANGUAGE plpgsql;
"""

REVERSE = r"""
CREATE OR REPLACE FUNCTION ledger_order_check_refunds(p_order_id bigint) RETURNS void AS $$
DECLARE
    v_total numeric;
    v_refunded numeric;
    v_line record;
BEGIN
    SELECT total INTO v_total FROM ledger_order WHERE id = p_order_id FOR UPDATE;
    SELECT COALESCE(SUM(COALESCE(
               (SELECT r.new_amount FROM ledger_refundrevision r WHERE r.entry_id = e.id ORDER BY r.id DESC LIMIT 1),
               e.amount)), 0)
      INTO v_refunded
      FROM ledger_refundentry e
     WHERE e.order_id = p_order_id;
    IF v_refunded > v_total THEN
        RAISE EXCEPTION 'ledger: refunds of order % total %, above the order total %', p_order_id, v_refunded, v_total
            USING ERRCODE = 'check_violation';
    END IF;
    FOR v_line IN
        SELECT oi.id, oi.quantity, SUM(ri.quantity) AS refunded
          FROM ledger_orderitem oi
          JOIN ledger_refundentryitem ri ON ri.order_item_id = oi.id
         WHERE oi.order_id = p_order_id
         GROUP BY oi.id, oi.quantity
        HAVING SUM(ri.quantity) > oi.quantity
    LOOP
        RAISE EXCEPTION 'ledger: order line % refunded % units of %', v_line.id, v_line.refunded, v_line.quantity
            USING ERRCODE = 'check_violation';
    END LOOP;
END;
$$ LANGUAGE plpgsql;
DROP TRIGGER ledger_refundentry_append_only ON ledger_refundentry;
CREATE TRIGGER ledger_refundentry_append_only
    BEFORE UPDATE OR DELETE ON ledger_refundentry
    FOR EACH ROW EXECUTE FUNCTION ledger_refuse_change();
DROP FUNCTION IF EXISTS ledger_refundentry_status_change();
DROP TRIGGER IF EXISTS ledger_refundentryevent_append_only ON ledger_refundentryevent;
"""


def backfill_events(apps, schema_editor):
    RefundEntry = apps.get_model("ledger", "RefundEntry")
    RefundEntryEvent = apps.get_model("ledger", "RefundEntryEvent")
    RefundEntryEvent.objects.bulk_create(
        RefundEntryEvent(entry_id=pk, from_status="", to_status="succeeded", source="migration",
                         reason="Recorded before payment gateways: paid out by hand.")
        for pk in RefundEntry.objects.values_list("pk", flat=True).iterator()
    )


def forward(apps, schema_editor):
    backfill_events(apps, schema_editor)
    schema_editor.execute(FORWARD, params=None)


def reverse(apps, schema_editor):
    schema_editor.execute(REVERSE, params=None)


class Migration(migrations.Migration):
    dependencies = [("ledger", "0003_payments")]

    operations = [migrations.RunPython(forward, reverse, elidable=False)]
