"""tests/unit mirrors the package (issue 51, item 6): every module of plant_store/ with logic
(a function or a class) has its test file at the mirrored path, ``plant_store/a/b.py`` ->
``tests/unit/a/test_b.py``, or an entry in ELSEWHERE naming the files that test it and why,
so a reader finds a module's tests without a search and a new module cannot go untested
unnoticed."""

import ast

from support.paths import ROOT

PACKAGE = ROOT / "plant_store"
UNIT = ROOT / "tests" / "unit"

# Modules tested somewhere other than their mirrored file: module (its path under
# plant_store/) -> (the test files that cover it, under tests/; why not the mirrored one).
# A module moved or merged moves its line here; a line whose module or files are gone fails.
ELSEWHERE = {
    "app.py": (["unit/test_embedding.py", "unit/http/test_errors.py"],
               "create_app is the embedding API; every HTTP test builds the app through it"),
    "service.py": (["unit/test_embedding.py", "integration/test_serve.py"],
                   "the lifecycle opens and closes real parts: tested where they run"),
    "wsgi.py": (["unit/serving/test_lazy_app.py"],
                "plant_store.wsgi:application is the lazy app, tested with it"),
    "gunicorn_hooks.py": (["unit/test_public_names.py", "integration/test_gunicorn.py"],
                          "a re-export of serving/gunicorn_hooks for gunicorn's -c"),
    "metrics/prometheus_adapter.py": (["unit/test_library_pins.py"],
                              "an adapter to prometheus_client's internals, pinned there"),
    "testing.py": (["unit/test_embedding.py"], "the testing API, tested as a host uses it"),
    "cli/__init__.py": (["unit/cli/test_pip_user_texts.py", "integration/test_cli.py"],
                        "main's re-export, driven through the command line"),
    "cli/docs.py": (["unit/cli/test_pages.py"], "prints the pages pages.py makes"),
    "cli/grammar.py": (["unit/cli/test_pip_user_texts.py", "integration/test_cli.py"],
                       "the command line's grammar, tested through its help and errors"),
    "cli/program.py": (["unit/cli/test_pip_user_texts.py", "unit/cli/test_plants.py"],
                       "the entry point and its parser, tested through each command"),
    "cli/serve.py": (["integration/test_serve.py"], "starts a server"),
    "cli/store_commands.py": (["integration/test_export_import.py", "integration/test_cli.py",
                               "postgres/test_readonly_commands.py"],
                              "export, import, compact, tokens and db, run as commands"),
    "cli/webhook_commands.py": (["integration/test_webhook_retry.py",
                                 "postgres/test_webhooks_postgres_cli.py"],
                                "retries against a running server's store"),
    "http/etags.py": (["unit/http/test_plant_update.py"], "ETags through GET and PUT"),
    "http/json_fallback.py": (["unit/http/test_create_plant.py"],
                              "the JSON body parser, through POST's rows"),
    "http/middleware.py": (["unit/http/test_auth.py", "unit/http/test_access_log.py"],
                           "the middleware, through the app"),
    "http/operational.py": (["unit/http/test_ready.py", "unit/test_version.py",
                             "unit/http/test_docs_page.py", "unit/metrics/test_counters.py"],
                            "/health, /ready, /openapi.json, /docs and /metrics"),
    "http/plants.py": (["unit/http/test_create_plant.py", "unit/http/test_list_plants.py",
                        "unit/http/test_delete_plants.py", "unit/http/test_plant_update.py"],
                       "one resource, one test file per operation's table"),
    "http/request_id.py": (["unit/http/test_access_log.py"], "request ids in access lines"),
    "serving/connection_upkeep.py": (["integration/test_connection_upkeep_live.py"],
                                     "reads the kernel's view of real sockets"),
    "serving/gunicorn_hooks.py": (["integration/test_gunicorn.py"], "runs inside gunicorn"),
    "serving/server.py": (["integration/test_serve.py", "integration/test_serve_granian.py",
                           "unit/http/test_https.py", "integration/test_tls_live.py"],
                          "starts waitress or granian; the clear-text warning of require_https"),
    "serving/waitress_loop.py": (["integration/test_serve.py",
                                  "integration/test_waitress_errors.py"],
                                 "waitress's loop and drain, on a real server"),
    "serving/waitress_adapter.py": (["integration/test_waitress_pins.py",
                                     "integration/test_waitress_errors.py"],
                                    "waitress internals, pinned on a real server"),
    "stores/__init__.py": (["unit/stores/test_store_contract.py"],
                           "the stores' public names, used by every store test"),
    "stores/base.py": (["unit/stores/test_store_contract.py", "unit/stores/test_store_update.py",
                        "unit/stores/test_create_many.py", "unit/stores/test_versions.py"],
                       "the Store interface: its contract, run on every store"),
    "stores/lock.py": (["integration/test_prefork.py", "integration/test_filesystems.py"],
                       "a lock between processes"),
    "stores/memory.py": (["unit/stores/test_store_contract.py", "unit/stores/test_store_update.py"],
                         "a backend: the contract tests it"),
    "stores/outbox.py": (["unit/stores/test_store_contract.py"], "the OutboxStore contract"),
    "stores/records.py": (["unit/stores/jsonfile/test_journal.py", "unit/http/test_odd_inputs.py",
                           "unit/stores/test_store_update.py"],
                          "the records, read back; If-Match on the store"),
    "stores/jsonfile/snapshot.py": (["integration/test_cli.py", "integration/test_journal_live.py"],
                                    "read beside a running server by check and plants list"),
    "stores/jsonfile/store.py": (["unit/stores/jsonfile/test_store.py",
                                  "unit/stores/jsonfile/test_compaction.py",
                                  "unit/stores/test_store_contract.py"],
                                 "faults and compaction; its semantics are the contract"),
    "stores/postgres/attempts.py": (["postgres/test_postgres_truth.py",
                                     "integration/test_ready_live.py"],
                                    "needs a real PostgreSQL"),
    "stores/postgres/connection.py": (["postgres/test_postgres_down.py",
                                       "postgres/test_postgres.py"], "needs a real PostgreSQL"),
    "stores/postgres/pool_adapter.py": (["unit/test_library_pins.py"],
                                        "psycopg_pool's internals, pinned there"),
    "stores/postgres/schema.py": (["postgres/test_postgres.py", "postgres/test_postgres_update.py"],
                                  "migrations on a real PostgreSQL"),
    "stores/postgres/store.py": (["postgres/test_store_contract_postgresql.py",
                                  "postgres/test_postgres.py"], "needs a real PostgreSQL"),
    "stores/postgres/writes.py": (["postgres/test_postgres_batches.py",
                                   "postgres/test_bulk_import.py",
                                   "postgres/test_store_contract_postgresql.py"],
                                  "needs a real PostgreSQL"),
    "util/concurrency.py": (["unit/util/test_batches.py", "unit/util/test_watchdog.py",
                             "unit/http/test_rate_limit.py"],
                            "one test file a mechanism: the batcher, the watchdog; single "
                            "flight with the rate limit"),
    "util/loopback.py": (["unit/http/test_https.py"], "who is on loopback, for require_https"),
    "util/words.py": (["integration/test_cli.py"], "one plural helper, in what commands print"),
    "webhooks/bounded_post.py": (["unit/webhooks/test_webhook_lanes.py",
                                  "integration/test_webhook_lanes_live.py"],
                                 "a delivery bounded in time, against real receivers"),
    "webhooks/http_client_adapter.py": (["unit/test_library_pins.py"],
                                        "http.client's internals, pinned there"),
    "webhooks/retry_requests.py": (["integration/test_webhook_retry.py"],
                                   "a retry handed to a running server"),
}


