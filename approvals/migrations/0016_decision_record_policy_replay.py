"""Decision records (the facts each gate decision was taken on), policy replays and how a draft
was published. Decision records are append-only at the database too: a row trigger refuses
UPDATE and DELETE (TRUNCATE, a maintenance operation, is left alone), like the ledger's."""

import django.core.serializers.json
import django.db.models.deletion
import django.utils.timezone
from django.conf import settings
from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('approvals', '0015_threshold_currency'),
        ('ledger', '0009_drop_ledger_refund_issue_function'),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.CreateModel(
            name='PolicyReplay',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('draft_fingerprint', models.CharField(help_text="SHA-256 of the draft's rules when replayed: publishing needs this exact draft.", max_length=64)),
                ('window_days', models.PositiveIntegerField(default=30)),
                ('since', models.DateTimeField()),
                ('until', models.DateTimeField()),
                ('status', models.CharField(choices=[('queued', 'Queued'), ('running', 'Running'), ('done', 'Done'), ('failed', 'Failed')], default='queued', max_length=10)),
                ('total', models.PositiveIntegerField(default=0, help_text='Decisions in the window.')),
                ('done', models.PositiveIntegerField(default=0, help_text='Decisions replayed so far.')),
                ('flipped', models.PositiveIntegerField(default=0)),
                ('result', models.JSONField(blank=True, default=dict, encoder=django.core.serializers.json.DjangoJSONEncoder)),
                ('error', models.TextField(blank=True)),
                ('created_at', models.DateTimeField(auto_now_add=True)),
                ('finished_at', models.DateTimeField(blank=True, null=True)),
                ('created_by', models.ForeignKey(blank=True, null=True, on_delete=django.db.models.deletion.PROTECT, related_name='+', to=settings.AUTH_USER_MODEL)),
                ('draft', models.ForeignKey(on_delete=django.db.models.deletion.PROTECT, related_name='replays', to='approvals.refundpolicy')),
                ('tenant', models.ForeignKey(on_delete=django.db.models.deletion.PROTECT, related_name='+', to='ledger.tenant')),
            ],
            options={
                'ordering': ['-created_at', '-id'],
            },
        ),
        migrations.CreateModel(
            name='PolicyPublication',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('without_replay_reason', models.TextField(blank=True)),
                ('published_at', models.DateTimeField(default=django.utils.timezone.now)),
                ('policy', models.OneToOneField(on_delete=django.db.models.deletion.PROTECT, related_name='publication', to='approvals.refundpolicy')),
                ('published_by', models.ForeignKey(blank=True, null=True, on_delete=django.db.models.deletion.PROTECT, related_name='+', to=settings.AUTH_USER_MODEL)),
                ('tenant', models.ForeignKey(on_delete=django.db.models.deletion.PROTECT, related_name='+', to='ledger.tenant')),
                ('replay', models.ForeignKey(blank=True, null=True, on_delete=django.db.models.deletion.PROTECT, related_name='+', to='approvals.policyreplay')),
            ],
        ),
        migrations.CreateModel(
            name='DecisionRecord',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('ticket_ref', models.PositiveBigIntegerField(blank=True, help_text="The ticket's id.", null=True)),
                ('source', models.CharField(choices=[('agent', "the agent's draft"), ('proposal', "a person's proposal")], default='agent', max_length=10)),
                ('decided_at', models.DateTimeField()),
                ('order_external_id', models.CharField(blank=True, max_length=100)),
                ('order_status', models.CharField(blank=True, max_length=20)),
                ('order_placed_at', models.DateTimeField(blank=True, null=True)),
                ('order_age_days', models.IntegerField(blank=True, null=True)),
                ('order_total', models.DecimalField(blank=True, decimal_places=2, max_digits=12, null=True)),
                ('currency', models.CharField(max_length=3)),
                ('order_refunded', models.DecimalField(blank=True, decimal_places=2, help_text='What the ledger had refunded on the order (pending included).', max_digits=12, null=True)),
                ('order_exposure', models.DecimalField(blank=True, decimal_places=2, help_text='Refunded plus requests in flight: what dual control counts (approvals.requests).', max_digits=12, null=True)),
                ('order_lines', models.JSONField(blank=True, default=list, help_text='[{line_no, item_id, price, quantity, refunded_quantity}]')),
                ('requested_amount', models.DecimalField(blank=True, decimal_places=2, max_digits=12, null=True)),
                ('requested_currency', models.CharField(blank=True, max_length=3)),
                ('item_ids', models.JSONField(blank=True, default=list)),
                ('destination', models.JSONField(blank=True, default=dict, help_text='{kind, method, method_kind, foreign}: where the refund would go.')),
                ('proposal', models.JSONField(blank=True, default=dict, help_text='{recommendation, amount, policy_version, destination, customer_reply}')),
                ('risk', models.JSONField(blank=True, default=dict, encoder=django.core.serializers.json.DjangoJSONEncoder, help_text='The risk figures the gate exposed, if any.')),
                ('policy_version', models.CharField(blank=True, max_length=100)),
                ('outcome', models.CharField(max_length=20)),
                ('allowed_amount', models.DecimalField(blank=True, decimal_places=2, max_digits=12, null=True)),
                ('codes', models.JSONField(blank=True, default=list)),
                ('required_approvals', models.PositiveSmallIntegerField(default=0, help_text='0 when no approval was needed.')),
                ('backfilled', models.BooleanField(default=False, help_text='Rebuilt from a draft recorded before facts were kept (see missing_facts).')),
                ('missing_facts', models.JSONField(blank=True, default=list, help_text='On a backfilled record: the facts the old rows did not keep.')),
                ('order', models.ForeignKey(blank=True, null=True, on_delete=django.db.models.deletion.PROTECT, related_name='+', to='ledger.order')),
                ('policy', models.ForeignKey(blank=True, null=True, on_delete=django.db.models.deletion.PROTECT, related_name='+', to='approvals.refundpolicy')),
                ('tenant', models.ForeignKey(on_delete=django.db.models.deletion.PROTECT, related_name='+', to='ledger.tenant')),
            ],
            options={
                'ordering': ['decided_at', 'id'],
                'indexes': [models.Index(fields=['tenant', 'decided_at'], name='decision_record_window_idx')],
            },
        ),
        migrations.RunSQL(
            """
            CREATE OR REPLACE FUNCTION approvals_decision_record_refuse_change() RETURNS trigger AS $$
            BEGIN
                RAISE EXCEPTION 'approvals: % on % is refused: decision records are append-only', TG_OP, TG_TABLE_NAME
                    USING ERRCODE = 'restrict_violation';
            END;
            $$ LANGUAGE plpgsql;
            CREATE TRIGGER approvals_decisionrecord_append_only
                BEFORE UPDATE OR DELETE ON approvals_decisionrecord
                FOR EACH ROW EXECUTE FUNCTION approvals_decision_record_refuse_change();
            """,
            """
            DROP TRIGGER IF EXISTS approvals_decisionrecord_append_only ON approvals_decisionrecord;
            DROP FUNCTION IF EXISTS approvals_decision_record_refuse_change();
            """,
        ),
    ]
