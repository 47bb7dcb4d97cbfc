"""The HTTP layer: what a request meets, in order. Middleware (the access line and request
id, the token check, rate limits, what a trusted proxy says), the resources (``/plants``,
the probes, the document and its page), the schemas that turn bodies into plants and back,
and the one error serializer that gives every failure the Error shape. Resources call the
store; nothing here does I/O of its own."""
