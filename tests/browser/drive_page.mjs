// Drives `albert-tf export --format web`'s page in headless Chromium, as a user would:
//
//     node drive_page.mjs < job.json > result.json
//
// job: {chromium, userDataDir, visits: [{url, sentences?, file?, screenshot?}]}. Each visit opens
// `url`, waits until the page is ready or shows an error, then clicks the page's examples, loads
// `file` into its file input, types each sentence (keyboard events, one character at a time) and
// reads what the page shows after each, and saves a screenshot. Prints one JSON result a visit.
import puppeteer from "puppeteer-core";

const FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
  "--disable-background-networking", "--disable-component-update", "--disable-sync"];
const TIMEOUT_MS = 60000;

let input = "";
for await (const chunk of process.stdin) input += chunk;
const job = JSON.parse(input);

function readBars() {
  return [...document.querySelectorAll("#bars .row")].map((row) => ({
    label: row.querySelector(".label").textContent,
    shown: row.querySelector(".value").textContent,
    top: row.classList.contains("top"),
    over: row.classList.contains("over"),
    threshold: row.dataset.threshold ?? null,
  }));
}

async function bars(page, text) {
  await page.waitForFunction((t) => document.getElementById("bars").dataset.text === t, { timeout: TIMEOUT_MS }, text);
  return page.evaluate(readBars);
}

async function visit(browser, { url, sentences = [], file, screenshot }) {
  const page = await browser.newPage();
  const console_ = [];
  page.on("console", (message) => console_.push(message.text()));
  page.on("pageerror", (error) => console_.push(String(error)));
  await page.goto(url, { waitUntil: "load" });
  await page.waitForFunction(
    () => document.body.dataset.ready === "true" || !document.getElementById("error").hidden,
    { timeout: TIMEOUT_MS });
  const result = {
    url,
    charset: await page.evaluate(() => document.characterSet),
    error: await page.$eval("#error", (e) => (e.hidden ? null : e.textContent)),
    console: console_,
  };
  if (result.error === null) {
    result.labels = await page.$eval("#labels", (e) => e.textContent);
    result.examples = [];
    for (const button of await page.$$("button.example")) {
      const text = await button.evaluate((b) => b.textContent);
      await button.click();
      result.examples.push({ text, bars: await bars(page, text) });
    }
    if (file) {
      await (await page.$("#file")).uploadFile(file);
      await page.waitForSelector("#table:not([hidden]) tbody tr", { timeout: TIMEOUT_MS });
      result.table = await page.$$eval("#table tr", (rows) =>
        rows.map((row) => [...row.children].map((cell) => cell.textContent)));
    }
    result.typed = [];
    for (const sentence of sentences) {
      await page.$eval("#text", (e) => { e.value = ""; });
      await page.type("#text", sentence);
      result.typed.push({ text: sentence, bars: await bars(page, sentence) });
    }
  }
  if (screenshot) await page.screenshot({ path: screenshot, fullPage: true });
  await page.close();
  return result;
}

const browser = await puppeteer.launch({
  executablePath: job.chromium, headless: true, userDataDir: job.userDataDir, args: FLAGS, timeout: TIMEOUT_MS,
});
try {
  const results = [];
  for (const v of job.visits) results.push(await visit(browser, v));
  process.stdout.write(JSON.stringify(results));
} finally {
  await browser.close();
}
