"""The GraphQL documents the connector sends (Admin API, the version in SHOPIFY_API_VERSION).
A test validates each against the fake's schema (ledger/tests/fake_shopify/), which uses
Shopify's own type and field names."""

SHOP = """
query Shop {
  shop { name currencyCode myshopifyDomain }
}
"""

# The nested lists of an order a page reads at most (a page's cost grows with them). An order with
# more is read again whole (ledger/shopify/nested.py): line items page on their own connection,
# the plain lists (transactions, refunds) are asked again with a larger `first`.
LINE_ITEMS_FIRST = 10
TRANSACTIONS_FIRST = 5
REFUNDS_FIRST = 3
REFUND_TRANSACTIONS_FIRST = 3

# What the mapping reads of a line item, a transaction and a refund.
LINE_ITEM_FIELDS = """
fragment LineItemFields on LineItem {
  id
  name
  sku
  quantity
  refundableQuantity
  originalUnitPriceSet { shopMoney { amount currencyCode } }
}
"""

TRANSACTION_FIELDS = """
fragment TransactionFields on OrderTransaction {
  id
  kind
  status
  gateway
  amountSet { shopMoney { amount currencyCode } }
  maximumRefundableV2 { amount }
  parentTransaction { id }
}
"""

REFUND_FIELDS = """
fragment RefundFields on Refund {
  id
  createdAt
  note
  totalRefundedSet { shopMoney { amount currencyCode } }
  transactions(first: {transactions}) {
    nodes {
      id
      kind
      status
      gateway
      amountSet { shopMoney { amount currencyCode } }
      parentTransaction { id }
    }
    pageInfo { hasNextPage }
  }
}
""".replace("{transactions}", str(REFUND_TRANSACTIONS_FIRST))

# What the mapping reads of the order itself (the paged read and the bulk one share it).
ORDER_OWN_FIELDS = """
fragment OrderOwnFields on Order {
  id
  name
  createdAt
  updatedAt
  processedAt
  cancelledAt
  note
  email
  currencyCode
  displayFulfillmentStatus
  customer { id email displayName }
  totalPriceSet { shopMoney { amount currencyCode } }
  totalRefundedSet { shopMoney { amount currencyCode } }
}
"""

# Everything the mapping reads of an order (ledger/shopify/mapping.py).
ORDER_FIELDS = (
    """
fragment OrderFields on Order {
  ...OrderOwnFields
  lineItems(first: {line_items}) {
    nodes { ...LineItemFields }
    pageInfo { hasNextPage endCursor }
  }
  transactions(first: {transactions}) { ...TransactionFields }
  refunds(first: {refunds}) { ...RefundFields }
}
""".replace("{line_items}", str(LINE_ITEMS_FIRST))
    .replace("{transactions}", str(TRANSACTIONS_FIRST))
    .replace("{refunds}", str(REFUNDS_FIRST))
    + ORDER_OWN_FIELDS
    + LINE_ITEM_FIELDS
    + TRANSACTION_FIELDS
    + REFUND_FIELDS
)

ORDERS_PAGE = (
    """
query OrdersPage($first: Int!, $after: String, $query: String) {
  orders(first: $first, after: $after, sortKey: UPDATED_AT, query: $query) {
    nodes { ...OrderFields }
    pageInfo { hasNextPage endCursor }
  }
}
"""
    + ORDER_FIELDS
)

ORDER = (
    """
query Order($id: ID!) {
  order(id: $id) { ...OrderFields }
}
"""
    + ORDER_FIELDS
)

# An order's nested lists read whole when a page's first ones were not all of them
# (ledger/shopify/nested.py). Line items page; a plain list cannot, so it is asked for up to
# its `first` at once, within Shopify's 1,000-point cap for one query.
ORDER_LINE_ITEMS_FIRST = 100
ORDER_LINE_ITEMS = (
    """
query OrderLineItems($id: ID!, $after: String) {
  order(id: $id) {
    id
    lineItems(first: {first}, after: $after) {
      nodes { ...LineItemFields }
      pageInfo { hasNextPage endCursor }
    }
  }
}
""".replace("{first}", str(ORDER_LINE_ITEMS_FIRST))
    + LINE_ITEM_FIELDS
)

ORDER_TRANSACTIONS_FIRST = 100
ORDER_TRANSACTIONS = (
    """
query OrderTransactions($id: ID!) {
  order(id: $id) {
    id
    transactions(first: {first}) { ...TransactionFields }
  }
}
""".replace("{first}", str(ORDER_TRANSACTIONS_FIRST))
    + TRANSACTION_FIELDS
)

