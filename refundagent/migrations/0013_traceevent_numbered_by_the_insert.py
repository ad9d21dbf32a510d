# The database gives a trace event written without a place the next place of its ticket's
# trace, row by row in the order of the INSERT (refundagent.tracing): the writer still holds
# the lock the trace is numbered under, so the numbering is the INSERT's own, as before, without
# a subquery per event for the ORM to build and compile. An event given a place keeps it.

from django.db import migrations


class Migration(migrations.Migration):

    dependencies = [
        ('refundagent', '0012_ticket_reply'),
    ]

    operations = [
        migrations.RunSQL(
            """
            CREATE OR REPLACE FUNCTION refundagent_traceevent_number() RETURNS trigger AS $$
            BEGIN
                IF NEW.seq IS NULL THEN
                    -- Rows of the same INSERT written before this one are seen here.
                    SELECT COALESCE(MAX(seq), 0) + 1 INTO NEW.seq
                        FROM refundagent_traceevent WHERE ticket_id = NEW.ticket_id;
                END IF;
                RETURN NEW;
            END;
            $$ LANGUAGE plpgsql VOLATILE;
            CREATE TRIGGER refundagent_traceevent_numbered
                BEFORE INSERT ON refundagent_traceevent
                FOR EACH ROW EXECUTE FUNCTION refundagent_traceevent_number();
            """,
            """
            DROP TRIGGER IF EXISTS refundagent_traceevent_numbered ON refundagent_traceevent;
            DROP FUNCTION IF EXISTS refundagent_traceevent_number();
            """,
        ),
    ]
