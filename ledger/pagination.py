"""Paginating serialised rows without serialising the whole queryset."""


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