ORDER_REFUND_LIST_FIRST = 30
ORDER_REFUND_LIST = (
    """
query OrderRefundList($id: ID!) {
  order(id: $id) {
    id
    refunds(first: {first}) { ...RefundFields }
  }
}
""".replace("{first}", str(ORDER_REFUND_LIST_FIRST))
    + REFUND_FIELDS
)

# Every transaction that can still return money, with its gateway and how much: a leg is refunded
# on its own transaction only, never beyond what Shopify says it can return.
SUGGESTED_REFUND = """
query SuggestedRefund($id: ID!) {
  order(id: $id) {
    id
    suggestedRefund(suggestFullRefund: true) {
      amountSet { shopMoney { amount currencyCode } }
      suggestedTransactions {
        gateway
        amountSet { shopMoney { amount currencyCode } }
        maximumRefundableSet { shopMoney { amount } }
        parentTransaction { id }
      }
    }
  }
}
"""

# The key is the ledger entry's idempotency key (the approval's, per leg): a retry after a lost
# answer is the same refund, never a second one.
REFUND_CREATE = """
mutation RefundCreate($input: RefundInput!, $key: String!) {
  refundCreate(input: $input) @idempotent(key: $key) {
    refund {
      id
      createdAt
      note
      totalRefundedSet { shopMoney { amount currencyCode } }
      transactions(first: 4) {
        nodes { id kind status gateway amountSet { shopMoney { amount currencyCode } } parentTransaction { id } }
      }
    }
    userErrors { field message }
  }
}
"""

ORDER_REFUNDS = """
query OrderRefunds($id: ID!) {
  order(id: $id) {
    id
    name
    totalRefundedSet { shopMoney { amount currencyCode } }
    refunds(first: 20) {
      id
      createdAt
      note
      totalRefundedSet { shopMoney { amount currencyCode } }
      transactions(first: 4) {
        nodes { id kind status gateway amountSet { shopMoney { amount currencyCode } } parentTransaction { id } }
      }
    }
  }
}
"""

# The backfill's bulk query (ledger/shopify/bulk.py): what ORDER_FIELDS reads, with no `first` (a
# bulk operation reads every row). Shopify refuses a connection inside a list in a bulk query, so
# the refunds come without `transactions`; the refund transactions are among the order's own
# `transactions` (kind REFUND) and bulk.py puts them back under their refund.
BULK_ORDERS = (
    """
{
  orders(sortKey: UPDATED_AT) {
    edges {
      node {
        ...OrderOwnFields
        lineItems { edges { node { ...LineItemFields } } }
        transactions { ...TransactionFields }
        refunds { id createdAt note totalRefundedSet { shopMoney { amount currencyCode } } }
      }
    }
  }
}
"""
    + ORDER_OWN_FIELDS
    + LINE_ITEM_FIELDS
    + TRANSACTION_FIELDS
)

BULK_OPERATION_FIELDS = """
fragment BulkOperationFields on BulkOperation {
  id status errorCode objectCount rootObjectCount url partialDataUrl createdAt completedAt
}
"""

# groupObjects: a parent's line items follow it directly, so an order is complete when the next
# order starts, and the file can be applied while it streams.
BULK_RUN = (
    """
mutation BulkRun($query: String!) {
  bulkOperationRunQuery(query: $query, groupObjects: true) {
    bulkOperation { ...BulkOperationFields }
    userErrors { code field message }
  }
}
"""
    + BULK_OPERATION_FIELDS
)

BULK_OPERATION = (
    """
query BulkOperation($id: ID!) {
  bulkOperation(id: $id) { ...BulkOperationFields }
}
"""
    + BULK_OPERATION_FIELDS
)

ALL = {
    "SHOP": SHOP,
    "ORDERS_PAGE": ORDERS_PAGE,
    "ORDER": ORDER,
    "ORDER_LINE_ITEMS": ORDER_LINE_ITEMS,
    "ORDER_TRANSACTIONS": ORDER_TRANSACTIONS,
    "ORDER_REFUND_LIST": ORDER_REFUND_LIST,
    "SUGGESTED_REFUND": SUGGESTED_REFUND,
    "REFUND_CREATE": REFUND_CREATE,
    "ORDER_REFUNDS": ORDER_REFUNDS,
    "BULK_ORDERS": BULK_ORDERS,
    "BULK_RUN": BULK_RUN,
    "BULK_OPERATION": BULK_OPERATION,
}
