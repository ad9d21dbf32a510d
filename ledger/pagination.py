"""Paginating serialised rows without serialising the whole queryset, in bounded pages."""

from ninja import Field, Schema
from ninja.pagination import LimitOffsetPagination


class SerializedQuerySet:
    """A queryset that ninja's paginator can count and slice; only the rows of the page asked
    for are read and passed through `serialize`."""

    def __init__(self, queryset, serialize):
        self.queryset = queryset
        self.serialize = serialize

    def all(self):
        return self

    def __len__(self):
        return self.queryset.count()

    def count(self):
        return self.queryset.count()

    def __getitem__(self, item):
        return [self.serialize(row) for row in self.queryset[item]]


# docs/api.md: a page is at most 100 rows. An offset is bounded too: a larger one (say 10^20) does
# not fit the database's integer and would fail inside the query instead of answering 422.
MAX_PAGE_SIZE = 100
MAX_OFFSET = 2**31 - 1


class LimitOffsetPage(LimitOffsetPagination):
    """ninja's limit/offset pagination with bounds: `limit` 1..100 (default 100), `offset`
    0..2^31-1. Anything else, non-numbers included, is a 422 naming the parameter."""

    class Input(Schema):
        limit: int = Field(MAX_PAGE_SIZE, ge=1, le=MAX_PAGE_SIZE, description="Rows per page, at most 100.")
        offset: int = Field(0, ge=0, le=MAX_OFFSET, description="Rows to skip.")

    def __init__(self, **kwargs):
        super().__init__(max_limit=MAX_PAGE_SIZE, **kwargs)
