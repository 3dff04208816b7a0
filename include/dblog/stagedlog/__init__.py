"""The staged log: where its segments and chunks live on any storage, written atomically, and
which of them retention may remove."""
