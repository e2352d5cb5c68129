"""The browser tier: the HTML report in a real headless browser (Debian chromium)."""
