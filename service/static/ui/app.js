/* The forecast explorer (/ui): plain JavaScript on the service's own API, no build step.
 *
 * Views: portfolio (one forecast request, a sortable, filterable table with virtual scrolling),
 * symbol (candles, the forecast fan, sample paths, actual candles after as_of, volume),
 * accuracy (GET v1/accuracy) and model and settings (GET v1/models, the sampling options).
 * Every URL is relative to the page, so the page works under a route prefix too. The API key,
 * when the service asks for one (401), is kept in sessionStorage for this tab and sent as the
 * X-API-Key header, never in a URL. window.kronosUi exposes the state the browser tests read.
 */
"use strict";

const QUANTILES = [0.1, 0.25, 0.5, 0.75, 0.9];
const KEY_STORE = "kronos.apiKey";
const ROW_HEIGHT = 28; // px, as tbody tr.data in app.css: the virtual scroll's unit
const OVERSCAN = 10; // rows drawn above and below the visible ones

const $ = (id) => document.getElementById(id);
const state = {
  rows: [], // one object per symbol of the last portfolio answer (answered and failed)
  view: [], // rows after the filter and the sort
  sortKey: null,
  sortDir: 1,
  lastRenderMs: null, // answer parsed -> table drawn (performance.now())
  lastAnswer: null,
  chart: null,
  chartInfo: null, // what the symbol view drew (for the tests)
  modelDefaults: { temperature: 1.0, top_p: 0.9 },
};
window.kronosUi = state;

// ------------------------------------------------------------------ API calls and the key
class ApiError extends Error {
  constructor(status, code, detail) {
    super(`${status}${code ? " " + code : ""}: ${detail}`);
    this.status = status;
    this.code = code;
  }
}

function apiKey() {
  return sessionStorage.getItem(KEY_STORE) || "";
}

function detailText(body) {
  if (!body) return "no detail";
  if (typeof body.detail === "string") return body.detail;
  if (Array.isArray(body.detail)) {
    return body.detail.map((d) => `${(d.loc || []).join(".")}: ${d.msg}`).join("; ");
  }
  return JSON.stringify(body).slice(0, 300);
}

/** fetch(path) with the key; a non-2xx answer throws ApiError naming the code and the detail. */
async function api(path, options = {}) {
  const headers = Object.assign({ Accept: "application/json" }, options.headers || {});
  const key = apiKey();
  if (key) headers["X-API-Key"] = key;
  if (options.body !== undefined) headers["Content-Type"] = "application/json";
  const response = await fetch(path, {
    method: options.method || (options.body !== undefined ? "POST" : "GET"),
    headers,
    body: options.body !== undefined ? JSON.stringify(options.body) : undefined,
  });
  const text = await response.text();
  let body = null;
  try { body = text ? JSON.parse(text) : null; } catch (_) { body = { detail: text.slice(0, 300) }; }
  if (!response.ok) {
    const error = new ApiError(response.status, body && body.code, detailText(body));
    if (response.status === 401) askForKey(key ? "The key was not accepted: " + error.message
                                               : "This service asks for an API key.");
    throw error;
  }
  return body;
}

function askForKey(reason) {
  $("key-reason").textContent = reason;
  $("key-input").value = "";
  const dialog = $("key-dialog");
  dialog.returnValue = ""; // Escape closes it without an action
  if (!dialog.open) dialog.showModal();
}

function showError(error) {
  const box = $("error");
  if (!error) { box.hidden = true; box.textContent = ""; return; }
  box.textContent = error instanceof ApiError ? `The service answered ${error.message}`
                                              : `Error: ${error.message || error}`;
  box.hidden = false;
}

// ------------------------------------------------------------------ tabs
const TABS = ["portfolio", "symbol", "accuracy", "model"];
function showTab(name) {
  for (const t of TABS) {
    $("tab-" + t).setAttribute("aria-selected", String(t === name));
    $("view-" + t).hidden = t !== name;
  }
  if (name === "accuracy") loadAccuracy();
  if (name === "symbol" && state.chart) state.chart.resize($("chart").clientWidth, 480);
}

// ------------------------------------------------------------------ request options
function numberOf(id) {
  const v = $(id).value.trim();
  return v === "" ? null : Number(v);
}

