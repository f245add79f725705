"""Screenshots of MLflow's UI for docs/mlflow-ui.md, through Chromium's DevTools protocol.

    python docs/mlflow-ui/screenshots.py steps.json

steps.json: a list of ["go", url], ["js", expression(, seconds)] and ["shot", file.png]; needs
Debian's chromium and aiohttp (installed with MLflow). Not part of the package.
"""
import asyncio, base64, json, subprocess, sys, tempfile, time, urllib.request
import aiohttp

PORT = 9333

async def main(steps):
    profile = tempfile.mkdtemp()
    chrome = subprocess.Popen(["chromium", "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
        "--no-first-run", "--disable-background-networking", "--disable-component-update", "--disable-sync",
        f"--user-data-dir={profile}", "--window-size=1600,1000", f"--remote-debugging-port={PORT}",
        "about:blank"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        for _ in range(100):
            try:
                targets = json.load(urllib.request.urlopen(f"http://127.0.0.1:{PORT}/json"))
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
                await call("Emulation.setDeviceMetricsOverride", width=1600, height=1000,
                           deviceScaleFactor=1, mobile=False)
                for step in steps:
                    kind, arg = step[0], step[1]
                    if kind == "go":
                        await call("Page.navigate", url=arg)
                        await asyncio.sleep(6)
                    elif kind == "js":
                        r = await call("Runtime.evaluate", expression=arg, returnByValue=True,
                                       awaitPromise=True)
                        print("js:", json.dumps(r.get("result", r).get("value"))[:3000])
                        await asyncio.sleep(step[2] if len(step) > 2 else 2)
                    elif kind == "shot":
                        r = await call("Page.captureScreenshot", format="png")
                        open(arg, "wb").write(base64.b64decode(r["data"]))
                        print("wrote", arg)
    finally:
        chrome.terminate(); chrome.wait()

asyncio.run(main(json.load(open(sys.argv[1]))))