def modules_with_logic():
    """Each module of the package (its path under plant_store/) that defines a function or a
    class: a module of re-exports and constants alone has nothing of its own to test."""
    for path in sorted(PACKAGE.rglob("*.py")):
        tree = ast.parse(path.read_text())
        if any(isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef)
               for node in tree.body):
            yield path.relative_to(PACKAGE).as_posix()


def mirrored(module):
    """``a/b.py`` -> tests/unit/a/test_b.py (a package's ``__init__.py``: its folder's
    test_<package>.py)."""
    folder, _, name = module.rpartition("/")
    if name == "__init__.py":
        folder, _, name = folder.rpartition("/")
        name += ".py"
    return UNIT / folder / f"test_{name}"


def test_every_module_with_logic_has_its_mirrored_test_file_or_says_where_it_is_tested():
    lacking = [f"plant_store/{module}: no {mirrored(module).relative_to(ROOT)}, and no "
               f"entry in ELSEWHERE (tests/unit/test_layout.py) naming its tests"
               for module in modules_with_logic()
               if not mirrored(module).exists() and module not in ELSEWHERE]
    assert not lacking, "\n".join(lacking)


def test_every_entry_of_elsewhere_names_a_module_and_test_files_that_exist():
    stale = []
    for module, (files, why) in ELSEWHERE.items():
        if not (PACKAGE / module).exists():
            stale.append(f"ELSEWHERE[{module!r}]: plant_store/{module} is gone (moved or "
                         f"merged: move its entry to the new path, or drop it)")
        stale += [f"ELSEWHERE[{module!r}]: tests/{name} is gone" for name in files
                  if not (ROOT / "tests" / name).exists()]
        if not why:
            stale.append(f"ELSEWHERE[{module!r}]: say why its tests are not the mirrored file")
    assert not stale, "\n".join(stale)


def test_every_test_file_ci_runs_on_the_newest_releases_exists():
    """.ci/run hands .ci/library-tests to pytest on the newest release of every
    dependency; a file moved without its line there made that run collect nothing (issue
    51's moves: "no tests ran", exit status 5)."""
    listed = (ROOT / ".ci" / "library-tests").read_text().split()
    assert listed, ".ci/library-tests lists no test file"
    missing = [name for name in listed if not (ROOT / name).is_file()]
    assert not missing, f".ci/library-tests names files that are gone: {missing}"