/** The sampling options of the model view, only those set (else the service's defaults). */
function samplingOptions() {
  const out = {};
  const t = numberOf("opt-temperature"), p = numberOf("opt-top-p"), s = numberOf("opt-seed");
  if (t !== null) out.temperature = t;
  if (p !== null) out.top_p = p;
  if (s !== null) out.seed = s;
  return out;
}

function parseSymbols(text) {
  return [...new Set(text.split(/[\s,;]+/).map((s) => s.trim()).filter(Boolean))];
}

async function allSymbols(prefix) {
  const out = [];
  for (let offset = 0; ; offset += 10000) {
    const page = await api(`v1/symbols?limit=10000&offset=${offset}`);
    out.push(...page.symbols);
    if (out.length >= page.total || page.symbols.length === 0) break;
  }
  return prefix ? out.filter((s) => s.startsWith(prefix)) : out;
}

// ------------------------------------------------------------------ portfolio view
function at(candles, field) {
  const a = candles && candles[field];
  return a && a.length ? a[a.length - 1] : null;
}

function rowOf(f) {
  const q = f.quantiles || {};
  const last = f.last_close;
  const median = at(q["0.5"], "close");
  const lo = at(q["0.1"], "close"), hi = at(q["0.9"], "close");
  const s = f.summary || {};
  const notes = (f.warnings || []).map((w) => w.code);
  return {
    symbol: f.symbol,
    last_close: last,
    change: median !== null && last ? (median / last - 1) * 100 : null,
    band80: lo !== null && hi !== null && last ? ((hi - lo) / last) * 100 : null,
    p_up: s.p_up ?? null,
    var_95: s.var_95 ?? null,
    es_95: s.es_95 ?? null,
    vol_alert: s.vol_alert ?? null,
    notes: notes.join(", "),
    warnings: f.warnings || [],
    error: null,
  };
}

function errorRow(e) {
  return {
    symbol: e.symbol, last_close: null, change: null, band80: null, p_up: null, var_95: null,
    es_95: null, vol_alert: null, notes: `${e.code}: ${e.message}`, warnings: [], error: e,
  };
}

function fmt(v, digits) {
  return v === null || v === undefined || Number.isNaN(v) ? "–" : Number(v).toFixed(digits);
}

function pct(v) {
  return v === null || v === undefined ? "–" : (v * 100).toFixed(2) + "%";
}

function cells(r) {
  const tone = r.change === null ? "" : r.change >= 0 ? "up" : "down";
  const notes = r.error
    ? `<span class="err">${escapeHtml(r.notes)}</span>`
    : `<span class="warn" title="${escapeHtml(r.warnings.map((w) => w.message).join("\n"))}">${escapeHtml(r.notes)}</span>`;
  return `<td>${escapeHtml(r.symbol)}</td><td>${fmt(r.last_close, 2)}</td>`
    + `<td class="${tone}">${r.change === null ? "–" : (r.change >= 0 ? "+" : "") + r.change.toFixed(2)}</td>`
    + `<td>${fmt(r.band80, 2)}</td><td>${r.p_up === null ? "–" : r.p_up.toFixed(2)}</td>`
    + `<td>${pct(r.var_95)}</td><td>${pct(r.es_95)}</td>`
    + `<td>${r.vol_alert === null ? "–" : r.vol_alert ? "yes" : "no"}</td><td>${notes}</td>`;
}

function escapeHtml(s) {
  return String(s).replace(/[&<>"']/g, (c) => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" }[c]));
}

function compare(a, b) {
  const k = state.sortKey;
  const x = a[k], y = b[k];
  if (x === y) return 0;
  if (x === null || x === undefined) return 1; // blanks last, either direction
  if (y === null || y === undefined) return -1;
  return (x < y ? -1 : 1) * state.sortDir;
}

/** Filter and sort the rows, then draw the visible ones. */
function applyView() {
  const needle = $("table-filter").value.trim().toLowerCase();
  state.view = needle
    ? state.rows.filter((r) => r.symbol.toLowerCase().includes(needle) || r.notes.toLowerCase().includes(needle))
    : state.rows.slice();
  if (state.sortKey) state.view.sort(compare);
  $("row-count").textContent = `${state.view.length} of ${state.rows.length} rows`;
  drawRows();
}

/** Virtual scrolling: only the rows in sight (and OVERSCAN around them) are in the DOM; two
 * spacer rows keep the scroll height of the whole table. */
