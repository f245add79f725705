"""The screenshots in docs/mlflow-ui.md: `gemmlab ui --sweep …` on a store, its URLs opened in
headless Chromium through the DevTools protocol. Not part of the package.

    python docs/mlflow-ui/screenshots.py --uri sqlite:////tmp/ui_cpu/mlflow.db \\
        --sweep <id or name> --prefix cpu [--port 5077] [--backfill]

Writes docs/mlflow-ui/<prefix>-runs.png (the sweep's runs table, the view `gemmlab ui` wrote),
<prefix>-parent.png (the parent run's page) and <prefix>-charts.png (the chart view). Needs
Debian's chromium, aiohttp (installed with MLflow) and Pillow. Starts `python -m runner.ui`
and Chromium, and stops both by their own process ids.

`--backfill` is for a store recorded before a sweep had series runs (a COPY of it: this writes
into the store): it runs the sweep's end-of-sweep code (runner/sweep/summary.py, series.py) on
the recorded jobs, the series runs under the parent and the parent's description, as a sweep
recorded now ends with; the jobs themselves are left as they were recorded.
"""
import argparse
import asyncio
import base64
import io
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import aiohttp
from PIL import Image

HERE = Path(__file__).resolve().parent
DEVTOOLS_PORT = 9333
WIDTH, HEIGHT = 1600, 1000
# MLflow 3.17 opens its Assistant panel on a browser's first visit: close it.
CLOSE_ASSISTANT = """(() => { const b = document.querySelector(
  'button[data-component-id="mlflow.assistant.chat_panel.close"]'); if (b) b.click();
  return !!b; })()"""
OVERVIEW_SHOW_MORE = """(() => { const b = Array.from(document.querySelectorAll('button'))
  .find(b => /show more/i.test(b.textContent)); if (b) b.click(); return !!b; })()"""


def backfill(uri: str, sweep: str) -> None:
    """The series runs and the description a sweep recorded now would have (see above)."""
    from runner.record import names
    from runner.results import runs as recorded
    from runner.sweep import series, summary as summaries

    client = recorded.client(uri)
    parent = recorded.find_sweep(client, sweep, recorded.experiment_ids(client, None))
    experiment, pid = parent.info.experiment_id, parent.info.run_id
    children = client.search_runs([experiment], f"tags.`{names.PARENT_RUN_ID}` = '{pid}'",
                                  max_results=50000)
    if any(run.data.tags.get(names.SERIES) == "true" for run in children):
        return  # already has its lines
    summary = summaries.SweepSummary.of(summaries.sweep_children(client, experiment, pid))
    devices = sorted({r.data.tags[names.DEVICE_NAME] for r in summary.runs
                      if names.DEVICE_NAME in r.data.tags})
    client.set_tag(pid, names.NOTE, summaries.description(parent.info.run_name, summary,
                                                          None, devices))
    now = int(time.time() * 1000)
    for line in series.sweep_series(summary):
        tags = {names.PARENT_RUN_ID: pid, names.SERIES: "true", names.SERIES_OF: line.of,
                names.STATUS: names.SERIES_STATUS,
                names.NOTE: series.series_description(line, parent.info.run_name),
                **line.tags}
        run = client.create_run(experiment, run_name=line.name, tags=tags)
        client.log_batch(run.info.run_id, metrics=line.metrics(now))
        client.set_terminated(run.info.run_id, "FINISHED")
    print(f"backfilled {parent.info.run_name}: {len(series.sweep_series(summary))} series")


def start_ui(uri: str, sweep: str, port: int):
    """`python -m runner.ui`, and the URLs it printed: the runs view, the charts, the parent."""
    ui = subprocess.Popen([sys.executable, "-m", "runner.ui", "--uri", uri, "--sweep", sweep,
                           "--port", str(port)], stdout=subprocess.PIPE, text=True,
                          cwd=HERE.parent.parent)
    urls, printed = [], []
    for line in ui.stdout:
        printed.append(line.rstrip())
        if line.strip().startswith("http://") and "#/experiments/" in line:
            urls.append(line.strip())
        if "answering on" in line:
            break
    print("\n".join(printed))
    return ui, urls[-3:]  # the opened sweep's: runs view, charts view, parent run


async def shoot(pages: list[tuple[str, str, list[str]]]) -> None:
    profile = tempfile.mkdtemp()
    chrome = subprocess.Popen(
        ["chromium", "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
         "--no-first-run", "--disable-background-networking", "--disable-component-update",
         "--disable-sync", f"--user-data-dir={profile}", f"--window-size={WIDTH},{HEIGHT}",
         f"--remote-debugging-port={DEVTOOLS_PORT}", "about:blank"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        for _ in range(100):
            try:
                targets = json.load(urllib.request.urlopen(
                    f"http://127.0.0.1:{DEVTOOLS_PORT}/json"))
                page = next(t for t in targets if t["type"] == "page")
                break
            except Exception:
                time.sleep(0.2)
        async with aiohttp.ClientSession() as session:
            async with session.ws_connect(page["webSocketDebuggerUrl"], max_msg_size=0) as ws:
                ids = iter(range(1, 10**6))

                async def call(method, **params):
                    i = next(ids)
                    await ws.send_json({"id": i, "method": method, "params": params})
                    while True:
                        msg = await ws.receive_json()
                        if msg.get("id") == i:
                            return msg.get("result", msg)

                await call("Emulation.setDeviceMetricsOverride", width=WIDTH, height=HEIGHT,
                           deviceScaleFactor=1, mobile=False)
                for url, out, scripts in pages:
                    await call("Page.navigate", url="about:blank")
                    await call("Page.navigate", url=url)
                    await asyncio.sleep(8)
                    for script in [CLOSE_ASSISTANT, *scripts]:
                        await call("Runtime.evaluate", expression=script, returnByValue=True)
                        await asyncio.sleep(2)
                    shot = await call("Page.captureScreenshot", format="png")
                    save(base64.b64decode(shot["data"]), out)
    finally:
        chrome.terminate()
        chrome.wait()


def save(png: bytes, out: str) -> None:
    """The screenshot without the browser's left navigation bar, in 256 colours (small)."""
    image = Image.open(io.BytesIO(png)).convert("RGB").crop((195, 0, WIDTH, HEIGHT))
    image = image.quantize(colors=256, method=Image.Quantize.MEDIANCUT, dither=Image.Dither.NONE)
    image.save(out, optimize=True)
    print("wrote", out, os.path.getsize(out) // 1024, "KB")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--uri", required=True)
    parser.add_argument("--sweep", required=True)
    parser.add_argument("--prefix", required=True)
    parser.add_argument("--port", type=int, default=5077)
    parser.add_argument("--backfill", action="store_true",
                        help="add the series runs and description first (a copy of a store!)")
    args = parser.parse_args()
    if args.backfill:
        backfill(args.uri, args.sweep)
    ui, (runs, charts, parent) = start_ui(args.uri, args.sweep, args.port)
    try:
        asyncio.run(shoot([
            (runs, str(HERE / f"{args.prefix}-runs.png"), []),
            (parent, str(HERE / f"{args.prefix}-parent.png"), [OVERVIEW_SHOW_MORE]),
            (charts, str(HERE / f"{args.prefix}-charts.png"), []),
        ]))
    finally:
        os.kill(ui.pid, signal.SIGTERM)  # runner.ui stops the server it started
        ui.wait(timeout=30)


if __name__ == "__main__":
    main()
