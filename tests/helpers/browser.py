"""A report page as a person sees it: headless Chromium (Debian's `chromium`, installed by scripts/setup.sh) loads
it, decodes its images and takes a screenshot. No network: the flags below keep Chromium from trying to reach
anything (without them it hangs on connections on a closed network); --no-sandbox because tests run as root."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--hide-scrollbars", "--disable-dev-shm-usage"]

# Runs once the page (and every image on it) has loaded: what the page shows, written into the DOM for --dump-dom.
_PROBE = """<script>
window.addEventListener("load", () => {
  const images = [...document.images];
  const report = {images: images.length,
                  broken: images.filter(i => !(i.complete && i.naturalWidth > 0)).map(i => i.getAttribute("src")),
                  summary_rows: document.querySelectorAll("table.summary tbody tr").length,
                  summary_cells: [...document.querySelectorAll("table.summary tbody tr td:first-child")]
                                 .map(td => td.textContent)};
  const out = document.createElement("pre");
  out.id = "rlvr-probe";
  out.textContent = JSON.stringify(report);
  document.body.appendChild(out);
});
</script>"""


def chromium() -> str | None:
    return shutil.which("chromium") or shutil.which("chromium-browser")


@dataclass
class PageCheck:
    images: int
    broken: list[str]
    summary_rows: int
    summary_cells: list[str]
    screenshot: Path


def _run(args: list[str], timeout_s: float) -> subprocess.CompletedProcess:
    with tempfile.TemporaryDirectory(prefix="rlvr-chromium-") as profile:
        return subprocess.run([chromium(), *FLAGS, f"--user-data-dir={profile}", *args], capture_output=True,
                              text=True, timeout=timeout_s)


def check_page(index: Path, screenshot: Path, timeout_s: float = 120) -> PageCheck:
    """Loads `index` (a copy with the probe script, beside the original so its images resolve), reads what the
    probe found, and screenshots the original page."""
    probe_page = index.with_name(".probe-" + index.name)
    probe_page.write_text(index.read_text().replace("</body>", _PROBE + "</body>"))
    try:
        dom = _run(["--dump-dom", probe_page.resolve().as_uri()], timeout_s)
    finally:
        probe_page.unlink()
    match = re.search(r'<pre id="rlvr-probe">(.*?)</pre>', dom.stdout, re.S)
    assert match, f"the probe did not run; chromium said: {dom.stderr[-2000:]}"
    found = json.loads(match.group(1).replace("&quot;", '"').replace("&amp;", "&"))
    shot = _run([f"--screenshot={screenshot}", "--window-size=1280,3000", index.resolve().as_uri()], timeout_s)
    assert screenshot.exists(), f"no screenshot; chromium said: {shot.stderr[-2000:]}"
    return PageCheck(found["images"], found["broken"], found["summary_rows"], found["summary_cells"], screenshot)