function drawRows() {
  const scroller = $("table-scroll");
  const first = Math.max(0, Math.floor(scroller.scrollTop / ROW_HEIGHT) - OVERSCAN);
  const count = Math.ceil(scroller.clientHeight / ROW_HEIGHT) + 2 * OVERSCAN;
  const last = Math.min(state.view.length, first + count);
  const parts = [`<tr class="spacer" aria-hidden="true" style="height:${first * ROW_HEIGHT}px"></tr>`];
  for (let i = first; i < last; i++) {
    const r = state.view[i];
    parts.push(`<tr class="data${r.error ? " failed" : ""}" tabindex="0" data-symbol="${escapeHtml(r.symbol)}" aria-rowindex="${i + 2}">${cells(r)}</tr>`);
  }
  parts.push(`<tr class="spacer" aria-hidden="true" style="height:${(state.view.length - last) * ROW_HEIGHT}px"></tr>`);
  $("portfolio-body").innerHTML = parts.join("");
  $("portfolio-table").setAttribute("aria-rowcount", String(state.view.length + 1));
}

function sortBy(key) {
  state.sortDir = state.sortKey === key ? -state.sortDir : 1;
  state.sortKey = key;
  for (const th of document.querySelectorAll("#portfolio-table thead th")) {
    th.setAttribute("aria-sort", th.dataset.key !== key ? "none" : state.sortDir > 0 ? "ascending" : "descending");
  }
  applyView();
}

async function runPortfolio(event) {
  event.preventDefault();
  showError(null);
  const source = document.querySelector('input[name="source"]:checked').value;
  const button = $("forecast-button");
  button.disabled = true;
  try {
    let symbols;
    if (source === "list") symbols = parseSymbols($("symbol-list").value);
    else symbols = await allSymbols(source === "prefix" ? $("symbol-prefix").value.trim() : "");
    if (!symbols.length) throw new Error("no symbols: type some, or choose all or a prefix");
    const body = Object.assign({
      symbols, horizon: numberOf("horizon"), sample_count: numberOf("sample-count"),
      quantiles: QUANTILES, summary: true,
    }, samplingOptions());
    const lookback = numberOf("lookback");
    if (lookback !== null) body.lookback = lookback;
    const asOf = $("as-of").value.trim();
    if (asOf) body.as_of = asOf;
    $("portfolio-status").textContent = `forecasting ${symbols.length} symbol(s)…`;
    const answer = await api("v1/forecast", { body });
    const t0 = performance.now(); // the answer has arrived and is parsed
    state.lastAnswer = { forecasts: answer.forecasts.length, errors: answer.errors.length, timing: answer.timing };
    state.rows = answer.forecasts.map(rowOf).concat(answer.errors.map(errorRow));
    $("table-scroll").scrollTop = 0;
    applyView();
    await new Promise((done) => requestAnimationFrame(() => done()));
    state.lastRenderMs = performance.now() - t0;
    $("portfolio-status").textContent = `${answer.forecasts.length} forecast(s), `
      + `${answer.errors.length} error(s) in ${(answer.timing.total_ms / 1000).toFixed(1)} s; `
      + `table drawn in ${state.lastRenderMs.toFixed(0)} ms`;
  } catch (error) {
    $("portfolio-status").textContent = "failed";
    showError(error);
  } finally {
    button.disabled = false;
  }
}

async function prefixCount() {
  const prefix = $("symbol-prefix").value.trim();
  if (!prefix) { $("prefix-count").textContent = ""; return; }
  try {
    const found = await allSymbols(prefix);
    $("prefix-count").textContent = `${found.length} symbol(s): ${found.slice(0, 8).join(", ")}${found.length > 8 ? ", …" : ""}`;
  } catch (error) { showError(error); }
}

// ------------------------------------------------------------------ symbol view
/** Wall-clock text "YYYY-MM-DDTHH:MM:SS" -> chart time (seconds, read as UTC: the chart then
 * shows the market's own clock). The chart spaces bars by index, so nights, weekends and
 * holidays take no room: the future candles are the exchange calendar's sessions. */
function chartTime(text) {
  return Math.round(Date.parse(text + "Z") / 1000);
}

