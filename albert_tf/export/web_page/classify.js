// The page's script: MediaPipe Tasks for Web's TextClassifier on typed text and on a file's lines.
// The part between the two "docs/deployment.md" lines is that guide's JavaScript example (a test
// keeps them equal), so the browser test runs the example itself.

// docs/deployment.md: begin
import { FilesetResolver, TextClassifier } from "@mediapipe/tasks-text";

// `wasm`: the folder of @mediapipe/tasks-text's wasm/ files; `model`: the exported model.tflite.
export async function createClassifier(wasm, model) {
  const fileset = await FilesetResolver.forTextTasks(wasm);
  return TextClassifier.createFromOptions(fileset, { baseOptions: { modelAssetPath: model } });
}

// Every label's probability for `text`, in the model's label order (MediaPipe sorts by score).
export function classify(classifier, text) {
  return classifier.classify(text).classifications[0].categories
    .map((c) => ({ index: c.index, label: c.categoryName, probability: c.score }))
    .sort((a, b) => a.index - b.index);
}
// docs/deployment.md: end

const WASM = "mediapipe/wasm";
const MODEL = "model/model.tflite";
// What the export says of the model: a multi-label model's scores are independent, each with its threshold.
const EXPORT = "model/export.json";

// MediaPipe's own errors for these say little ("Failed to fetch"), so the files are looked for first.
async function present(path) {
  const response = await fetch(path, { method: "HEAD" });
  return response.ok;
}

// Each label's threshold of a multi-label model, in label order; null for a classifier (one label wins).
async function thresholds() {
  const response = await fetch(EXPORT);
  if (!response.ok) return null;
  const metadata = await response.json();
  return metadata.kind === "multilabel" ? metadata.thresholds : null;
}

async function load() {
  if (!(await present(`${WASM}/text_wasm_internal.wasm`)) || !(await present(`${WASM}/text_wasm_internal.js`))) {
    throw new Error(MISSING_MEDIAPIPE);
  }
  if (!(await present(MODEL))) {
    throw new Error(`${MODEL} is missing from this site: export it again with \`albert-tf export --format web\`.`);
  }
  try {
    return await createClassifier(WASM, MODEL);
  } catch (e) {
    throw new Error(`${MODEL} is not a text classifier MediaPipe can run (export one with \`albert-tf export `
      + `--format web\` from a fine-tuned classifier): ${e.message || e}`);
  }
}

// `threshold`: a multi-label model's, marked on the bar (the label applies at or past it); else undefined.
function bar(label, probability, top, threshold) {
  const over = threshold !== undefined && probability >= threshold;
  const row = document.createElement("div");
  row.className = top ? "row top" : over ? "row over" : "row";
  row.dataset.label = label;
  row.dataset.probability = String(probability);
  const name = document.createElement("span");
  name.className = "label";
  name.textContent = label;
  const track = document.createElement("div");
  track.className = "track";
  const fill = document.createElement("div");
  fill.className = "fill";
  fill.style.width = `${(100 * probability).toFixed(1)}%`;
  track.append(fill);
  if (threshold !== undefined) {
    const mark = document.createElement("div");
    mark.className = "threshold";
    mark.style.left = `${(100 * threshold).toFixed(1)}%`;
    mark.title = `threshold ${threshold.toFixed(4)}`;
    row.dataset.threshold = String(threshold);
    track.append(mark);
  }
  const value = document.createElement("span");
  value.className = "value";
  value.textContent = probability.toFixed(6);
  row.append(name, track, value);
  return row;
}

function topIndex(results) {
  return results.reduce((best, r, i) => (r.probability > results[best].probability ? i : best), 0);
}

// The labels a row shows in the table: the most probable one, or a multi-label model's labels past their thresholds.
function chosen(results, limits) {
  if (!limits) return results[topIndex(results)].label;
  return results.filter((r, i) => r.probability >= limits[i]).map((r) => r.label).join(", ");
}

function show(classifier, limits, text) {
  const results = classify(classifier, text);
  const top = limits ? -1 : topIndex(results);
  const bars = document.getElementById("bars");
  bars.replaceChildren(...results.map((r, i) => bar(r.label, r.probability, i === top, limits?.[i])));
  bars.dataset.text = text;  // what the bars are for: a test waits on it
}

function showTable(classifier, limits, lines) {
  const table = document.getElementById("table");
  const labels = classify(classifier, "").map((r) => r.label);
  const head = document.createElement("tr");
  for (const name of ["text", ...labels, limits ? "labels" : "label"]) {
    const th = document.createElement("th");
    th.textContent = name;
    head.append(th);
  }
  table.tHead.replaceChildren(head);
  table.tBodies[0].replaceChildren(...lines.map((line) => {
    const results = classify(classifier, line);
    const tr = document.createElement("tr");
    const cells = [line, ...results.map((r) => r.probability.toFixed(6)), chosen(results, limits)];
    cells.forEach((content, i) => {
      const td = document.createElement("td");
      td.textContent = content;
      if (i > 0 && i <= results.length) td.className = "number";
      tr.append(td);
    });
    return tr;
  }));
  table.hidden = false;
}

try {
  const classifier = await load();
  const limits = await thresholds();
  const text = document.getElementById("text");
  document.getElementById("labels").textContent = classify(classifier, "").map((r) => r.label).join(", ");
  text.addEventListener("input", () => show(classifier, limits, text.value));
  for (const button of document.querySelectorAll("button.example")) {
    button.addEventListener("click", () => {
      text.value = button.textContent;
      show(classifier, limits, text.value);
    });
    button.disabled = false;
  }
  document.getElementById("file").addEventListener("change", async (event) => {
    const [file] = event.target.files;
    if (!file) return;
    const lines = (await file.text()).split(/\r?\n/).filter((line) => line.trim());  // File.text() reads UTF-8
    showTable(classifier, limits, lines);
  });
  text.disabled = false;
  document.getElementById("file").disabled = false;
  show(classifier, limits, text.value);
  document.getElementById("status").textContent = "Ready: type a sentence.";
  document.body.dataset.ready = "true";
} catch (e) {
  showError(e.message || String(e));
}
