#!/usr/bin/env python3
"""Checks a pmsim report as a reader sees it: opens DIR/index.html in headless
Chromium (Debian's chromium and chromium-driver, driven by Selenium) and
checks that

  * the page has a title,
  * the browser logged no errors (a missing file, a script error),
  * every image loaded (complete, natural width > 0),
  * every figure has a non-empty caption and every table has rows,

then saves a full-page screenshot. Prints one line per problem and exits 1 if
there is any, else prints a one-line summary and exits 0.

    python3 scripts/check-report.py DIR [--screenshot FILE.png] [--json]
"""

import argparse
import json
import os
import shutil
import sys
import tempfile


def fail(msg):
    print(f"check-report: error: {msg}", file=sys.stderr)
    sys.exit(2)


def browser(profile):
    try:
        from selenium import webdriver
        from selenium.webdriver.chrome.service import Service
    except ImportError:
        fail("Selenium is not installed (python3 -m pip install selenium; scripts/setup.sh does it)")
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    driver = shutil.which("chromedriver")
    if not chromium or not driver:
        fail("chromium and chromedriver are needed (apt-get install chromium chromium-driver; scripts/setup.sh does it)")
    opts = webdriver.ChromeOptions()
    opts.binary_location = chromium
    # Headless, and quiet on a machine without a network: no background
    # fetches, no component updates, a fresh profile.
    for a in ["--headless=new", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
              "--disable-background-networking", "--disable-component-update", "--disable-sync",
              "--disable-dev-shm-usage", f"--user-data-dir={profile}", "--window-size=1400,1000"]:
        opts.add_argument(a)
    opts.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    # An explicit driver path: Selenium must not try to download one.
    return webdriver.Chrome(service=Service(executable_path=driver), options=opts)


PAGE_FACTS = """
const imgs = Array.from(document.images).map(i => ({src: i.getAttribute('src'), complete: i.complete,
                                                     width: i.naturalWidth}));
const figs = Array.from(document.querySelectorAll('figure')).map(f => {
  const c = f.querySelector('figcaption');
  return {caption: c ? c.textContent.trim() : ''};
});
const tables = Array.from(document.querySelectorAll('table')).map(t => ({rows: t.querySelectorAll('tr').length}));
return {title: document.title, imgs, figs, tables,
        height: Math.max(document.body.scrollHeight, document.documentElement.scrollHeight)};
"""


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("dir", help="the report folder (holding index.html)")
    ap.add_argument("--screenshot", help="where to save the full-page screenshot [DIR/screenshot.png]")
    ap.add_argument("--json", action="store_true", help="print the findings as JSON")
    a = ap.parse_args()
    index = os.path.abspath(os.path.join(a.dir, "index.html"))
    if not os.path.isfile(index):
        fail(f"{index}: no such file (is {a.dir} a pmsim report folder?)")
    shot = a.screenshot or os.path.join(a.dir, "screenshot.png")
    problems = []
    with tempfile.TemporaryDirectory(prefix="pmsim-chromium-") as profile:
        d = browser(profile)
        try:
            d.get("file://" + index)
            facts = d.execute_script(PAGE_FACTS)
            logs = d.get_log("browser")
            d.set_window_size(1400, min(max(int(facts["height"]), 600), 16000))
            d.save_screenshot(shot)
        finally:
            d.quit()
    if not facts["title"].strip():
        problems.append("the page has no title")
    for e in logs:
        if e.get("level") == "SEVERE":
            problems.append(f"browser error: {e.get('message')}")
    for i in facts["imgs"]:
        if not i["complete"] or i["width"] == 0:
            problems.append(f"image did not load: {i['src']}")
    for k, f in enumerate(facts["figs"]):
        if not f["caption"]:
            problems.append(f"figure {k + 1} has no caption")
    for k, t in enumerate(facts["tables"]):
        if t["rows"] < 2:
            problems.append(f"table {k + 1} has no data rows")
    if not facts["imgs"]:
        problems.append("the report shows no image")
    summary = {"title": facts["title"], "images": len(facts["imgs"]), "figures": len(facts["figs"]),
               "tables": len(facts["tables"]), "console_errors": sum(e.get("level") == "SEVERE" for e in logs),
               "screenshot": shot, "problems": problems}
    if a.json:
        print(json.dumps(summary, indent=2))
    else:
        for p in problems:
            print(f"check-report: {index}: {p}")
        print(f"check-report: {index}: title '{facts['title']}', {len(facts['imgs'])} images, "
              f"{len(facts['figs'])} figures, {len(facts['tables'])} tables, {summary['console_errors']} console "
              f"errors; screenshot {shot}" + ("" if not problems else f"; {len(problems)} problem(s)"))
    sys.exit(1 if problems else 0)


if __name__ == "__main__":
    main()