/** A filled band between two lines, drawn under the candles (a series primitive). */
class BandPrimitive {
  constructor(points, color) { this.points = points; this.color = color; }
  attached(param) { this.chart = param.chart; this.series = param.series; }
  detached() { this.chart = null; }
  updateAllViews() {}
  paneViews() {
    const self = this;
    return [{
      zOrder: () => "bottom",
      renderer: () => ({
        draw(target) {
          if (!self.chart) return;
          const ts = self.chart.timeScale();
          const xy = self.points.map((p) => [ts.timeToCoordinate(p.time), self.series.priceToCoordinate(p.lo), self.series.priceToCoordinate(p.hi)])
            .filter((c) => c.every((v) => v !== null));
          if (xy.length < 2) return;
          target.useBitmapCoordinateSpace((scope) => {
            const ctx = scope.context, h = scope.horizontalPixelRatio, v = scope.verticalPixelRatio;
            ctx.beginPath();
            xy.forEach(([x, , hi], i) => (i ? ctx.lineTo(x * h, hi * v) : ctx.moveTo(x * h, hi * v)));
            for (let i = xy.length - 1; i >= 0; i--) ctx.lineTo(xy[i][0] * h, xy[i][1] * v);
            ctx.closePath();
            ctx.fillStyle = self.color;
            ctx.fill();
          });
        },
      }),
    }];
  }
}

function candleData(span) {
  const c = span.candles;
  return span.timestamps.map((t, i) => ({ time: chartTime(t), open: c.open[i], high: c.high[i], low: c.low[i], close: c.close[i] }));
}

function volumeData(span, color) {
  return span.timestamps.map((t, i) => ({ time: chartTime(t), value: span.candles.volume[i], color }));
}

function drawChart(forecast, history, after, showPaths) {
  const LC = window.LightweightCharts;
  const box = $("chart");
  if (state.chart) { state.chart.remove(); state.chart = null; }
  const chart = LC.createChart(box, {
    width: box.clientWidth || 900, height: 480,
    layout: { background: { color: "#ffffff" }, textColor: "#1d2330", attributionLogo: false },
    timeScale: { timeVisible: true, secondsVisible: false },
    rightPriceScale: { scaleMargins: { top: 0.08, bottom: 0.08 } },
  });
  state.chart = chart;
  const candles = chart.addSeries(LC.CandlestickSeries, {
    upColor: "#26a69a", downColor: "#ef5350", borderVisible: false, wickUpColor: "#26a69a", wickDownColor: "#ef5350",
  });
  const hist = candleData(history.history);
  candles.setData(hist);
  // the lookback the model saw: its first candle, marked
  const lookStart = hist[Math.max(0, hist.length - forecast.history_length)];
  if (lookStart && LC.createSeriesMarkers) {
    LC.createSeriesMarkers(candles, [{ time: lookStart.time, position: "belowBar", color: "#1f5fbf", shape: "arrowUp", text: "lookback" }]);
  }
  // the fan: 80% and 50% bands of the close and the median, from the last close on
  const q = forecast.quantiles;
  const times = forecast.timestamps.map(chartTime);
  const lastT = hist[hist.length - 1].time, lastC = hist[hist.length - 1].close;
  const band = (lo, hi) => [{ time: lastT, lo: lastC, hi: lastC }].concat(times.map((t, i) => ({ time: t, lo: q[lo].close[i], hi: q[hi].close[i] })));
  const median = chart.addSeries(LC.LineSeries, { color: "#1f5fbf", lineWidth: 2, priceLineVisible: false, lastValueVisible: true, title: "median" });
  median.setData([{ time: lastT, value: lastC }].concat(times.map((t, i) => ({ time: t, value: q["0.5"].close[i] }))));
  // whitespace at the forecast times keeps the time scale's slots for the fan
  median.attachPrimitive(new BandPrimitive(band("0.1", "0.9"), "rgba(31, 95, 191, 0.18)"));
  median.attachPrimitive(new BandPrimitive(band("0.25", "0.75"), "rgba(31, 95, 191, 0.30)"));
  let paths = 0;
  if (showPaths && forecast.paths) {
    for (const p of forecast.paths.slice(0, 5)) {
      const s = chart.addSeries(LC.LineSeries, { color: "rgba(90, 90, 90, 0.55)", lineWidth: 1, priceLineVisible: false, lastValueVisible: false });
      s.setData([{ time: lastT, value: lastC }].concat(times.map((t, i) => ({ time: t, value: p.close[i] }))));
      paths += 1;
    }
  }
  // with as_of in the past: the candles that followed, over the fan
  let actual = 0;
  if (after.timestamps.length) {
    const real = chart.addSeries(LC.CandlestickSeries, {
      upColor: "rgba(255, 152, 0, 0.9)", downColor: "rgba(255, 152, 0, 0.45)", borderColor: "#e65100", borderVisible: true, wickColor: "#e65100",
    });
    const data = candleData(after);
    real.setData(data);
    actual = data.length;
  }
  // volume beneath, in a pane of its own
  const volume = chart.addSeries(LC.HistogramSeries, { priceFormat: { type: "volume" }, priceLineVisible: false }, 1);
  const vol = volumeData(history.history, "rgba(38, 166, 154, 0.6)")
    .concat(after.timestamps.length ? volumeData(after, "rgba(255, 152, 0, 0.7)") : [])
    .concat(after.timestamps.length ? [] : times.map((t, i) => ({ time: t, value: q["0.5"].volume[i], color: "rgba(31, 95, 191, 0.35)" })));
  volume.setData(vol);
  const panes = chart.panes ? chart.panes() : [];
  if (panes.length > 1) panes[1].setHeight(110);
  // in view: the lookback the model saw and the forecast (the older context scrolls in)
  const total = hist.length + times.length;
  chart.timeScale().setVisibleLogicalRange({ from: Math.max(0, hist.length - forecast.history_length - 3), to: total + 1 });
  state.chartInfo = { symbol: forecast.symbol, history: hist.length, lookback: forecast.history_length, horizon: times.length, paths, actual };
}

