"""The Shopify connector (docs/shopify.md): the Admin API client, its GraphQL documents, the
mapping of a Shopify order onto the product's records, the sync, the webhooks and the refunds
(ledger/gateways/shopify.py)."""
