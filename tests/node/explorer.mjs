// The routing explorer in a real headless browser (Debian chromium through playwright-core):
// the page loads without errors, shows the route grid for a prompt, and clicking a cell forces
// that window's expert, which the routes returned then show.
// usage: node explorer.mjs URL [SCREENSHOT.png]
import { chromium } from "playwright-core";
import assert from "node:assert/strict";

const [url, screenshot] = process.argv.slice(2);
const browser = await chromium.launch({ executablePath: process.env.CHROMIUM || "/usr/bin/chromium", args: ["--no-sandbox"] });
try {
  const page = await browser.newPage({ viewport: { width: 1400, height: 900 } });
  const errors = [];
  page.on("console", (m) => { if (m.type() === "error") errors.push(m.text()); });
  page.on("pageerror", (e) => errors.push(String(e)));
  page.on("requestfailed", (r) => errors.push("request failed: " + r.url()));
  await page.goto(url);
  if (process.env.EXPLORER_KEY) {
    // A server with --api-key: the page says so, and connects once the key is entered.
    await page.waitForFunction(() => document.getElementById("model").textContent.includes("API key"));
    await page.fill("#apikey", process.env.EXPLORER_KEY);
    await page.dispatchEvent("#apikey", "change");
    errors.length = 0;  // the 401s before the key was entered are expected
  }
  await page.waitForFunction(() => document.getElementById("examples").options.length > 1);

  const completion = () => page.waitForResponse((r) => r.url().endsWith("/v1/completions"));
  let [res] = await Promise.all([completion(), page.click("#generate")]);
  const before = (await res.json()).choices[0].routes;
  await page.waitForSelector("#grid td[data-depth]");
  const cells = await page.locator("#grid td[data-depth]").count();
  assert.ok(cells > 0, "the route grid shows cells");

  // Force the window of the first generated token at depth 1 to the next expert.
  const target = before.findIndex((r, i) => r && i > 0 && r.windows[0].window !== before[i - 1]?.windows[0].window && before[i + 1]);
  const w = before[target].windows[0];
  const cell = page.locator(`#grid td[data-depth="${w.depth}"][data-window="${w.window}"]`).first();
  [res] = await Promise.all([completion(), cell.click()]);
  const request = JSON.parse(res.request().postData());
  assert.ok(request.force && request.force.entries.length === 1, "the click sends a forced path");
  const after = (await res.json()).choices[0].routes;
  const forced = after[target].windows.find((x) => x.depth === w.depth);
  const library = w.probs.length;
  assert.equal(forced.expert, (w.expert + 1) % library, "the forced window runs the clicked expert");
  assert.ok(forced.forced, "and is reported as forced");
  await page.waitForSelector("#grid td.forced");
  assert.deepEqual(errors, [], "no console errors");
  if (screenshot) await page.screenshot({ path: screenshot, fullPage: true });
  console.log(`explorer: grid of ${cells} cells; forcing depth ${w.depth} window ${w.window} from expert ${w.expert} to ${forced.expert} changed the routes returned`);
} finally {
  await browser.close();
}