async function runSymbol(event) {
  if (event) event.preventDefault();
  showError(null);
  const symbol = $("symbol-input").value.trim();
  if (!symbol) return;
  const button = $("symbol-button");
  button.disabled = true;
  $("symbol-status").textContent = `forecasting ${symbol}…`;
  try {
    const showPaths = $("show-paths").checked;
    const body = Object.assign({
      symbols: [symbol], horizon: numberOf("symbol-horizon"), sample_count: numberOf("symbol-samples"),
      quantiles: QUANTILES, return_paths: showPaths,
    }, samplingOptions());
    const lookback = numberOf("symbol-lookback");
    if (lookback !== null) body.lookback = lookback;
    const asOf = $("symbol-as-of").value.trim();
    if (asOf) body.as_of = asOf;
    const answer = await api("v1/forecast", { body });
    if (!answer.forecasts.length) {
      const e = answer.errors[0];
      throw new Error(e ? `${e.symbol}: ${e.code}: ${e.message}` : "no forecast came back");
    }
    const f = answer.forecasts[0];
    const context = Math.min(4096, f.history_length + Math.max(32, Math.round(f.history_length / 4)));
    const params = new URLSearchParams({ symbol, before: String(context), as_of: f.last_timestamp, after: String(f.timestamps.length) });
    const stored = await api(`v1/candles?${params}`);
    drawChart(f, stored, stored.after, showPaths);
    const warn = (f.warnings || []).map((w) => `${w.code}: ${w.message}`).join(" · ");
    $("symbol-notes").textContent = `last candle ${f.last_timestamp}, lookback ${f.history_length} candles`
      + (stored.after.timestamps.length ? `, ${stored.after.timestamps.length} actual candle(s) after it` : "")
      + (warn ? ` — ${warn}` : "");
    $("symbol-status").textContent = "done";
  } catch (error) {
    $("symbol-status").textContent = "failed";
    showError(error);
  } finally {
    button.disabled = false;
  }
}

function openSymbol(symbol) {
  $("symbol-input").value = symbol;
  $("symbol-horizon").value = $("horizon").value;
  $("symbol-samples").value = $("sample-count").value;
  $("symbol-lookback").value = $("lookback").value;
  $("symbol-as-of").value = $("as-of").value;
  showTab("symbol");
  runSymbol(null);
}

