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

// MediaPipe's own errors for these say little ("Failed to fetch"), so the files are looked for first.
async function present(path) {
  const response = await fetch(path, { method: "HEAD" });
  return response.ok;
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

function bar(label, probability, top) {
  const row = document.createElement("div");
  row.className = top ? "row top" : "row";
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
  const value = document.createElement("span");
  value.className = "value";
  value.textContent = probability.toFixed(6);
  row.append(name, track, value);
  return row;
}

function topIndex(results) {
  return results.reduce((best, r, i) => (r.probability > results[best].probability ? i : best), 0);
}

function show(classifier, text) {
  const results = classify(classifier, text);
  const top = topIndex(results);
  const bars = document.getElementById("bars");
  bars.replaceChildren(...results.map((r, i) => bar(r.label, r.probability, i === top)));
  bars.dataset.text = text;  // what the bars are for: a test waits on it
}

function showTable(classifier, lines) {
  const table = document.getElementById("table");
  const labels = classify(classifier, "").map((r) => r.label);
  const head = document.createElement("tr");
  for (const name of ["text", ...labels, "label"]) {
    const th = document.createElement("th");
    th.textContent = name;
    head.append(th);
  }
  table.tHead.replaceChildren(head);
  table.tBodies[0].replaceChildren(...lines.map((line) => {
    const results = classify(classifier, line);
    const tr = document.createElement("tr");
    const cells = [line, ...results.map((r) => r.probability.toFixed(6)), results[topIndex(results)].label];
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
  const text = document.getElementById("text");
  document.getElementById("labels").textContent = classify(classifier, "").map((r) => r.label).join(", ");
  text.addEventListener("input", () => show(classifier, text.value));
  for (const button of document.querySelectorAll("button.example")) {
    button.addEventListener("click", () => { text.value = button.textContent; show(classifier, text.value); });
    button.disabled = false;
  }
  document.getElementById("file").addEventListener("change", async (event) => {
    const [file] = event.target.files;
    if (!file) return;
    const lines = (await file.text()).split(/\r?\n/).filter((line) => line.trim());  // File.text() reads UTF-8
    showTable(classifier, lines);
  });
  text.disabled = false;
  document.getElementById("file").disabled = false;
  show(classifier, text.value);
  document.getElementById("status").textContent = "Ready: type a sentence.";
  document.body.dataset.ready = "true";
} catch (e) {
  showError(e.message || String(e));
}
