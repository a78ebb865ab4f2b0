"use strict";
// trainmaster dashboard: one script for the live daemon page (polls the /v1 API) and the static
// `simulate --out` report (reads the run embedded in #tm-data). Charts are inline SVG, no library.
(() => {
  const POLL_MS = 1500;
  const COLORS = ["#4c51bf", "#2f855a", "#c05621", "#b83280", "#2b6cb0", "#975a16", "#319795", "#6b46c1"];
  const app = document.getElementById("app");
  const statusEl = document.getElementById("status");

  // -- formatting -------------------------------------------------------------------------------
  const esc = (s) => String(s ?? "").replace(/[&<>"']/g, (c) =>
    ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" }[c]));
  const formats = {}; // Intl formatters are costly to build: one per precision (a 1,000-row table needs thousands)
  const num = (x, d = 2) => (x == null || !isFinite(x) ? "-"
    : (formats[d] ||= new Intl.NumberFormat(undefined, { maximumFractionDigits: d })).format(x));
  function dur(s) {
    if (s == null || !isFinite(s)) return "-";
    const a = Math.abs(s);
    if (a < 60) return `${a >= 10 && Math.abs(a - Math.round(a)) < 0.05 ? a.toFixed(0) : a.toFixed(1)} s`;
    if (a < 3600) return `${(a / 60).toFixed(1)} min`;
    if (a < 86400) return `${(a / 3600).toFixed(1)} h`;
    return `${(a / 86400).toFixed(1)} d`;
  }
  const relative = (t, now) => (t == null ? "-" : t >= now ? `in ${dur(t - now)}` : `${dur(now - t)} ago`);
  const timeFormat = new Intl.DateTimeFormat(undefined, { hour: "numeric", minute: "2-digit", second: "2-digit" });
  const dayFormat = new Intl.DateTimeFormat(undefined, { month: "short", day: "numeric" });
  const today = new Date().toDateString();
  const clock = (t) => { // time of day; the date too when it is not today
    if (t == null) return "-";
    const d = new Date(t * 1000);
    return d.toDateString() === today ? timeFormat.format(d) : `${dayFormat.format(d)} ${timeFormat.format(d)}`;
  };
  const state = (s) => `<span class="state ${esc(s)}">${esc(s)}</span>`;
  const money = (x) => (x == null ? "-" : `$${Number(x).toFixed(2)}`);
  const meter = (used, total) => {
    const f = total > 0 ? used / total : 0;
    return `<span class="meter${f > 1 ? " over" : ""}"><i style="width:${Math.min(100, 100 * f).toFixed(1)}%">` +
      `</i></span>${num(used, 1)} / ${num(total, 1)}`;
  };

  // -- charts (SVG strings) ------------------------------------------------------------------------
  function ticks(lo, hi, n = 5) {
    if (!(hi > lo)) return [lo];
    const raw = (hi - lo) / n, mag = 10 ** Math.floor(Math.log10(raw));
    const step = [1, 2, 5, 10].map((m) => m * mag).find((s) => s >= raw) || raw;
    const out = [];
    for (let v = Math.ceil(lo / step) * step; v <= hi + 1e-9 * step; v += step) out.push(v);
    return out;
  }
  // series: [{name, points: [[x, y]...], color, step}]; opts: {xFmt, yFmt, logX, yMin, yMax, height}
  function lineChart(series, opts = {}) {
    const W = opts.width || 640, H = opts.height || 200, L = 52, R = 28, T = 8, B = 26;
    const pts = series.flatMap((s) => s.points).filter((p) => p[1] != null && isFinite(p[1]));
    if (!pts.length) return `<p class="muted">${esc(opts.empty || "no data yet")}</p>`;
    const fx = opts.logX ? (x) => Math.log10(Math.max(x, 1e-9)) : (x) => x;
    let x0 = Infinity, x1 = -Infinity, ylo = Infinity, yhi = -Infinity; // (no spread: series may be long)
    for (const [x, y] of pts) {
      x0 = Math.min(x0, fx(x)); x1 = Math.max(x1, fx(x)); ylo = Math.min(ylo, y); yhi = Math.max(yhi, y);
    }
    let y0 = opts.yMin ?? ylo, y1 = opts.yMax ?? yhi;
    if (x1 <= x0) x1 = x0 + 1;
    if (y1 <= y0) y1 = y0 + 1;
    const sx = (x) => L + ((fx(x) - x0) / (x1 - x0)) * (W - L - R);
    const sy = (y) => T + (1 - (y - y0) / (y1 - y0)) * (H - T - B);
    const xFmt = opts.xFmt || ((v) => num(v)), yFmt = opts.yFmt || ((v) => num(v, 3));
    let g = "";
    for (const v of ticks(y0, y1, 4)) {
      g += `<line class="gridline" x1="${L}" x2="${W - R}" y1="${sy(v)}" y2="${sy(v)}"/>` +
        `<text x="${L - 4}" y="${sy(v) + 4}" text-anchor="end">${esc(yFmt(v))}</text>`;
    }
    const xt = opts.logX ? ticks(Math.floor(x0), Math.ceil(x1), 5).map((e) => 10 ** e) : ticks(x0, x1, 6);
    for (const v of xt) {
      const x = sx(v);
      if (x < L - 1 || x > W - R + 1) continue;
      g += `<text x="${x}" y="${H - 8}" text-anchor="middle">${esc(xFmt(v))}</text>`;
    }
    g += `<line class="axis" x1="${L}" x2="${W - R}" y1="${H - B}" y2="${H - B}"/>` +
      `<line class="axis" x1="${L}" x2="${L}" y1="${T}" y2="${H - B}"/>`;
    series.forEach((s, i) => {
      const color = s.color || COLORS[i % COLORS.length];
      const p = s.points.filter((q) => q[1] != null && isFinite(q[1]));
      let d = "";
      p.forEach((q, j) => {
        const x = sx(q[0]).toFixed(1), y = sy(q[1]).toFixed(1);
        if (j === 0) d += `M${x},${y}`;
        else d += s.step ? `H${x}V${y}` : `L${x},${y}`;
      });
      if (s.fill && p.length) d += `V${sy(y0)}H${sx(p[0][0])}Z`;
      g += `<path data-points="${p.length}" d="${d}" fill="${s.fill ? color : "none"}" fill-opacity="${s.fill ? 0.25 : 0}" ` +
        `stroke="${color}" stroke-width="1.6"/>`;
    });
    const legend = series.length > 1 || opts.legend ? `<div class="legend">${series.map((s, i) =>
      `<span><i style="background:${s.color || COLORS[i % COLORS.length]}"></i>${esc(s.name)}</span>`).join("")}</div>` : "";
    const label = opts.label ? `<div class="muted">${esc(opts.label)}</div>` : "";
    return `${label}${legend}<svg class="chart ${esc(opts.cls || "")}" viewBox="0 0 ${W} ${H}" width="${W}" ` +
      `height="${H}">${g}</svg>`;
  }
  // rows: [{label, href, start, end, segments: [[a, b]], state}]: grey while waiting, coloured while running.
  function gantt(rows, t0, t1, opts = {}) {
    if (!rows.length) return `<p class="muted">no jobs</p>`;
    const W = opts.width || 900, LBL = 150, R = 10, RH = 16, T = 4, B = 22;
    const H = T + rows.length * RH + B;
    if (!(t1 > t0)) t1 = t0 + 1;
    const sx = (t) => LBL + ((t - t0) / (t1 - t0)) * (W - LBL - R);
    const fill = { failed: "#c53030", cancelled: "#718096", rejected: "#c53030" };
    let g = "";
    rows.forEach((r, i) => {
      const y = T + i * RH;
      const name = esc(r.label.length > 22 ? r.label.slice(0, 21) + "…" : r.label);
      g += r.href ? `<a href="${esc(r.href)}"><text x="4" y="${y + 12}">${name}</text></a>`
        : `<text x="4" y="${y + 12}">${name}</text>`;
      const end = r.end ?? t1;
      g += `<rect x="${sx(r.start)}" y="${y + 3}" width="${Math.max(1, sx(end) - sx(r.start))}" height="${RH - 6}" ` +
        `fill="#cbd2dc"><title>${esc(r.label)}: waiting</title></rect>`;
      for (const [a, b] of r.segments) {
        g += `<rect class="run" x="${sx(a)}" y="${y + 2}" width="${Math.max(1.5, sx(b ?? t1) - sx(a))}" ` +
          `height="${RH - 4}" fill="${fill[r.state] || "#2f855a"}"><title>${esc(r.label)}: running ` +
          `${esc(dur((b ?? t1) - a))}</title></rect>`;
      }
    });
    let grid = "";
    const unit = opts.unit || 1; // ticks fall on round numbers of this unit (3600: hours)
    for (const v of ticks(t0 / unit, t1 / unit, 6).map((x) => x * unit)) {
      grid += `<line class="gridline" x1="${sx(v)}" x2="${sx(v)}" y1="${T}" y2="${H - B}"/>` +
        `<text x="${sx(v)}" y="${H - 6}" text-anchor="middle">${esc((opts.xFmt || num)(v))}</text>`;
    }
    g = grid + g;
    return `<svg class="gantt" viewBox="0 0 ${W} ${H}" width="${W}" height="${H}">${g}</svg>`;
  }
  // Intervals a job held resources, from its state changes [[time, state]...] (states starting/running hold).
  function segments(changes, end) {
    const out = [];
    let start = null;
    for (const [t, s] of changes) {
      const held = s === "starting" || s === "running";
      if (held && start == null) start = t;
      else if (!held && start != null) { out.push([start, t]); start = null; }
    }
    if (start != null) out.push([start, end]);
    return out;
  }

  // -- tables ---------------------------------------------------------------------------------------
  function table(cols, rows, attrs = "") {
    const head = cols.map((c) => `<th class="${c.num ? "num" : ""}">${esc(c.label)}</th>`).join("");
    const body = rows.map((r) => `<tr ${r.__attrs || ""}>${cols.map((c) =>
      `<td class="${c.cls || (c.num ? "num" : "")}">${c.html(r)}</td>`).join("")}</tr>`).join("");
    return `<table ${attrs}><thead><tr>${head}</tr></thead><tbody>${body}</tbody></table>`;
  }

  // Long tables show PAGE rows (a screenful), then more on request: the live page fetches only the rows it shows.
  const PAGE = 50; // = FIRST_ROWS in server/dashboard.py
  const shown = {}; // table id -> rows shown
  let onMore = () => {};
  // `total`: rows that exist (the live page fetches only the rows it shows).
  function pagedTable(id, cols, rows, total = rows.length) {
    const n = Math.min(shown[id] || PAGE, rows.length);
    const more = total > n ? `<p class="muted">showing ${n} of ${total} ` +
      `<button data-more="${id}">show ${Math.min(PAGE, total - n)} more</button> ` +
      `<button data-more="${id}" data-all="1">show all</button></p>` : "";
    return table(cols, rows.slice(0, n), `id="${id}"`) + more;
  }
  document.addEventListener("click", (e) => {
    const b = e.target.closest && e.target.closest("button[data-more]");
    if (!b) return;
    shown[b.dataset.more] = b.dataset.all ? Infinity : (shown[b.dataset.more] || PAGE) + PAGE;
    onMore();
  });

  // ==============================================================================================
  // Static report: `trainmaster simulate --out DIR` embeds the run; nothing is fetched.
  // ==============================================================================================
  function staticReport(data) {
    document.getElementById("subtitle").textContent =
      `simulated: ${data.workload} on ${data.cluster} (${data.gpus} GPUs, ${data.nodes} nodes)`;
    statusEl.textContent = "static report";
    const byName = Object.fromEntries(data.policies.map((p) => [p.name, p]));
    const hours = (s) => num(s / 3600, 1);
    function route() {
      const parts = location.hash.replace(/^#\/?/, "").split("/").map(decodeURIComponent);
      const policy = byName[parts[0] === "p" ? parts[1] : ""] || data.policies[0];
      if (parts[2] === "job" && parts[3]) return jobPage(policy, parts.slice(3).join("/"));
      return overview(policy);
    }
    const costOf = (p) => p.summary.cost ?? (p.jobs.some((j) => j.cost != null)
      ? p.jobs.reduce((a, j) => a + (j.cost || 0), 0) : null);
    function overview(policy) {
      const rows = [
        ["jobs finished", (s) => `${s.finished}/${s.jobs}`], ["mean JCT", (s) => dur(s.mean_jct)],
        ["median JCT", (s) => dur(s.median_jct)], ["p95 JCT", (s) => dur(s.p95_jct)],
        ["p99 JCT", (s) => dur(s.p99_jct)], ["makespan", (s) => dur(s.makespan)],
        ["mean queueing delay", (s) => dur(s.mean_queueing)],
        ["GPU utilization", (s) => (s.gpu_utilization == null ? "-" : `${(100 * s.gpu_utilization).toFixed(1)}%`)],
        ["restarts", (s) => num(s.restarts, 0)],
      ];
      const showCost = data.policies.some((p) => costOf(p) != null);
      const cmp = `<table id="compare"><thead><tr><th>metric</th>${data.policies.map((p) =>
        `<th class="num">${esc(p.name)}</th>`).join("")}</tr></thead><tbody>${rows.map(([label, f]) =>
        `<tr><td>${label}</td>${data.policies.map((p) => `<td class="num">${f(p.summary)}</td>`).join("")}</tr>`)
        .join("")}${showCost ? `<tr><td>cost</td>${data.policies.map((p) =>
        `<td class="num">${money(costOf(p))}</td>`).join("")}</tr>` : ""}<tr><td>rejected</td>${data.policies.map((p) =>
        `<td class="num">${Object.keys(p.rejected || {}).length}</td>`).join("")}</tr></tbody></table>`;
      const cdf = lineChart(data.policies.map((p) => {
        const jcts = (p.jcts || p.jobs.filter((j) => j.state === "succeeded" && j.jct != null).map((j) => j.jct)
          .sort((a, b) => a - b)).map((x) => x / 3600);
        const every = Math.ceil(jcts.length / 2000); // at most ~2,000 steps drawn per policy
        const points = jcts.map((x, i) => [x, (i + 1) / jcts.length]).filter((_, i) => i % every === 0 ||
          i === jcts.length - 1);
        return { name: `${p.name} (mean ${dur(p.summary.mean_jct)})`, step: true, points };
      }), { logX: true, yMin: 0, yMax: 1, xFmt: (v) => `${num(v, 2)} h`, yFmt: (v) => v.toFixed(1), cls: "cdf",
        label: "fraction of jobs finished within x hours (log scale)", legend: true });
      const util = data.policies.map((p, i) => {
        const end = p.jobs.reduce((a, j) => Math.max(a, j.finish || 0), p.usage.length ? p.usage.at(-1)[0] : 0);
        const pts = p.usage.map(([t, u]) => [t / 3600, (100 * u) / Math.max(p.capacity, 1)]);
        pts.push([end / 3600, 0]);
        const u = p.summary.gpu_utilization;
        return `<h3 class="muted">${esc(p.name)}: ${u == null ? "-" : (100 * u).toFixed(1)}% average</h3>` +
          lineChart([{ name: p.name, points: pts, step: true, fill: true, color: COLORS[i % COLORS.length] }],
            { height: 120, yMin: 0, yMax: 100, xFmt: (v) => `${num(v, 1)} h`, yFmt: (v) => `${v}%`, cls: "util" });
      }).join("");
      const tabs = `<div class="tabs">${data.policies.map((p) => `<a class="${p === policy ? "on" : ""}" ` +
        `href="#/p/${encodeURIComponent(p.name)}">${esc(p.name)}</a>`).join("")}</div>`;
      const jobs = [...policy.jobs].sort((a, b) => a.submit - b.submit || (a.id < b.id ? -1 : 1));
      const shown = jobs.slice(0, data.timeline_max || 300);
      const t1 = Math.max(...shown.map((j) => j.finish ?? j.submit));
      const timeline = gantt(shown.map((j) => ({ label: j.id, href: jobHref(policy, j.id), start: j.submit,
        end: j.finish, segments: j.segments || [], state: j.state })), Math.min(...shown.map((j) => j.submit)), t1,
      { xFmt: (v) => `${hours(v)} h`, unit: 3600 });
      const link = (j) => `<a href="${esc(jobHref(policy, j.id))}">${esc(j.id)}</a>`;
      const cols = [
        { label: "job", html: link }, { label: "state", html: (j) => state(j.state) },
        { label: "GPUs", num: true, html: (j) => num(j.gpus, 0) },
        { label: "submit", num: true, html: (j) => `${hours(j.submit)} h` },
        { label: "queued", num: true, html: (j) => dur(j.first_start == null ? null : j.first_start - j.submit) },
        { label: "JCT", num: true, html: (j) => dur(j.jct) },
        { label: "restarts", num: true, html: (j) => num(j.restarts, 0) },
      ];
      if (jobs.some((j) => j.cost != null)) cols.push({ label: "cost", num: true, html: (j) => money(j.cost) });
      app.innerHTML = `<section><h2>Policies compared</h2>${cmp}</section>
        <div class="grid"><section><h2>JCT distribution</h2>${cdf}</section>
        <section><h2>GPU utilization over time</h2>${util}</section></div>
        ${tabs}
        <section><h2>Timeline: ${esc(policy.name)} <span class="muted">(${shown.length} of ${jobs.length} jobs in
        submit order; grey waiting, colour running)</span></h2>${timeline}</section>
        <section><h2>Jobs: ${esc(policy.name)} <span class="muted">(${policy.jobs_total ?? jobs.length}${
  jobs.length < (policy.jobs_total ?? 0) ? `; the first ${jobs.length} are in this page, all in report.json` : ""})</span></h2>
        ${pagedTable("jobs", cols, jobs.map((j) => ({ ...j, __attrs: `data-job="${esc(j.id)}"` })))}</section>`;
    }
    function jobHref(policy, id) { return `#/p/${encodeURIComponent(policy.name)}/job/${encodeURIComponent(id)}`; }
    function jobPage(policy, id) {
      const j = policy.jobs.find((x) => x.id === id);
      if (!j) { app.innerHTML = `<section><p>no job ${esc(id)} under ${esc(policy.name)}</p></section>`; return; }
      const end = j.finish ?? j.submit;
      const pts = [[j.submit / 3600, 0]];
      for (const [a, b] of j.segments || []) pts.push([a / 3600, j.gpus], [b / 3600, 0]);
      pts.push([end / 3600, 0]);
      app.innerHTML = `<p><a href="#/p/${encodeURIComponent(policy.name)}">← ${esc(policy.name)}</a></p>
        <section id="job"><h2>${esc(j.id)} ${state(j.state)} <span class="muted">under ${esc(policy.name)}</span></h2>
        <dl class="kv"><dt>GPUs</dt><dd>${num(j.gpus, 0)}</dd><dt>submitted</dt><dd>${hours(j.submit)} h</dd>
        <dt>queued</dt><dd>${dur(j.first_start == null ? null : j.first_start - j.submit)}</dd>
        <dt>JCT</dt><dd>${dur(j.jct)}</dd><dt>restarts</dt><dd>${num(j.restarts, 0)}</dd>
        ${j.cost != null ? `<dt>cost</dt><dd>${money(j.cost)}</dd>` : ""}
        ${policy.rejected && policy.rejected[j.id] ? `<dt>rejected</dt><dd>${esc(policy.rejected[j.id])}</dd>` : ""}
        </dl></section>
        <section><h2>Allocation over time</h2>${lineChart([{ name: "GPUs held", points: pts, step: true, fill: true }],
        { height: 150, yMin: 0, xFmt: (v) => `${num(v, 2)} h`, cls: "alloc" })}
        ${gantt([{ label: j.id, start: j.submit, end: j.finish, segments: j.segments || [], state: j.state }],
        j.submit, Math.max(end, j.submit + 1), { xFmt: (v) => `${hours(v)} h`, unit: 3600 })}</section>`;
    }
    onMore = route;
    window.addEventListener("hashchange", route);
    route();
  }

  // ==============================================================================================
  // Live dashboard: polls the daemon's API; the token (if any) comes once as ?token=... and is kept
  // in sessionStorage, then sent as a bearer token by every fetch.
  // ==============================================================================================
  function live() {
    const url = new URL(location.href);
    const given = url.searchParams.get("token");
    if (given) sessionStorage.setItem("tm_token", given);
    const token = sessionStorage.getItem("tm_token");
    const headers = token ? { Authorization: `Bearer ${token}` } : {};
    const api = async (path) => {
      const r = await fetch(path, { headers, cache: "no-store" });
      if (!r.ok) throw new Error(`${path}: HTTP ${r.status}`);
      return r.json();
    };
    // The page came with the first screen's data (server/dashboard.py first_screen): painted without a request.
    const firstEl = document.getElementById("tm-first");
    let first = firstEl ? JSON.parse(firstEl.textContent) : null;
    let view = null; // {kind: "overview", first} | {kind: "job", id, logs: AbortController}
    let timer = null;
    const last = {}; // rendered JSON per section: skip re-rendering what did not change
    const put = (id, key, html) => {
      const el = document.getElementById(id);
      if (el && last[id] !== key) { el.innerHTML = html(); last[id] = key; }
    };

    function route() {
      if (view && view.logs) view.logs.abort();
      const seed = first; // only the first view may use it: later it would be stale
      first = null;
      for (const k of Object.keys(last)) delete last[k];
      const m = location.hash.match(/^#\/job\/(.+)$/);
      if (m) {
        const id = decodeURIComponent(m[1]);
        view = { kind: "job", id, logs: new AbortController() };
        app.innerHTML = `<p><a href="#/">← overview</a></p>
          <section id="job"><h2>${esc(id)}</h2><div id="job-head" class="muted">loading…</div></section>
          <div class="grid"><section><h2>Allocation over time</h2><div id="job-alloc"></div></section>
          <section><h2>Loss</h2><div id="job-loss"></div></section>
          <section><h2>Steps per second</h2><div id="job-speed"></div></section>
          <section><h2>Restarts, resizes, preemptions and decisions</h2><div id="job-decisions"></div></section></div>
          <section><h2>Logs <span id="logs-mode" class="muted">(following)</span></h2><pre id="job-logs" class="logs"></pre></section>`;
        followLogs(view);
      } else {
        view = { kind: "overview", first: seed };
        app.innerHTML = `<div id="tiles" class="tiles"></div>
          <div class="grid"><section><h2>Cluster</h2><div id="nodes"></div></section>
          <section><h2>Queues</h2><div id="queues"></div></section></div>
          <section><h2>Pending <span class="muted">(wait reason and predicted start)</span></h2><div id="pending"></div></section>
          <section><h2>Timeline <span class="muted">(recent jobs; grey waiting, green running)</span></h2><div id="timeline"></div></section>
          <section><h2>Jobs</h2><div id="jobs-box"></div></section>`;
      }
      tick();
    }

    async function tick() {
      clearTimeout(timer);
      const current = view;
      try {
        if (current.kind === "job") await renderJob(current);
        else await renderOverview(current);
        statusEl.textContent = `live · updated ${new Date().toLocaleTimeString()}`;
        statusEl.classList.remove("err");
      } catch (e) {
        statusEl.textContent = `update failed: ${e.message}`;
        statusEl.classList.add("err");
      }
      if (current === view) timer = setTimeout(tick, POLL_MS);
    }

    // Each section renders as soon as its own data arrives: the job table never waits for the controller.
    async function renderOverview(v) {
      if (v.first) { // first paint from the page itself; the pending reasons and the timeline load after it
        const f = v.first;
        v.first = null;
        renderJobs(f.overview);
        renderNodes(f.nodes);
        renderTiles(f.overview.states, f.nodes);
        renderQueues(f.queues);
        await Promise.all([api("/v1/pending").then(renderPending), api("/v1/timeline?limit=40").then(renderTimeline)]);
        return;
      }
      const limit = Math.min(shown.jobs || PAGE, 1e6);
      const jobs = api(`/v1/overview?limit=${limit}`), nodes = api("/v1/nodes");
      await Promise.all([jobs.then(renderJobs), nodes.then(renderNodes),
        Promise.all([jobs, nodes]).then(([o, n]) => renderTiles(o.states, n)), api("/v1/queues").then(renderQueues),
        api("/v1/pending").then(renderPending), api("/v1/timeline?limit=40").then(renderTimeline)]);
    }

    function renderTiles(states, nodes) {
      const count = (s) => states[s] || 0;
      const cap = (k) => nodes.reduce((a, n) => a + n.capacity[k], 0);
      const used = (k) => nodes.reduce((a, n) => a + n.capacity[k] - n.free[k], 0);
      const tiles = [["running", count("running") + count("starting")], ["pending", count("pending")],
        ["succeeded", count("succeeded")], ["failed", count("failed")], ["GPUs in use", `${used("gpu")} / ${cap("gpu")}`],
        ["CPUs in use", `${num(used("cpu"), 1)} / ${num(cap("cpu"), 1)}`]];
      put("tiles", JSON.stringify(tiles), () => tiles.map(([k, v]) => `<div class="tile"><b>${v}</b>${k}</div>`).join(""));
    }

    function renderNodes(nodes) {
      put("nodes", JSON.stringify(nodes), () => table([
        { label: "node", html: (n) => esc(n.name) }, { label: "GPU type", html: (n) => esc(n.gpu_type || "-") },
        { label: "zone", html: (n) => esc(n.zone || "-") },
        { label: "kind", html: (n) => (n.transient ? "transient" : "on-demand") },
        { label: "CPU", html: (n) => meter(n.capacity.cpu - n.free.cpu, n.capacity.cpu) },
        { label: "GPU", html: (n) => (n.capacity.gpu ? meter(n.capacity.gpu - n.free.gpu, n.capacity.gpu) : "-") },
        { label: "tasks", cls: "tasks", html: (n) => n.tasks.map((t) => { const id = t.split("/")[0];
          return `<a class="chip" href="#/job/${encodeURIComponent(id)}">${esc(t)}</a>`; }).join("") || "-" },
      ], nodes, 'id="nodes-table"'));
    }

    function renderQueues(queues) {
      put("queues", JSON.stringify(queues), () => table([
        { label: "queue", html: (q) => esc(q.name) }, { label: "weight", num: true, html: (q) => num(q.weight) },
        { label: "running", num: true, html: (q) => q.running }, { label: "pending", num: true, html: (q) => q.pending },
        { label: "GPUs used / quota", html: (q) => (q.quota ? meter(q.gpus, q.quota.gpu) : `${q.gpus} (no quota)`) },
        { label: "CPUs used / quota", html: (q) => (q.quota ? meter(q.cpu, q.quota.cpu) : `${num(q.cpu, 1)} (no quota)`) },
        { label: "borrowing", html: (q) => { if (!q.quota) return "-";
          const b = [q.gpus > q.quota.gpu ? `${q.gpus - q.quota.gpu} GPU` : "",
            q.cpu > q.quota.cpu ? `${num(q.cpu - q.quota.cpu, 1)} CPU` : ""].filter(Boolean);
          return b.length ? b.join(", ") : "no"; } },
      ], queues));
    }

    function renderPending(pending) {
      const now = pending.now;
      put("pending", JSON.stringify(pending.jobs), () => (pending.jobs.length ? table([
        { label: "job", html: (p) => `<a href="#/job/${encodeURIComponent(p.job)}">${esc(p.job)}</a>` },
        { label: "waiting", num: true, html: (p) => dur(now - (p.submitted ?? now)) },
        { label: "why", cls: "wrap", html: (p) => `<b>${esc(p.category)}</b> ${esc(p.reason)}` },
        { label: "predicted start", html: (p) => (p.eta == null ? "unknown" : relative(p.eta, pending.now)) },
      ], pending.jobs, 'id="pending-table"') : `<p class="muted">nothing is waiting</p>`));
    }

    function renderTimeline(timeline) {
      const now = timeline.now;
      put("timeline", JSON.stringify(timeline.jobs.map((j) => [j.id, j.state, j.changes.length])) + Math.floor(now),
        () => {
          const rows = timeline.jobs.map((j) => ({ label: j.id, href: `#/job/${encodeURIComponent(j.id)}`,
            start: j.submit_time, end: j.finish_time ?? now, segments: segments(j.changes, j.finish_time ?? now),
            state: j.state }));
          const t0 = Math.min(...rows.map((r) => r.start));
          return gantt(rows, t0, Math.max(now, t0 + 1), { xFmt: (v) => relative(v, now) });
        });
    }

    function renderJobs(overview) {
      const jobs = overview.jobs, now = overview.now; // newest first
      const extra = ["resizes", "preemptions", "cost"].filter((k) => jobs.some((j) => k in j));
      put("jobs-box", JSON.stringify(jobs) + overview.total, () => {
        const cols = [
          { label: "job", html: (j) => `<a href="#/job/${encodeURIComponent(j.id)}">${esc(j.id)}</a>` },
          { label: "queue", html: (j) => esc(j.queue) }, { label: "state", cls: "st", html: (j) => state(j.state) },
          { label: "submitted", html: (j) => clock(j.submit_time) },
          { label: "elapsed", num: true, html: (j) => dur(j.first_start == null ? null : (j.finish_time ?? now) - j.first_start) },
          { label: "allocation", html: (j) => esc(j.allocation || "-") },
          { label: "step", num: true, html: (j) => num(j.step, 0) }, { label: "loss", num: true, html: (j) => num(j.loss, 4) },
          { label: "restarts", num: true, html: (j) => num(j.restarts, 0) },
          ...extra.map((k) => ({ label: k, num: true, html: (j) => (k === "cost" ? money(j[k]) : num(j[k], 0)) })),
          { label: "why", cls: "wrap", html: (j) => esc(j.message || j.why) },
        ];
        const rows = jobs.map((j) => ({ ...j, __attrs: `data-job="${esc(j.id)}"` }));
        return pagedTable("jobs", cols, rows, overview.total);
      });
      if (!performance.getEntriesByName("tm-jobs-rendered").length) {
        void document.getElementById("jobs").offsetHeight; // laid out, as the first paint will show it
        performance.mark("tm-jobs-rendered"); // read by bench/dashboard_load.py
      }
    }

    async function renderJob(v) {
      const enc = encodeURIComponent(v.id);
      const [job, metrics, why] = await Promise.all([api(`/v1/jobs/${enc}`), api(`/v1/jobs/${enc}/metrics`),
        api(`/v1/jobs/${enc}/why`)]);
      const now = Date.now() / 1000;
      const counts = [["restarts", job.restarts], ["resizes", job.resizes], ["preemptions", job.preemptions]]
        .filter(([, n]) => n != null);
      put("job-head", JSON.stringify([job, why.reason, why.eta]), () => `<div>${state(job.state)}</div>
        <dl class="kv"><dt>queue</dt><dd>${esc(job.queue)} (priority ${job.priority})</dd>
        <dt>allocation</dt><dd>${esc(job.allocation || "-")}</dd>
        <dt>submitted</dt><dd>${clock(job.submit_time)}</dd><dt>started</dt><dd>${clock(job.first_start)}</dd>
        <dt>ended</dt><dd>${clock(job.finish_time)}</dd><dt>step</dt><dd>${num(job.step, 0)}</dd>
        <dt>loss</dt><dd>${num(job.loss, 4)}</dd>
        ${counts.map(([k, n]) => `<dt>${k}</dt><dd>${n}</dd>`).join("")}
        ${job.cost != null ? `<dt>cost</dt><dd>${money(job.cost)}</dd>` : ""}
        <dt>why</dt><dd id="job-why">${esc(why.reason || job.message || job.why || "-")}</dd>
        ${job.state === "pending" ? `<dt>predicted start</dt><dd>${why.eta == null ? "unknown" : relative(why.eta, now)}</dd>` : ""}
        </dl>`);
      const t0 = job.submit_time;
      const end = job.finish_time ?? now;
      const alloc = [[0, 0]];
      for (const a of metrics.allocations) alloc.push([a.time - t0, a.tasks]);
      alloc.push([end - t0, alloc.at(-1)[1]]);
      const gpus = [[0, 0], ...metrics.allocations.map((a) => [a.time - t0, a.gpus]), [end - t0, 0]];
      put("job-alloc", JSON.stringify([metrics.allocations, job.finish_time]), () => lineChart([
        { name: "tasks", points: alloc, step: true, fill: true },
        ...(gpus.some((p) => p[1] > 0) ? [{ name: "GPUs", points: gpus, step: true }] : []),
      ], { width: 480, height: 170, yMin: 0, xFmt: (x) => dur(x), legend: true, cls: "alloc" }));
      const reports = metrics.reports;
      put("job-loss", JSON.stringify(reports.length ? reports.at(-1) : null) + reports.length, () => lineChart(
        [{ name: "loss", points: reports.filter((r) => r.loss != null).map((r) => [r.step, r.loss]) }],
        { width: 480, height: 170, xFmt: (x) => `step ${num(x, 0)}`, cls: "loss", empty: "no loss reported" }));
      put("job-speed", JSON.stringify(reports.length ? reports.at(-1) : null) + reports.length, () => lineChart(
        [{ name: "steps/s", points: reports.filter((r) => r.steps_per_s != null).map((r) => [r.time - t0, r.steps_per_s]) }],
        { width: 480, height: 170, yMin: 0, xFmt: (x) => dur(x), cls: "speed", empty: "no speed reported" }));
      put("job-decisions", JSON.stringify(why.decisions), () => (why.decisions.length ? table([
        { label: "when", html: (d) => clock(d.time) }, { label: "decision", cls: "wrap", html: (d) => esc(d.text) },
      ], why.decisions, 'class="decisions"') : `<p class="muted">no decisions yet</p>`));
    }

    async function followLogs(v) {
      const pre = document.getElementById("job-logs");
      const MAX = 200000;
      try {
        const r = await fetch(`/v1/jobs/${encodeURIComponent(v.id)}/logs?follow=true`, { headers, signal: v.logs.signal });
        if (!r.ok) { pre.textContent = `(no logs: HTTP ${r.status})`; return; }
        const reader = r.body.getReader(), dec = new TextDecoder();
        for (;;) {
          const { done, value } = await reader.read();
          if (done) break;
          const stick = pre.scrollTop + pre.clientHeight >= pre.scrollHeight - 4;
          let text = pre.textContent + dec.decode(value, { stream: true });
          if (text.length > MAX) text = text.slice(text.length - MAX);
          pre.textContent = text;
          if (stick) pre.scrollTop = pre.scrollHeight;
        }
        pre.dataset.ended = "1";
        const label = document.getElementById("logs-mode");
        if (label) label.textContent = "(the job ended)";
      } catch (e) {
        if (e.name !== "AbortError") pre.textContent += `\n(log stream stopped: ${e.message})`;
      }
    }

    onMore = () => { delete last["jobs-box"]; tick(); };
    window.addEventListener("hashchange", route);
    route();
  }

  const embedded = document.getElementById("tm-data");
  if (embedded) staticReport(JSON.parse(embedded.textContent));
  else live();
})();