// ------------------------------------------------------------------ accuracy view
function figuresTable(title, rows) {
  const levels = [...new Set(rows.flatMap(([, f]) => Object.keys(f.coverage || {})))].sort();
  const head = `<tr><th scope="col">${escapeHtml(title)}</th><th scope="col">scored</th>`
    + levels.map((l) => `<th scope="col">${(Number(l) * 100).toFixed(0)}% band coverage (nominal ${l})</th>`).join("")
    + `<th scope="col">CRPS</th><th scope="col">MAE</th><th scope="col">direction hit</th></tr>`;
  const body = rows.map(([name, f]) => `<tr><td>${escapeHtml(name)}</td><td>${f.scored}</td>`
    + levels.map((l) => {
      const c = (f.coverage || {})[l];
      return c === null || c === undefined ? "<td>–</td>"
        : `<td>${(c * 100).toFixed(1)}% <span class="bar" style="width:${Math.round(c * 60)}px" aria-hidden="true"></span></td>`;
    }).join("")
    + `<td>${fmt(f.crps, 4)}</td><td>${fmt(f.mae, 4)}</td><td>${f.direction_hit === null ? "–" : pct(f.direction_hit)}</td></tr>`).join("");
  return `<table class="accuracy-table"><thead>${head}</thead><tbody>${body}</tbody></table>`;
}

/** CRPS by the day the forecasts were made, over the last 7 days. /v1/accuracy?since=T gives
 * the mean over every forecast made at or after T with its count, so one day's mean is exact:
 * (mean_a * n_a - mean_b * n_b) / (n_a - n_b) for the cuts a < b around it. */
async function crpsOverTime(symbol) {
  const days = 7, now = Date.now(), cum = [];
  for (let k = days; k >= 0; k--) {
    const since = new Date(now - k * 86400e3).toISOString();
    const one = await api(`v1/accuracy?since=${encodeURIComponent(since)}${symbol ? "&symbol=" + encodeURIComponent(symbol) : ""}`);
    cum.push({ since, n: one.all_time.scored, crps: one.all_time.crps });
  }
  const rows = [];
  for (let i = 0; i < days; i++) {
    const a = cum[i], b = cum[i + 1], n = a.n - b.n;
    const sum = (a.crps || 0) * a.n - (b.crps || 0) * b.n;
    rows.push(`<tr><td>${escapeHtml(a.since.slice(0, 10))}</td><td>${n}</td><td>${n > 0 ? fmt(sum / n, 4) : "–"}</td></tr>`);
  }
  if (!cum[0].n) return "<h2>CRPS over time</h2><p class=\"empty\">No forecast made in the last 7 days has been scored yet.</p>";
  return "<h2>CRPS over time (by the day the forecasts were made, UTC)</h2>"
    + `<table class="accuracy-table"><thead><tr><th scope="col">day</th><th scope="col">scored</th><th scope="col">CRPS</th></tr></thead><tbody>${rows.join("")}</tbody></table>`;
}

async function loadAccuracy(event) {
  if (event) event.preventDefault();
  showError(null);
  const out = $("accuracy-body");
  const symbol = $("accuracy-symbol").value.trim();
  const query = symbol ? `?symbol=${encodeURIComponent(symbol)}` : "";
  $("accuracy-status").textContent = "loading…";
  try {
    const acc = await api("v1/accuracy" + query);
    const model = (state.model && state.model.sha256) || acc.model || "every model";
    let html = `<p>Model SHA-256: <code>${escapeHtml(model)}</code>${symbol ? `, symbol ${escapeHtml(symbol)}` : ""}; `
      + `rolling window: the latest ${acc.window_steps} scored steps; last scoring pass: ${escapeHtml(acc.last_scored || "none yet on this gateway")}.</p>`;
    if (!acc.all_time.scored) {
      html += `<p class="empty">Nothing scored yet: scores appear when the truth arrives (the candles a forecast was made for, in the store). ${escapeHtml(acc.detail || "")}</p>`;
      out.innerHTML = html;
      $("accuracy-status").textContent = "";
      return;
    }
    html += "<h2>Coverage of the bands against nominal, CRPS</h2>" + figuresTable("span", [["rolling window", acc.rolling], ["all time", acc.all_time]]);
    const steps = numberOf("accuracy-steps") || 0;
    const byStep = [];
    for (let h = 1; h <= steps; h++) {
      const one = await api(`v1/accuracy?horizon_step=${h}${symbol ? "&symbol=" + encodeURIComponent(symbol) : ""}`);
      if (!one.all_time.scored) break;
      byStep.push([`step ${h}`, one.all_time]);
    }
    if (byStep.length) html += "<h2>By horizon step (all time)</h2>" + figuresTable("step", byStep);
    html += await crpsOverTime(symbol);
    const bySymbol = [];
    for (const r of state.rows.slice(0, 20)) {
      if (r.error) continue;
      const one = await api(`v1/accuracy?symbol=${encodeURIComponent(r.symbol)}`);
      if (one.all_time.scored) bySymbol.push([r.symbol, one.all_time]);
    }
    if (bySymbol.length) html += "<h2>Per symbol (the portfolio's first 20, all time)</h2>" + figuresTable("symbol", bySymbol);
    out.innerHTML = html;
    $("accuracy-status").textContent = "";
  } catch (error) {
    $("accuracy-status").textContent = "";
    if (error instanceof ApiError && error.code === "ledger_off") {
      out.innerHTML = `<p class="empty">Nothing to show: the forecast ledger is off on this service (KRONOS_LEDGER_DIR=off), so no forecast is recorded or scored.</p>`;
    } else {
      out.innerHTML = `<p class="empty">No accuracy figures: ${escapeHtml(error.message)}</p>`;
      showError(error);
    }
  }
}

