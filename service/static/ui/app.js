/* The forecast explorer (/ui): plain JavaScript on the service's own API, no build step.
 *
 * Views: portfolio (one forecast request, a sortable, filterable table with virtual scrolling,
 * the as-of candle and forecast dates, stale rows marked), symbol (candles, the forecast fan,
 * sample paths, actual candles after as_of, volume), accuracy (GET v1/accuracy, CRPS by UTC day)
 * and model and settings (GET v1/models, the sampling options).
 * Defaults are the model's (its sample paths and point forecast, GET v1/models' sampling block)
 * and seeded (DEFAULT_SEED): a forecast here and POST v1/forecast with the same fields give the
 * same numbers.
 * Every URL is relative to the page, so the page works under a route prefix too. The API key,
 * when the service asks for one (401), is kept in sessionStorage for this tab and sent as the
 * X-API-Key header, never in a URL. window.kronosUi exposes the state the browser tests read.
 */
"use strict";

const QUANTILES = [0.1, 0.25, 0.5, 0.75, 0.9];
const KEY_STORE = "kronos.apiKey";
const ROW_HEIGHT = 28; // px, as tbody tr.data in app.css: the virtual scroll's unit
const OVERSCAN = 10; // rows drawn above and below the visible ones
const DEFAULT_SEED = 0; // the forms' seed: the same request gives the same numbers (empty: random)
const DAY_MS = 86400e3;

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
  // the reference's sampling defaults until GET v1/models says the model's (its sampling block)
  modelDefaults: { temperature: 1.0, top_p: 0.9, sample_count: null, point: "mean" },
  portfolioDates: null, // {asOf, first, last, differ, stale} of the last answer (for the tests)
};
window.kronosUi = state;
// pure helpers the browser tests drive with fixed inputs (assigned once defined, below)
state.fn = {};

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
    // a request planned past its deadline (refused before any work): the service's sentence as
    // it is, the estimate and what would fit
    if (body.code === "deadline_unreachable") return body.detail.map((d) => d.msg).join("; ");
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
  if (options.deadline) headers["X-Kronos-Timeout-S"] = String(options.deadline);
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
    error.plan = (body && body.plan) || null; // deadline_unreachable: the plan's figures
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

/** The sampling options: the model view's temperature and top-p, a form's sample paths and seed,
 * only those set (an unset one is the model's default on the service too). */
