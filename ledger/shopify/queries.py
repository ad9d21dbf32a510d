"""The GraphQL documents the connector sends (Admin API, the version in SHOPIFY_API_VERSION).
A test validates each against the fake's schema (ledger/tests/fake_shopify/), which uses
Shopify's own type and field names."""

SHOP = """
query Shop {
  shop { name currencyCode myshopifyDomain }
}
"""

# Everything the mapping reads of an order (ledger/shopify/mapping.py).
ORDER_FIELDS = """
fragment OrderFields on Order {
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
  lineItems(first: 10) {
    nodes {
      id
      name
      sku
      quantity
      refundableQuantity
      originalUnitPriceSet { shopMoney { amount } }
    }
  }
  transactions(first: 5) {
    id
    kind
    status
    gateway
    amountSet { shopMoney { amount currencyCode } }
    maximumRefundableV2 { amount }
    parentTransaction { id }
  }
  refunds(first: 3) {
    id
    createdAt
    note
    totalRefundedSet { shopMoney { amount currencyCode } }
    transactions(first: 3) {
      nodes {
        id
        kind
        status
        gateway
        amountSet { shopMoney { amount currencyCode } }
        parentTransaction { id }
      }
    }
  }
}
"""

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
BULK_ORDERS = """
{
  orders(sortKey: UPDATED_AT) {
    edges {
      node {
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
        lineItems {
          edges {
            node {
              id
              name
              sku
              quantity
              refundableQuantity
              originalUnitPriceSet { shopMoney { amount } }
            }
          }
        }
        transactions {
          id
          kind
          status
          gateway
          amountSet { shopMoney { amount currencyCode } }
          maximumRefundableV2 { amount }
          parentTransaction { id }
        }
        refunds {
          id
          createdAt
          note
          totalRefundedSet { shopMoney { amount currencyCode } }
        }
      }
    }
  }
}
"""

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
    "SUGGESTED_REFUND": SUGGESTED_REFUND,
    "REFUND_CREATE": REFUND_CREATE,
    "ORDER_REFUNDS": ORDER_REFUNDS,
    "BULK_ORDERS": BULK_ORDERS,
    "BULK_RUN": BULK_RUN,
    "BULK_OPERATION": BULK_OPERATION,
}