// ------------------------------------------------------------------ model view
async function loadModel() {
  try {
    const models = await api("v1/models");
    const m = models.models[0];
    state.model = m;
    $("model-line").textContent = `model: ${m.name} · sha256 ${m.sha256.slice(0, 12)}… · context ${m.max_context}`;
    const facts = Object.entries(m).filter(([, v]) => typeof v !== "object" || v === null);
    if (m.calibration) facts.push(["calibration", `${m.calibration.method} at ${m.calibration.levels.join(", ")}`]);
    $("model-info").innerHTML = facts.map(([k, v]) => `<dt>${escapeHtml(k)}</dt><dd>${escapeHtml(v === null ? "none" : v)}</dd>`).join("");
    // the sampling defaults: the model's own when it states them, else the request schema's
    const defaults = Object.assign({}, state.modelDefaults, m.sampling || {});
    try {
      const schema = await api("openapi.json");
      const props = schema.components.schemas.ForecastRequest.properties;
      if (!m.sampling) {
        if (props.temperature.default !== undefined) defaults.temperature = props.temperature.default;
        if (props.top_p.default !== undefined) defaults.top_p = props.top_p.default;
      }
    } catch (_) { /* a key without the docs scope: the built-in defaults stay */ }
    state.modelDefaults = defaults;
    $("opt-temperature").placeholder = `default ${defaults.temperature}`;
    $("opt-top-p").placeholder = `default ${defaults.top_p}`;
    $("default-temperature").textContent = `default: ${defaults.temperature}`;
    $("default-top-p").textContent = `default: ${defaults.top_p}`;
  } catch (error) {
    $("model-line").textContent = "model: unknown";
    if (!(error instanceof ApiError && error.status === 401)) showError(error);
  }
}

// ------------------------------------------------------------------ wiring
function start() {
  for (const t of TABS) $("tab-" + t).addEventListener("click", () => showTab(t));
  $("portfolio-form").addEventListener("submit", runPortfolio);
  $("symbol-form").addEventListener("submit", runSymbol);
  $("accuracy-form").addEventListener("submit", loadAccuracy);
  $("table-filter").addEventListener("input", applyView);
  $("table-scroll").addEventListener("scroll", () => requestAnimationFrame(drawRows), { passive: true });
  $("symbol-prefix").addEventListener("change", prefixCount);
  for (const th of document.querySelectorAll("#portfolio-table thead th")) {
    th.querySelector("button").addEventListener("click", () => sortBy(th.dataset.key));
  }
  const body = $("portfolio-body");
  body.addEventListener("click", (e) => { const tr = e.target.closest("tr.data"); if (tr) openSymbol(tr.dataset.symbol); });
  body.addEventListener("keydown", (e) => {
    const tr = e.target.closest("tr.data");
    if (tr && e.key === "Enter") openSymbol(tr.dataset.symbol);
  });
  $("key-button").addEventListener("click", () => askForKey(apiKey() ? "A key is set for this tab." : "Set an API key for this tab."));
  $("key-dialog").addEventListener("close", () => {
    const action = $("key-dialog").returnValue;
    if (action === "save" && $("key-input").value) sessionStorage.setItem(KEY_STORE, $("key-input").value);
    if (action === "clear") sessionStorage.removeItem(KEY_STORE);
    if (action === "save" || action === "clear") { showError(null); loadModel(); }
  });
  loadModel();
}

start();
