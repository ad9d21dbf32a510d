"""PostgreSQL backstops for the ledger, in the style of django-hordak's check-leg trigger.

1. Refund entries, their items and their revisions are append-only: a row trigger refuses
   UPDATE and DELETE whoever sends them (the ORM refuses too, but raw SQL or a bug would not).
   TRUNCATE is left alone: it is a maintenance operation (and how test databases are flushed).
2. A deferred constraint trigger re-checks, at commit, every order touched by a new entry,
   entry item or revision: the refunded total (each entry's effective amount: its newest
   revision's new_amount, else its amount) never exceeds the order total, no line is refunded
   more units than it has, and an entry's currency and tenant are its order's. It takes the
   order row lock first, the same lock order as `ledger_refund_issue`, so two writers that
   bypass the service still cannot both squeeze under the cap.
3. Lowering an order's total below what is already refunded is refused the same way.
"""

from django.db import migrations

FORWARD = r"""
CREATE OR REPLACE FUNCTION ledger_refuse_change() RETURNS trigger AS $$
BEGIN
    RAISE EXCEPTION 'ledger: % on % is refused: the refund ledger is append-only (append a revision instead)',
        TG_OP, TG_TABLE_NAME
        USING ERRCODE = 'restrict_violation';
END;
$$ LANGUAGE plpgsql;

CREATE TRIGGER ledger_refundentry_append_only
    BEFORE UPDATE OR DELETE ON ledger_refundentry
    FOR EACH ROW EXECUTE FUNCTION ledger_refuse_change();
CREATE TRIGGER ledger_refundentryitem_append_only
    BEFORE UPDATE OR DELETE ON ledger_refundentryitem
    FOR EACH ROW EXECUTE FUNCTION ledger_refuse_change();
CREATE TRIGGER ledger_refundrevision_append_only
    BEFORE UPDATE OR DELETE ON ledger_refundrevision
    FOR EACH ROW EXECUTE FUNCTION ledger_refuse_change();

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

CREATE OR REPLACE FUNCTION ledger_check_refund_entry() RETURNS trigger AS $$
DECLARE
    v_order record;
BEGIN
    SELECT tenant_id, currency INTO v_order FROM ledger_order WHERE id = NEW.order_id;
    IF NEW.currency <> v_order.currency OR NEW.tenant_id <> v_order.tenant_id THEN
        RAISE EXCEPTION 'ledger: refund entry % does not match the currency or tenant of order %', NEW.id, NEW.order_id
            USING ERRCODE = 'check_violation';
    END IF;
    PERFORM ledger_order_check_refunds(NEW.order_id);
    RETURN NULL;
END;
$$ LANGUAGE plpgsql;

CREATE OR REPLACE FUNCTION ledger_check_refund_item() RETURNS trigger AS $$
DECLARE
    v_order_id bigint;
BEGIN
    SELECT order_id INTO v_order_id FROM ledger_refundentry WHERE id = NEW.entry_id;
    IF NOT EXISTS (SELECT 1 FROM ledger_orderitem WHERE id = NEW.order_item_id AND order_id = v_order_id) THEN
        RAISE EXCEPTION 'ledger: refund item % names a line of another order', NEW.id
            USING ERRCODE = 'check_violation';
    END IF;
    PERFORM ledger_order_check_refunds(v_order_id);
    RETURN NULL;
END;
$$ LANGUAGE plpgsql;

CREATE OR REPLACE FUNCTION ledger_check_refund_revision() RETURNS trigger AS $$
BEGIN
    PERFORM ledger_order_check_refunds((SELECT order_id FROM ledger_refundentry WHERE id = NEW.entry_id));
    RETURN NULL;
END;
$$ LANGUAGE plpgsql;

CREATE CONSTRAINT TRIGGER ledger_refundentry_check_caps
    AFTER INSERT ON ledger_refundentry
    DEFERRABLE INITIALLY DEFERRED
    FOR EACH ROW EXECUTE FUNCTION ledger_check_refund_entry();
CREATE CONSTRAINT TRIGGER ledger_refundentryitem_check_caps
    AFTER INSERT ON ledger_refundentryitem
    DEFERRABLE INITIALLY DEFERRED
    FOR EACH ROW EXECUTE FUNCTION ledger_check_refund_item();
CREATE CONSTRAINT TRIGGER ledger_refundrevision_check_caps
    AFTER INSERT ON ledger_refundrevision
    DEFERRABLE INITIALLY DEFERRED
    FOR EACH ROW EXECUTE FUNCTION ledger_check_refund_revision();

CREATE OR REPLACE FUNCTION ledger_check_order_total() RETURNS trigger AS $$
BEGIN
    PERFORM ledger_order_check_refunds(NEW.id);
    RETURN NULL;
END;
$$ LANGUAGE plpgsql;

CREATE CONSTRAINT TRIGGER ledger_order_check_total
    AFTER UPDATE OF total ON ledger_order
    DEFERRABLE INITIALLY DEFERRED
    FOR EACH ROW WHEN (NEW.total < OLD.total) EXECUTE FUNCTION ledger_check_order_total();

CREATE OR REPLACE FUNCTION ledger_check_order_item() RETURNS trigger AS $$
BEGIN
    PERFORM ledger_order_check_refunds(NEW.order_id);
    RETURN NULL;
END;
$$ LANGUAGE plpgsql;

CREATE CONSTRAINT TRIGGER ledger_orderitem_check_quantity
    AFTER UPDATE OF quantity, order_id ON ledger_orderitem
    DEFERRABLE INITIALLY DEFERRED
    FOR EACH ROW EXECUTE FUNCTION ledger_check_order_item();
"""

REVERSE = r"""
DROP TRIGGER IF EXISTS ledger_orderitem_check_quantity ON ledger_orderitem;
DROP FUNCTION IF EXISTS ledger_check_order_item();
DROP TRIGGER IF EXISTS ledger_order_check_total ON ledger_order;
DROP FUNCTION IF EXISTS ledger_check_order_total();
DROP TRIGGER IF EXISTS ledger_refundrevision_check_caps ON ledger_refundrevision;
DROP TRIGGER IF EXISTS ledger_refundentryitem_check_caps ON ledger_refundentryitem;
DROP TRIGGER IF EXISTS ledger_refundentry_check_caps ON ledger_refundentry;
DROP FUNCTION IF EXISTS ledger_check_refund_revision();
DROP FUNCTION IF EXISTS ledger_check_refund_item();
DROP FUNCTION IF EXISTS ledger_check_refund_entry();
DROP FUNCTION IF EXISTS ledger_order_check_refunds(bigint);
DROP TRIGGER IF EXISTS ledger_refundrevision_append_only ON ledger_refundrevision;
DROP TRIGGER IF EXISTS ledger_refundentryitem_append_only ON ledger_refundentryitem;
DROP TRIGGER IF EXISTS ledger_refundentry_append_only ON ledger_refundentry;
DROP FUNCTION IF EXISTS ledger_refuse_change();
"""


def forward(apps, schema_editor):
    schema_editor.execute(FORWARD, params=None)


def reverse(apps, schema_editor):
    schema_editor.execute(REVERSE, params=None)


class Migration(migrations.Migration):
    dependencies = [("ledger", "0001_initial")]

    operations = [migrations.RunPython(forward, reverse, elidable=False)]
