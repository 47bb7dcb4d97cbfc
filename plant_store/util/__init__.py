"""Small mechanisms with no knowledge of plants: files made, opened and replaced safely
(:mod:`~plant_store.util.files`), threads that serve several callers: one computation
shared, calls batched, deadlines watched (:mod:`~plant_store.util.concurrency`), which hosts
stay on this machine, forwarded headers and the wrapper that applies them
(:mod:`~plant_store.util.forwarded`), the one registry of what a forked child redoes
(:mod:`~plant_store.util.at_fork`), and plain words: a setting's text read into its value,
counted nouns (:mod:`~plant_store.util.words`)."""
