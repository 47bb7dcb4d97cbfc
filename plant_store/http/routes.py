"""The app's route table: each path template the service answers, named once, so that the
app (which gives each its resource) and the metrics (which name a refused request's route
before any routing) read the same list."""

PLANTS = "/plants"
PLANT = "/plants/{plant_id}"
INDEX = "/"
HEALTH = "/health"
READY = "/ready"
OPENAPI = "/openapi.json"
DOCS = "/docs"
DOCS_ASSET = "/docs/{name}"
METRICS = "/metrics"
ROUTES = (PLANTS, PLANT, INDEX, HEALTH, READY, OPENAPI, DOCS, DOCS_ASSET, METRICS)
