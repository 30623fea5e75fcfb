"""Live-scaled groups: scale-out / scale-in within a provisioned group,
without a restart (docs/elastic.md): the protocol and an aggregation's
ranks (:mod:`.scale`), and what a window join adds (:mod:`.join`)."""
