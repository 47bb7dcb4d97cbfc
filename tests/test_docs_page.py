"""GET /docs: Swagger UI on the document, every file of it served by the service itself."""

import io
import pathlib
import re
import shutil

import pytest
import webtest

from conftest import DOCUMENT, assert_error
from plant_store.app import create_app
from plant_store.http.docs_page import ASSET_CACHING, ASSETS
from plant_store.stores import MemoryStore
from serverproc import Server, exchange

FILL = """
const [field, text] = arguments;
Object.getOwnPropertyDescriptor(HTMLTextAreaElement.prototype, "value").set.call(field, text);
field.dispatchEvent(new Event("input", {bubbles: true}));
"""
ARTIFACT = pathlib.Path(__file__).parent.parent / "test-artifacts" / "docs-page.png"


@pytest.fixture
def anonymous(config, tokens):
    """The app with no token on any request."""
    return webtest.TestApp(create_app(config, store=MemoryStore(), tokens=tokens,
                                             log_stream=io.StringIO()))


def test_the_page_is_public_small_and_links_only_its_own_files(anonymous):
    response = anonymous.get("/docs", status=200)
    assert response.content_type == "text/html"
    assert response.headers["Cache-Control"] == "no-cache"
    assert "script-src 'self';" in response.headers["Content-Security-Policy"]
    assert len(response.body) < 1024
    links = re.findall(r'(?:href|src)="([^"]*)"', response.text)
    # Relative, so /api/docs loads /api/docs/...; and each one served.
    assert sorted(links) == sorted(f"docs/{name}" for name in ASSETS)
    assert "<script>" not in response.text  # the policy forbids inline scripts
    assert 'url: "openapi.json"' in anonymous.get("/docs/docs_page.js").text


@pytest.mark.parametrize("name", sorted(ASSETS))
def test_each_asset_has_its_type_and_is_cached_by_its_etag(anonymous, name):
    path, content_type = ASSETS[name]
    response = anonymous.get(f"/docs/{name}", status=200)
    assert response.headers["Content-Type"] == content_type
    assert response.body == path.read_bytes()
    assert response.headers["Cache-Control"] == ASSET_CACHING
    assert response.headers["X-Content-Type-Options"] == "nosniff"
    etag = response.headers["ETag"]
    again = anonymous.get(f"/docs/{name}", headers={"If-None-Match": etag}, status=304)
    assert again.body == b"" and again.headers["ETag"] == etag
    anonymous.get(f"/docs/{name}", headers={"If-None-Match": "*"}, status=304)  # RFC 9110
    head = anonymous.head(f"/docs/{name}", status=200)
    assert head.body == b"" and head.headers["Content-Type"] == content_type


@pytest.mark.parametrize("name", [
    "swagger-initializer.js",  # in the package, but not served
    "LICENSE", "swagger-ui-bundle.js.map", "docs_page.py", "docs_page.html",
    "..", "%2E%2E", "..%2Fopenapi.json", "..%2F..%2Fsetup.cfg",
])
def test_any_other_name_under_docs_is_a_404_in_the_error_shape(anonymous, name):
    assert_error(anonymous.get(f"/docs/{name}", status=404), 404)


def test_paths_that_climb_out_of_docs_are_404_on_the_real_server(tmp_path):
    with Server(tmp_path / "data") as server:
        for path in ("/docs/../../setup.cfg", "/docs/..%2F..%2Fsetup.cfg",
                     "/docs/%2e%2e/%2e%2e/etc/passwd", "/docs//etc/passwd"):
            head = f"GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
            answer = exchange(server.host, server.port, head.encode())
            assert (answer.status, answer.body["error"]) == (404, 404), path


def test_the_document_lists_the_page_and_its_files():
    assert {"/docs", "/docs/{name}"} <= set(DOCUMENT["paths"])
    parameter = DOCUMENT["paths"]["/docs/{name}"]["get"]["parameters"][0]
    assert parameter["schema"]["enum"] == sorted(ASSETS)


def test_a_plant_created_through_the_page_is_stored(tmp_path, browser, capsys):
    """Authorize, POST /plants, Try it out, a body of our own, Execute: a real browser."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions as shown
    from selenium.webdriver.support.ui import WebDriverWait

    with Server(tmp_path / "data") as server:
        token = server.first_token
        driver, wait = browser.driver, WebDriverWait(browser.driver, 10, 0.05)

        def click(css):
            wait.until(shown.element_to_be_clickable((By.CSS_SELECTOR, css))).click()

        browser.open(f"{server.url}/docs")
        wait.until(lambda d: len(d.find_elements(By.CSS_SELECTOR, ".opblock")) >= 7)
        ids = {e.get_attribute("id") for e in driver.find_elements(By.CSS_SELECTOR, ".opblock")}
        assert {"operations-plants-addPlant", "operations-plants-listPlants",
                "operations-plants-deletePlant", "operations-operations-health"} <= ids

        click("button.authorize")
        wait.until(shown.visibility_of_element_located(
            (By.CSS_SELECTOR, ".modal-ux input"))).send_keys(token)
        click(".modal-ux button.modal-btn.authorize")
        click(".modal-ux button.btn-done")

        operation = "#operations-plants-addPlant"
        click(f"{operation} .opblock-summary-control")
        click(f"{operation} .try-out__btn")
        body = wait.until(shown.visibility_of_element_located(
            (By.CSS_SELECTOR, f"{operation} textarea.body-param__text")))
        # As typing does, in one step: React keeps the value, and an input event tells it
        # (send_keys re-renders the page on each key, which takes seconds).
        driver.execute_script(FILL, body, '{"id": 4242, "name": "Pilea", "tag": "urticaceae"}')
        click(f"{operation} button.execute")
        answer = f"{operation} .live-responses-table tr.response .response-col_status"
        status = wait.until(shown.visibility_of_element_located((By.CSS_SELECTOR, answer)))
        assert status.text.split()[0] == "200"

        shot = tmp_path / "docs-page.png"
        driver.save_screenshot(str(shot))
        ARTIFACT.parent.mkdir(exist_ok=True)
        shutil.copyfile(shot, ARTIFACT)
        with capsys.disabled():
            print(f"\ndocs page screenshot: {ARTIFACT}")

        browser.drain()
        assert browser.failures == [] and browser.console == []
        loaded = {url.removeprefix(server.url) for url, code in browser.responses.items()
                  if code == 200}
        assert {"/docs", "/openapi.json", "/plants", "/docs/swagger-ui-bundle.js",
                "/docs/swagger-ui.css", "/docs/docs_page.js"} <= loaded

        status, _, plants = server.request("GET", "/plants", token=token)
        assert (status, plants) == (200, [{"name": "Pilea", "tag": "urticaceae"}])