function samplingOptions(samplesId, seedId) {
  const out = {};
  const t = numberOf("opt-temperature"), p = numberOf("opt-top-p");
  const n = numberOf(samplesId), s = numberOf(seedId);
  if (t !== null) out.temperature = t;
  if (p !== null) out.top_p = p;
  if (n !== null) out.sample_count = n;
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

/** The close of the model's point forecast at the last step: the mean of the paths, or the 0.5
 * quantile when the model's point is the median (GET v1/models, sampling.point). */
function pointClose(f) {
  return state.modelDefaults.point === "median" ? at((f.quantiles || {})["0.5"], "close")
                                                : at(f.mean, "close");
}

/** Wall-clock text "YYYY-MM-DDTHH:MM:SS" shown short: the date alone at midnight (a daily
 * candle), else the date and the minute. */
function shortTime(text) {
  if (!text) return "–";
  const [day, time = ""] = String(text).split("T");
  return time === "" || time.startsWith("00:00:00") ? day : `${day} ${time.slice(0, 5)}`;
}

function rowOf(f) {
  const q = f.quantiles || {};
  const last = f.last_close;
  const point = pointClose(f);
  const lo = at(q["0.1"], "close"), hi = at(q["0.9"], "close");
  const s = f.summary || {};
  const warnings = f.warnings || [];
  const notes = warnings.map((w) => w.code);
  const stale = warnings.find((w) => w.code === "stale") || null;
  const times = f.timestamps || [];
  return {
    symbol: f.symbol,
    last_candle: f.last_timestamp || null,
    first_step: times.length ? times[0] : null,
    last_step: times.length ? times[times.length - 1] : null,
    stale, // the stale warning ({code, message, ...}) or null
    last_close: last,
    change: point !== null && last ? (point / last - 1) * 100 : null,
    band80: lo !== null && hi !== null && last ? ((hi - lo) / last) * 100 : null,
    p_up: s.p_up ?? null,
    var_95: s.var_95 ?? null,
    es_95: s.es_95 ?? null,
    vol_alert: s.vol_alert ?? null,
    notes: notes.join(", "),
    warnings,
    error: null,
  };
}

function errorRow(e) {
  return {
    // a stale symbol left out (exclude_stale) is an error row, marked stale too
    symbol: e.symbol, last_candle: null, first_step: null, last_step: null,
    stale: e.code === "stale" ? e : null,
    last_close: null, change: null, band80: null, p_up: null, var_95: null,
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
  const badge = r.stale ? ` <span class="badge stale" title="${escapeHtml(r.stale.message)}">stale</span>` : "";
  const span = r.first_step === null ? "–"
    : r.first_step === r.last_step ? shortTime(r.first_step)
    : `${shortTime(r.first_step)} → ${shortTime(r.last_step)}`;
  return `<td>${escapeHtml(r.symbol)}${badge}</td>`
    + `<td class="date${r.stale ? " stale" : ""}">${escapeHtml(shortTime(r.last_candle))}</td>`
    + `<td>${fmt(r.last_close, 2)}</td><td class="date">${escapeHtml(span)}</td>`
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
    parts.push(`<tr class="data${r.error ? " failed" : ""}${r.stale ? " stale" : ""}" tabindex="0" data-symbol="${escapeHtml(r.symbol)}" aria-rowindex="${i + 2}">${cells(r)}</tr>`);
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
    const body = Object.assign({ symbols, horizon: numberOf("horizon"), quantiles: QUANTILES, summary: true },
                               samplingOptions("sample-count", "seed"));
    const lookback = numberOf("lookback");
    if (lookback !== null) body.lookback = lookback;
    if ($("exclude-stale").checked) body.exclude_stale = true; // sent only when asked
    const asOf = $("as-of").value.trim();
    if (asOf) body.as_of = asOf;
    $("portfolio-status").textContent = `forecasting ${symbols.length} symbol(s)…`;
    state.lastRequest = body;
    const answer = await api("v1/forecast", { body, deadline: numberOf("deadline") });
    await showPortfolio(answer);
    const planned = answer.deadline && answer.deadline.planned_s != null
      ? ` (planned ${answer.deadline.planned_s.toFixed(1)} s)` : "";
    $("portfolio-status").textContent = `${answer.forecasts.length} forecast(s), `
      + `${answer.errors.length} error(s) in ${(answer.timing.total_ms / 1000).toFixed(1)} s${planned}; `
      + `table drawn in ${state.lastRenderMs.toFixed(0)} ms`;
  } catch (error) {
    // planned past its deadline: nothing ran, and the error box says what would fit
    $("portfolio-status").textContent = error instanceof ApiError && error.code === "deadline_unreachable"
      ? "refused before any work: planned past the deadline" : "failed";
    showError(error);
  } finally {
    button.disabled = false;
  }
}

/** Draw a forecast answer in the table (rows, dates line); sets lastAnswer and lastRenderMs. */
async function showPortfolio(answer) {
  const t0 = performance.now(); // the answer has arrived and is parsed
  state.lastAnswer = { forecasts: answer.forecasts.length, errors: answer.errors.length, timing: answer.timing };
  state.rows = answer.forecasts.map(rowOf).concat(answer.errors.map(errorRow));
  showDates(answer);
  $("table-scroll").scrollTop = 0;
  applyView();
  await new Promise((done) => requestAnimationFrame(() => done()));
  state.lastRenderMs = performance.now() - t0;
}

/** The portfolio's as-of: the answer's own (its top-level as_of, where the service states it),
 * else the most common last candle of its rows (ties: the latest), the service's rule too. */
function portfolioAsOf(answer, rows) {
  if (answer.as_of) return answer.as_of;
  const counts = new Map();
  for (const r of rows) if (r.last_candle) counts.set(r.last_candle, (counts.get(r.last_candle) || 0) + 1);
  let best = null, most = 0;
  for (const [t, n] of counts) if (n > most || (n === most && t > best)) { best = t; most = n; }
  return best;
}

/** The line above the table: the as-of candle and the forecast's first and last dates when
 * every row shares them (else that they differ: the per-row columns say), and the stale rows. */
function showDates(answer) {
  const rows = state.rows.filter((r) => !r.error);
  const box = $("portfolio-dates");
  const left = state.rows.filter((r) => r.error && r.stale).map((r) => r.symbol);
  if (!rows.length) { state.portfolioDates = null; box.textContent = ""; return; }
  const asOf = portfolioAsOf(answer, rows);
  const firsts = new Set(rows.map((r) => r.first_step)), lasts = new Set(rows.map((r) => r.last_step));
  const differ = firsts.size > 1 || lasts.size > 1;
  const stale = rows.filter((r) => r.stale).map((r) => r.symbol);
  const first = differ ? null : rows[0].first_step, last = differ ? null : rows[0].last_step;
  state.portfolioDates = { asOf, first, last, differ, stale };
  const parts = [`As of candle <strong>${escapeHtml(shortTime(asOf))}</strong>`];
  parts.push(differ
    ? `forecast dates differ per row (${firsts.size} first dates): see the Forecast dates column`
    : `forecast <strong>${escapeHtml(shortTime(first))}</strong> → <strong>${escapeHtml(shortTime(last))}</strong>`);
  if (stale.length) {
    parts.push(`<span class="badge stale">stale</span> ${stale.length} row(s) whose last candle is behind: `
      + escapeHtml(stale.slice(0, 5).join(", ")) + (stale.length > 5 ? ", …" : ""));
  }
  if (left.length) {
    parts.push(`${left.length} stale symbol(s) left out: ` + escapeHtml(left.slice(0, 5).join(", "))
      + (left.length > 5 ? ", …" : ""));
  }
  box.innerHTML = parts.join(" · ");
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

/** History candles the symbol chart opens on: 3 x horizon + 60. */
function zoomCandles(horizon) {
  return 3 * horizon + 60;
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
  // the model's point forecast (the mean of the paths, or their median: sampling.point)
  const pointName = state.modelDefaults.point === "median" ? "median" : "mean";
  const pointCloses = pointName === "median" ? q["0.5"].close : forecast.mean.close;
  const median = chart.addSeries(LC.LineSeries, { color: "#1f5fbf", lineWidth: 2, priceLineVisible: false, lastValueVisible: true, title: pointName });
  median.setData([{ time: lastT, value: lastC }].concat(times.map((t, i) => ({ time: t, value: pointCloses[i] }))));
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
  // in view: the last 3 x horizon + 60 candles and the forecast, so a short fan is not a few
  // pixels at the edge (and the price axis fits them); the older history scrolls in
  const total = hist.length + times.length;
  const from = Math.max(0, hist.length - zoomCandles(times.length));
  chart.timeScale().setVisibleLogicalRange({ from, to: total + 1 });
  state.chartInfo = { symbol: forecast.symbol, history: hist.length, lookback: forecast.history_length, horizon: times.length, paths, actual,
                      visibleFrom: from, point: pointName };
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
      symbols: [symbol], horizon: numberOf("symbol-horizon"), quantiles: QUANTILES, return_paths: showPaths,
    }, samplingOptions("symbol-samples", "symbol-seed"));
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
    const context = Math.min(4096, Math.max(zoomCandles(f.timestamps.length),
                                            f.history_length + Math.max(32, Math.round(f.history_length / 4))));
    const params = new URLSearchParams({ symbol, before: String(context), as_of: f.last_timestamp, after: String(f.timestamps.length) });
    const stored = await api(`v1/candles?${params}`);
    drawChart(f, stored, stored.after, showPaths);
    const warn = (f.warnings || []).map((w) => `${w.code}: ${w.message}`).join(" · ");
    const span = `forecast ${shortTime(f.timestamps[0])} → ${shortTime(f.timestamps[f.timestamps.length - 1])}`;
    $("symbol-notes").textContent = `last candle ${f.last_timestamp}, lookback ${f.history_length} candles, ${span}`
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
  $("symbol-seed").value = $("seed").value;
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

/** The starts (ms, UTC midnight) of the `days` UTC calendar days up to the one holding `nowMs`,
 * oldest first: the ledger's date= partitions are UTC days too. */
function utcDayStarts(nowMs, days) {
  const today = Math.floor(nowMs / DAY_MS) * DAY_MS;
  return Array.from({ length: days }, (_, i) => today - (days - 1 - i) * DAY_MS);
}

/** CRPS by the UTC day the forecasts were made, the `days` days up to `nowMs` (oldest first):
 * [{day: "YYYY-MM-DD", scored, crps}]. `cumulative(sinceIso)` answers {n, crps}: the count and
 * mean over every forecast made at or after `since` (GET v1/accuracy?since=), so one day's mean
 * is exact: (mean_a * n_a - mean_b * n_b) / (n_a - n_b) for its midnight a and the next one b
 * (today's has no b: everything made since its midnight). */
async function crpsByDay(nowMs, days, cumulative) {
  const starts = utcDayStarts(nowMs, days);
  const cum = [];
  for (const start of starts) cum.push(await cumulative(new Date(start).toISOString()));
  cum.push({ n: 0, crps: null });
  return starts.map((start, i) => {
    const a = cum[i], b = cum[i + 1], n = a.n - b.n;
    const sum = (a.crps || 0) * a.n - (b.crps || 0) * b.n;
    return { day: new Date(start).toISOString().slice(0, 10), scored: n, crps: n > 0 ? sum / n : null };
  });
}

async function crpsOverTime(symbol) {
  const days = 7;
  const rows = await crpsByDay(Date.now(), days, async (since) => {
    const one = await api(`v1/accuracy?since=${encodeURIComponent(since)}${symbol ? "&symbol=" + encodeURIComponent(symbol) : ""}`);
    return { n: one.all_time.scored, crps: one.all_time.crps };
  });
  if (!rows.some((r) => r.scored)) return `<h2>CRPS over time</h2><p class="empty">No forecast made in the last ${days} UTC days has been scored yet.</p>`;
  const body = rows.map((r) => `<tr><td>${r.day}</td><td>${r.scored}</td><td>${fmt(r.crps, 4)}</td></tr>`).join("");
  return "<h2>CRPS over time (by the day the forecasts were made, UTC)</h2>"
    + `<table class="accuracy-table" id="crps-by-day"><thead><tr><th scope="col">day (UTC)</th><th scope="col">scored</th><th scope="col">CRPS</th></tr></thead><tbody>${body}</tbody></table>`;
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
    const facts = Object.entries(m).filter(([, v]) => typeof v !== "object" || v === null);
    if (m.calibration) facts.push(["calibration", `${m.calibration.method} at ${m.calibration.levels.join(", ")}`]);
    if (m.sampling) facts.push(["sampling", `${m.sampling.sample_count} paths, temperature ${m.sampling.temperature}, top-p ${m.sampling.top_p}, point: the ${m.sampling.point} (${m.sampling.source})`]);
    $("model-info").innerHTML = facts.map(([k, v]) => `<dt>${escapeHtml(k)}</dt><dd>${escapeHtml(v === null ? "none" : v)}</dd>`).join("");
    // the sampling defaults: the model's own when it states them, else the request schema's
    const defaults = Object.assign({}, state.modelDefaults, m.sampling || {});
    if (!m.sampling) {
      try {
        const schema = await api("openapi.json");
        const props = schema.components.schemas.ForecastRequest.properties;
        if (props.temperature.default != null) defaults.temperature = props.temperature.default;
        if (props.top_p.default != null) defaults.top_p = props.top_p.default;
      } catch (_) { /* a key without the docs scope: the built-in defaults stay */ }
    }
    state.modelDefaults = defaults;
    showDefaults(defaults);
    $("opt-temperature").placeholder = `default ${defaults.temperature}`;
    $("opt-top-p").placeholder = `default ${defaults.top_p}`;
    $("default-temperature").textContent = `default: ${defaults.temperature}`;
    $("default-top-p").textContent = `default: ${defaults.top_p}`;
    // last: the line says the page is ready (its defaults are in the forms)
    $("model-line").textContent = `model: ${m.name} · sha256 ${m.sha256.slice(0, 12)}… · context ${m.max_context}`;
  } catch (error) {
    $("model-line").textContent = "model: unknown";
    if (!(error instanceof ApiError && error.status === 401)) showError(error);
  }
}

/** The model's sample paths fill the forms' fields the user has not typed in, and its point
 * forecast names the change column and the chart's line. */
function showDefaults(defaults) {
  for (const id of ["sample-count", "symbol-samples"]) {
    const input = $(id);
    if (defaults.sample_count) {
      input.placeholder = `model's: ${defaults.sample_count}`;
      if (!input.dataset.edited) input.value = String(defaults.sample_count);
    }
  }
  const point = defaults.point === "median" ? "Median" : "Mean";
  $("change-header").textContent = `${point} change %`;
  $("point-legend").textContent = point.toLowerCase();
  $("default-point").textContent = `point forecast: the ${point.toLowerCase()} of the paths`;
}

// ------------------------------------------------------------------ wiring
function start() {
  for (const id of ["sample-count", "symbol-samples"]) {
    $(id).addEventListener("input", () => { $(id).dataset.edited = "1"; });
  }
  $("seed").value = $("symbol-seed").value = String(DEFAULT_SEED);
  $("default-seed").textContent = String(DEFAULT_SEED);
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

Object.assign(state.fn, { crpsByDay, utcDayStarts, shortTime, showPortfolio, zoomCandles });
start();
