"""Debian's headless Chromium, driven by Selenium through Debian's chromedriver, with every
network event and console message of the page recorded, so a test can assert that no
request failed. Nothing is downloaded: both binaries must be installed (.ci/run does it)."""

import json
import os
import shutil

CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"


def find_chromium() -> tuple[str, str] | None:
    """(chromium, chromedriver), or None when either is missing."""
    paths = (shutil.which("chromium") or CHROMIUM, shutil.which("chromedriver") or CHROMEDRIVER)
    return paths if all(os.access(p, os.X_OK) for p in paths) else None


class Browser:
    """One headless Chromium; ``open`` starts a page afresh and forgets earlier events."""

    def __init__(self, chromium: str, chromedriver: str, trusted_keys: tuple[str, ...] = ()
                 ) -> None:
        """``trusted_keys``: the base64 SHA-256 of the public keys of test certificates the
        browser accepts (their CA is no CA it knows)."""
        from selenium import webdriver
        from selenium.webdriver.chrome.service import Service

        options = webdriver.ChromeOptions()
        options.binary_location = chromium
        for flag in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage",
                     "--window-size=1280,2000", "--no-first-run",
                     "--disable-background-networking", "--disable-component-update"):
            options.add_argument(flag)
        if trusted_keys:
            options.add_argument("--ignore-certificate-errors-spki-list=" + ",".join(trusted_keys))
        options.set_capability("goog:loggingPrefs", {"performance": "ALL", "browser": "ALL"})
        self.driver = webdriver.Chrome(options=options, service=Service(chromedriver))
        self.responses: dict[str, int] = {}  # URL -> last status
        self.failures: list[str] = []
        self.console: list[str] = []

    def open(self, url: str) -> None:
        self.drain()
        self.responses.clear(), self.failures.clear(), self.console.clear()
        self.driver.get(url)

    def drain(self) -> None:
        """Move the browser's buffered network events and console errors into the lists."""
        urls = {}
        for entry in self.driver.get_log("performance"):
            message = json.loads(entry["message"])["message"]
            params = message.get("params", {})
            if message["method"] == "Network.requestWillBeSent":
                urls[params["requestId"]] = params["request"]["url"]
            elif message["method"] == "Network.responseReceived":
                response = params["response"]
                self.responses[response["url"]] = response["status"]
                if response["status"] >= 400:
                    self.failures.append(f"{response['status']} {response['url']}")
            elif message["method"] == "Network.loadingFailed" and not params.get("canceled"):
                url = urls.get(params["requestId"], params["requestId"])
                self.failures.append(f"{params['errorText']} {url}")
        self.console += [entry["message"] for entry in self.driver.get_log("browser")
                         if entry["level"] == "SEVERE"]

    def quit(self) -> None:
        self.driver.quit()
