"""The real-server half of tests/unit/http/test_docs_page.py: gET /docs: Swagger UI on the
document, every file of it served by the service itself."""

import pathlib
import shutil

import pytest

from support.servers import Server, exchange

FILL = """
const [field, text] = arguments;
Object.getOwnPropertyDescriptor(HTMLTextAreaElement.prototype, "value").set.call(field, text);
field.dispatchEvent(new Event("input", {bubbles: true}));
"""
ARTIFACT = pathlib.Path(__file__).parents[2] / "test-artifacts" / "docs-page.png"


def test_paths_that_climb_out_of_docs_are_404_on_the_real_server(tmp_path):
    with Server(tmp_path / "data") as server:
        for path in ("/docs/../../setup.cfg", "/docs/..%2F..%2Fsetup.cfg",
                     "/docs/%2e%2e/%2e%2e/etc/passwd", "/docs//etc/passwd"):
            head = f"GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
            answer = exchange(server.host, server.port, head.encode())
            assert (answer.status, answer.body["error"]) == (404, 404), path


@pytest.mark.slow
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
