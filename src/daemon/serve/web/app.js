"use strict";
// poolwright status page. No framework, no innerHTML: every dynamic string goes
// through textContent / setAttribute (pool names, messages and paths are untrusted).
(() => {
  const SVGNS = "http://www.w3.org/2000/svg";
  const STATES = ["in-sync", "applying", "blocked", "held", "paused", "degraded", "pending", "left-alone", "error"];
  const PAGE_SIZE = 100, MAX_EVENTS = 1000, MAX_NODES = 200, FRAME_MS = 250;
  const $ = (id) => document.getElementById(id);
  const nf = new Intl.NumberFormat("en");
  const collator = new Intl.Collator("en", { numeric: true });

  // ---- DOM helpers -------------------------------------------------------
  function setAttrs(e, attrs) {
    if (!attrs) return;
    for (const [k, v] of Object.entries(attrs)) {
      if (v == null || v === false) continue;
      if (k.startsWith("on")) e.addEventListener(k.slice(2), v);
      else if (k === "style") e.style.cssText = String(v); // the CSP refuses style attributes, not the CSSOM
      else e.setAttribute(k, v === true ? "" : String(v));
    }
  }
  function add(e, kids) {
    for (const k of kids.flat(Infinity)) if (k != null && k !== false) e.append(k instanceof Node ? k : String(k));
    return e;
  }
  const h = (tag, attrs, ...kids) => { const e = document.createElement(tag); setAttrs(e, attrs); return add(e, kids); };
  const s = (tag, attrs, ...kids) => { const e = document.createElementNS(SVGNS, tag); setAttrs(e, attrs); return add(e, kids); };
  const fill = (e, ...kids) => { e.replaceChildren(); return add(e, kids); };
  const kv = (dl, label, ...value) => dl.append(h("dt", null, label), h("dd", null, ...value));
  const mono = (t) => h("code", null, t);
  const trunc = (t, n) => (t.length > n ? t.slice(0, n - 1) + "…" : t);
  const badge = (state) => h("span", { class: "badge st-" + (STATES.includes(state) ? state : "other") }, state || "unknown");

  // ---- time formatting ---------------------------------------------------
  // Every time is shown in one zone, UTC or the browser's, as chosen in the
  // header (#tz-choice, kept in localStorage), as a <time> whose text ends
  // with the zone's name ("21:00:05 UTC", "Thu 3 Dec, 22:00 CET"); the
  // instant is in its datetime and title. A disruption window's own zone
  // is shown beside it, labelled, where it differs.
  const TZ_KEY = "poolwright.tz";
  function readTzChoice() {
    try { return localStorage.getItem(TZ_KEY) === "local" ? "local" : "utc"; } catch (_) { return "utc"; }
  }
  let tzChoice = readTzChoice();
  const viewTz = () => (tzChoice === "local" ? undefined : "UTC"); // undefined: the browser's zone
  const ms = (t) => (typeof t === "number" ? t : t ? Date.parse(t) : NaN);
  const fmtCache = new Map();
  function tzOk(tz) {
    if (!tz) return undefined;
    try { new Intl.DateTimeFormat("en", { timeZone: tz }); return tz; } catch (_) { return "UTC"; }
  }
  function dtf(tz, key, opts, loc) {
    loc = loc || "en-GB";
    const k = (tz || "") + "|" + loc + "|" + key;
    let f = fmtCache.get(k);
    if (!f) {
      try { f = new Intl.DateTimeFormat(loc, { ...opts, timeZone: tz || undefined }); }
      catch (_) { f = new Intl.DateTimeFormat(loc, { ...opts, timeZone: "UTC" }); }
      fmtCache.set(k, f);
    }
    return f;
  }
  const fmtClock = (v, tz, sec) => dtf(tz, sec ? "hms" : "hm", { hour: "2-digit", minute: "2-digit", second: sec ? "2-digit" : undefined, hourCycle: "h23" }).format(v);
  const fmtDay = (v, tz) => dtf(tz, "day", { weekday: "short", day: "numeric", month: "short" }).format(v);
  const dayKey = (v, tz) => dtf(tz, "key", { year: "numeric", month: "2-digit", day: "2-digit" }).format(v);
  // The zone's short name at that instant: "UTC", "CET", "BST", "EST", else "GMT+5:30".
  function zoneName(v, tz) {
    const part = (loc) => {
      const p = dtf(tz, "zone", { timeZoneName: "short" }, loc).formatToParts(v).find((x) => x.type === "timeZoneName");
      return p ? p.value : "";
    };
    const gb = part("en-GB");
    if (!/^GMT[+-]/.test(gb)) return gb || "UTC";
    const us = part("en-US");
    return us && !/^GMT[+-]/.test(us) ? us : gb;
  }
  // The text of a time: the clock and the zone, with the day unless it is
  // today there (o.day forces it either way), seconds with o.sec.
  function fmtAt(v, tz, o) {
    if (isNaN(v)) return "—";
    const day = o && o.day != null ? o.day : dayKey(v, tz) !== dayKey(Date.now(), tz);
    return (day ? fmtDay(v, tz) + ", " : "") + fmtClock(v, tz, o && o.sec) + " " + zoneName(v, tz);
  }
  // A time shown: <time datetime=ISO title=ISO data-zone=ZONE>… ZONE</time>,
  // in the zone chosen unless o.tz says which.
  function timeEl(t, o) {
    o = o || {};
    const v = ms(t);
    if (isNaN(v)) return "—";
    const tz = "tz" in o ? o.tz : viewTz(), iso = new Date(v).toISOString();
    return h("time", { datetime: iso, title: o.title || (typeof t === "string" ? t : iso), "data-zone": zoneName(v, tz) }, fmtAt(v, tz, o));
  }
  // The same instants in a disruption window's own zone, labelled, when it
  // shows them differently from the zone chosen.
  function inZone(wtz, ...vs) {
    vs = vs.map(ms);
    if (!wtz || vs.some(isNaN) || vs.every((v) => fmtAt(v, wtz, { day: true }) === fmtAt(v, viewTz(), { day: true }))) return null;
    return [" (window's zone " + wtz + ": ",
      vs.map((v, i) => [i ? " – " : "", timeEl(v, { tz: wtz, day: i ? endDay(vs[0], v, wtz) : vs.length > 1 || undefined })]), ")"];
  }
  // A daemon's sentence with the instants in it (RFC 3339, or "… UTC")
  // shown as times; without any, cut to n characters when n is given.
  const STAMP = /\b\d{4}-\d{2}-\d{2}(?:T\d{2}:\d{2}(?::\d{2}(?:\.\d+)?)?(?:Z|[+-]\d{2}:?\d{2})| \d{2}:\d{2}(?::\d{2})? UTC)(?![\w:+-])/g;
  function richText(text, n) {
    text = text == null ? "" : String(text);
    const out = [];
    let at = 0;
    for (const m of text.matchAll(STAMP)) {
      const v = Date.parse(m[0].includes("T") ? m[0] : m[0].replace(" ", "T").replace(" UTC", "Z"));
      if (isNaN(v)) continue;
      out.push(text.slice(at, m.index), timeEl(v, { title: m[0], sec: v % 60000 !== 0 }));
      at = m.index + m[0].length;
    }
    if (!out.length) return n ? trunc(text, n) : text;
    out.push(text.slice(at));
    return out;
  }
  function human(sec) {
    sec = Math.max(0, Math.round(sec));
    if (sec < 60) return sec + " s";
    if (sec < 3600) return Math.round(sec / 60) + " min";
    const hrs = Math.floor(sec / 3600), min = Math.round((sec % 3600) / 60);
    if (hrs < 48) return hrs + " h" + (min ? " " + min + " min" : "");
    return Math.floor(sec / 86400) + " d " + Math.round((sec % 86400) / 3600) + " h";
  }
  const pad2 = (n) => String(n).padStart(2, "0");
  // A forecast's duration: "42s", "1m55s" under ten minutes, then "12m", "2h05m", "3d04h".
  function dur(sec) {
    sec = Math.max(0, Math.round(sec));
    if (sec < 60) return sec + "s";
    if (sec < 600) return Math.floor(sec / 60) + "m" + pad2(sec % 60) + "s";
    const min = Math.round(sec / 60);
    if (min < 60) return min + "m";
    if (min < 48 * 60) return Math.floor(min / 60) + "h" + pad2(min % 60) + "m";
    const hrs = Math.round(min / 60);
    return Math.floor(hrs / 24) + "d" + pad2(hrs % 24) + "h";
  }
  // A time from a forecast's start: "+0s", "+30s", "+1m", "+1m30s", "+2h", "+1h30m", "+1d6h".
  function rel(sec) {
    sec = Math.max(0, Math.round(sec));
    const parts = [[Math.floor(sec / 86400), "d"], [Math.floor((sec % 86400) / 3600), "h"], [Math.floor((sec % 3600) / 60), "m"], [sec % 60, "s"]];
    return "+" + (parts.filter(([n]) => n).map(([n, u]) => n + u).join("") || "0s");
  }
  function ago(t) {
    const v = ms(t);
    if (isNaN(v)) return "—";
    const d = (Date.now() - v) / 1000;
    return d >= 0 ? human(d) + " ago" : "in " + human(-d);
  }
  const when = (t) => [timeEl(t), " (", ago(t), ")"];

  // ---- state --------------------------------------------------------------
  const S = {
    status: null, pools: new Map(), names: [], lower: new Map(), filter: "", stateFilter: null, page: 0,
    rowEls: new Map(), route: { view: "none" }, doc: null, seqs: new Set(), early: [], loadGen: 0,
    es: null, esUrl: null, hadError: false, dirty: new Set(), fullDirty: false, pending: false, lastDraw: 0,
    refetchTimer: 0,
  };

  async function getJSON(url) {
    const r = await fetch(url, { headers: { Accept: "application/json" }, cache: "no-store" });
    if (!r.ok) {
      const text = await r.text().catch(() => "");
      const e = new Error(text.trim() || r.status + " " + r.statusText);
      e.status = r.status;
      throw e;
    }
    return r.json();
  }
  function showMsg(text) { const m = $("msg"); m.textContent = text || ""; m.hidden = !text; }
  function parse(data) { try { return JSON.parse(data); } catch (_) { return null; } }

  // ---- routing -------------------------------------------------------------
  function parseRoute() {
    const hs = location.hash;
    if (hs.startsWith("#/pool/")) {
      let name = hs.slice(7);
      try { name = decodeURIComponent(name); } catch (_) { /* keep raw */ }
      return { view: "pool", name };
    }
    return { view: "overview" };
  }
  function onRoute() {
    const hs = location.hash;
    if (hs && hs !== "#" && !hs.startsWith("#/")) return; // in-page anchors
    const r = parseRoute();
    S.route = r;
    showMsg("");
    if (r.view === "pool") showPool(r.name); else showOverview();
  }
  const poolHref = (name) => "#/pool/" + encodeURIComponent(name);

  // ---- live updates ----------------------------------------------------------
  function setLive(ok) {
    const l = $("live");
    l.textContent = ok ? "live" : "reconnecting…";
    l.className = "live " + (ok ? "ok" : "bad");
  }
  function connect(url, hadError) {
    if (S.es && S.esUrl === url) return;
    if (S.es) S.es.close();
    S.esUrl = url;
    S.hadError = !!hadError;
    const es = new EventSource(url);
    S.es = es;
    es.onopen = () => {
      setLive(true);
      if (S.hadError) { S.hadError = false; refetch(); }
    };
    es.onerror = () => {
      if (S.es !== es) return;
      setLive(false);
      S.hadError = true;
      if (es.readyState === EventSource.CLOSED) {
        // The browser gave up (e.g. a non-stream answer): retry once after a pause.
        setTimeout(() => { if (S.es === es) { S.es = null; connect(url, true); } }, 5000);
      }
    };
    es.addEventListener("rollout", (m) => onRollout(parse(m.data)));
    es.addEventListener("pool", (m) => onPoolStatus(parse(m.data)));
    es.addEventListener("config", (m) => onConfig(parse(m.data)));
  }
  function refetch() {
    if (S.route.view === "pool") loadPool(S.route.name, true); else loadStatus();
  }

  function schedule() {
    if (S.pending) return;
    S.pending = true;
    const wait = Math.max(0, FRAME_MS - (performance.now() - S.lastDraw));
    setTimeout(() => requestAnimationFrame(flush), wait);
  }
  function flush() {
    S.pending = false;
    S.lastDraw = performance.now();
    const d = S.dirty;
    if (S.route.view === "overview" && S.status) {
      if (d.has("header")) renderDaemon();
      if (S.fullDirty) { renderSummary(); renderTable(); }
      else {
        for (const k of d) {
          if (!k.startsWith("row:")) continue;
          const name = k.slice(4), old = S.rowEls.get(name), p = S.pools.get(name);
          if (old && p) patchRow(old, p);
        }
      }
    } else if (S.route.view === "pool" && S.doc) {
      if (d.has("header")) renderDaemon();
      if (d.has("head")) renderPoolHead();
      if (d.has("events")) { renderCharts(); renderEvents(); }
    }
    d.clear();
    S.fullDirty = false;
  }

  function onPoolStatus(p) {
    if (!p || typeof p.name !== "string") return;
    const old = S.pools.get(p.name);
    S.pools.set(p.name, p);
    if (!old) {
      let lo = 0, hi = S.names.length;
      while (lo < hi) { const mid = (lo + hi) >> 1; if (S.names[mid] < p.name) lo = mid + 1; else hi = mid; }
      S.names.splice(lo, 0, p.name);
      S.lower.set(p.name, p.name.toLowerCase());
      S.fullDirty = true;
    } else if (old.state !== p.state) S.fullDirty = true;
    else S.dirty.add("row:" + p.name);
    if (S.route.view === "pool" && S.doc && p.name === S.route.name) {
      const rev = S.doc.pool && S.doc.pool.revision;
      S.doc.pool = p;
      S.dirty.add("head");
      if (rev !== p.revision) refetchSoon();
    }
    schedule();
  }
  function onConfig(c) {
    if (!c || typeof c !== "object") return;
    const prev = S.status && S.status.config;
    // A reload can add or remove pools or change bounds: re-read the current view once.
    if (prev && (prev.lastLoadAt !== c.lastLoadAt || JSON.stringify(prev.revision) !== JSON.stringify(c.revision))) refetchSoon();
    if (S.status) S.status.config = c; else S.status = { config: c, pools: [], stub: true };
    if (S.route.view === "overview") renderConfig();
    S.dirty.add("header");
    S.fullDirty = S.route.view === "overview";
    schedule();
  }
  function onRollout(e) {
    // A change across pools moved: the fleet view is read again (soon, once
    // for a burst of events).
    if (e && e.fleet && S.route.view === "overview") { clearTimeout(S.fleetTimer); S.fleetTimer = setTimeout(loadFleet, 300); }
    if (e && S.route.view === "overview" && (e.fleet || String(e.event || "").startsWith("image_"))) { clearTimeout(S.imagesTimer); S.imagesTimer = setTimeout(loadImages, 300); }
    if (!e || S.route.view !== "pool" || e.pool !== S.route.name) return;
    // While the document loads (first time or again), events wait and are
    // merged into the new one by seq; the buffer is bounded.
    if (!S.doc || S.loading) { if (S.early.length < MAX_EVENTS) S.early.push(e); return; }
    if (!addEvent(e)) return;
    S.dirty.add("events");
    if (e.event === "rollout_started" || e.event === "rollout_completed") refetchSoon();
    schedule();
  }
  function addEvent(e) {
    if (e.seq != null) { if (S.seqs.has(e.seq)) return false; S.seqs.add(e.seq); }
    const ev = S.doc.events;
    ev.push(e);
    if (ev.length > 1 && ev[ev.length - 2].seq > e.seq) ev.sort((a, b) => a.seq - b.seq);
    while (ev.length > MAX_EVENTS) S.seqs.delete(ev.shift().seq);
    return true;
  }
  function refetchSoon() {
    clearTimeout(S.refetchTimer);
    S.refetchTimer = setTimeout(refetch, 1000);
  }

  // ---- header (both views) -------------------------------------------------------
  function shortRev(r) {
    if (!r) return "—";
    return (r.branch ? r.branch + "@" : "") + (r.commit || "").slice(0, 7) + (r.dirty ? " (dirty)" : "");
  }
  function renderDaemon() {
    const el = $("daemon");
    fill(el);
    const st = S.status;
    if (!st) return;
    const d = st.daemon, c = st.config;
    const bits = [];
    if (d) {
      bits.push(h("span", { class: "tag " + (d.mode === "apply" ? "t-apply" : "t-dry") }, d.mode || "?"));
      if (d.stopping) bits.push(h("span", { class: "tag t-bad" }, "stopping"));
      else bits.push(h("span", { class: "tag " + (d.ready ? "t-ok" : "t-bad") }, d.ready ? "ready" : "not ready"));
      if (d.ha) bits.push(h("span", { class: "tag" }, "HA " + (d.ha.role || (d.ha.leader ? "leader" : "follower")) + (d.ha.leader ? "" : d.ha.holder ? " (leader " + d.ha.holder + ")" : "")));
    }
    if (c && c.revision) bits.push(h("span", { class: "rev", title: c.revision.subject || "" }, mono(shortRev(c.revision)), " ", trunc(c.revision.subject || "", 60)));
    if (c && c.valid === false) bits.push(h("span", { class: "tag t-bad" }, "config invalid"));
    const r = st.reconcile;
    if (r) bits.push(h("span", { class: "muted" }, "reconcile #" + nf.format(r.count || 0) + (r.lastTrigger ? " (" + r.lastTrigger + ", " + ago(r.lastFinishedAt || r.lastStartedAt) + ")" : "")));
    add(el, bits);
  }

  // ---- overview -----------------------------------------------------------------
  function showOverview() {
    $("view-pool").hidden = true;
    $("view-pool").replaceChildren();
    $("view-overview").hidden = false;
    document.title = "poolwright";
    S.doc = null;
    connect("/v1/events/stream");
    if (S.status && !S.status.stub) renderOverview();
    loadStatus();
  }
  async function loadStatus() {
    const gen = ++S.loadGen;
    try {
      const doc = await getJSON("/v1/status");
      if (gen !== S.loadGen) return;
      setStatus(doc);
      if (S.route.view === "overview") {
        const t0 = performance.now();
        renderOverview();
        if (window.__renderMs == null) { window.__renderMs = performance.now() - t0; window.__firstRowsAt = performance.now(); }
      } else renderDaemon();
    } catch (e) {
      if (gen === S.loadGen && S.route.view === "overview") showMsg("Could not load status: " + e.message);
    }
  }
  function setStatus(doc) {
    S.status = doc;
    S.pools = new Map();
    S.lower = new Map();
    for (const p of doc.pools || []) { S.pools.set(p.name, p); S.lower.set(p.name, p.name.toLowerCase()); }
    S.names = [...S.pools.keys()].sort();
  }
  function renderOverview() {
    showMsg("");
    renderDaemon();
    renderDaemonInfo();
    renderConfig();
    renderSummary();
    renderTable();
    loadFleet();
    loadImages();
    if (S.status && S.status.git) loadPreviews();
  }

  // ---- previews of branches (run --git-url --preview-refs) ----------------------
  async function loadPreviews() {
    try {
      S.previews = await getJSON("/v1/previews");
      if (S.route.view === "overview") renderPreviews();
    } catch (_) { /* the status view says what is wrong */ }
  }
  function previewHref(ref, format) {
    return "/v1/previews/" + ref.split("/").map(encodeURIComponent).join("/") + "?format=" + format;
  }
  function renderPreviews() {
    const doc = S.previews || {}, list = Object.values(doc.previews || {});
    $("previews-sec").hidden = list.length === 0 && !(doc.patterns || []).length;
    const rows = list.map((p) => {
      const s = p.summary;
      const head = h("p", { class: "fhead" }, h("strong", null, mono(p.ref)), " ", mono(shortRev(p.commit)), " ", p.commit.subject || "",
        p.comparedWith ? h("span", { class: "sub" }, " — against ", mono(shortRev(p.comparedWith)), " in force") : null);
      const refused = p.refused ? h("p", { class: "err", role: "alert" }, "Not applied: ", richText(p.refused)) : null;
      const summary = s ? h("p", { class: "sub" }, s.add + " to add, " + s.change + " to change, " + s.destroy + " to destroy, " + s.roll + " to roll (" + s.rollNodes + (s.rollNodes === 1 ? " node)" : " nodes)") +
        (s.blocked ? ", " + s.blocked + " blocked" : "") + (s.held ? ", " + s.held + " held" : "") + ", planned " + ago(p.plannedAt)) : null;
      const changes = (p.changes || []).length ? h("ul", { class: "gates" }, p.changes.map((c) => h("li", null, mono(c.pool), " " + c.action + ": " + c.reason))) : null;
      const errors = (p.errors || []).length ? h("ul", { class: "errors" }, p.errors.map((e) => h("li", null, e))) : null;
      const plan = s ? h("details", null, h("summary", null, "the plan"), h("pre", { class: "plan" }, "…")) : null;
      if (plan) plan.addEventListener("toggle", async () => {
        if (!plan.open) return;
        try {
          const r = await fetch(previewHref(p.ref, "text"), { cache: "no-store" });
          plan.querySelector("pre").textContent = await r.text();
        } catch (e) { plan.querySelector("pre").textContent = "could not load: " + e.message; }
      }, { once: false });
      return h("div", { class: "fleet preview" }, head, refused, summary, changes, errors, plan);
    });
    const more = doc.dropped ? h("p", { class: "sub" }, doc.dropped + " more matching refs are not previewed") : null;
    const failing = doc.error ? h("p", { class: "err", role: "alert" }, "Fetching the refs failed (the previews shown are older): " + doc.error) : null;
    const none = list.length === 0 ? h("p", { class: "muted" }, "No ref matches " + (doc.patterns || []).join(", ") + " yet.") : null;
    $("previews").replaceChildren(...[failing, ...rows, more, none].filter(Boolean));
  }

  // ---- changes across pools: stages as swimlanes, pools as cells ----------------
  const CELLS = ["done", "in-sync", "rolling", "stopped", "waiting", "failed", "rolled-back", "paused", "error", "unknown"];
  const MAX_CELLS = 400; // a larger stage is drawn as a bar, its failed and rolling pools named
  async function loadFleet() {
    try {
      const doc = await getJSON("/v1/fleet");
      S.fleets = doc.fleets || [];
      if (S.route.view === "overview") renderFleet();
    } catch (_) { /* the status view says what is wrong */ }
  }
  function stageState(st) {
    const r = st.record;
    if (!r) return ["not started"];
    if (r.passedAt) return ["passed ", when(r.passedAt)];
    if (r.completedAt && r.rolled > 0 && r.soakUntil && ms(r.soakUntil) > Date.now()) return ["soaking until ", when(r.soakUntil)];
    if (r.completedAt) return ["done, waiting for its gates"];
    return ["rolling since ", when(r.startedAt)];
  }
  function laneCells(st) {
    if (st.cells.length <= MAX_CELLS) {
      return h("div", { class: "cells", role: "list" }, st.cells.map(([pool, cell]) =>
        h("a", { class: "cell c-" + (CELLS.includes(cell) ? cell : "unknown"), role: "listitem", href: poolHref(pool), title: pool + ": " + cell, "aria-label": pool + ": " + cell })));
    }
    const n = st.cells.length, count = new Map();
    for (const [, c] of st.cells) count.set(c, (count.get(c) || 0) + 1);
    const bar = h("div", { class: "bar", role: "img", "aria-label": CELLS.filter((c) => count.get(c)).map((c) => count.get(c) + " " + c).join(", ") },
      CELLS.filter((c) => count.get(c)).map((c) => h("span", { class: "c-" + c, style: "width:" + (100 * count.get(c) / n).toFixed(2) + "%", title: count.get(c) + " " + c })));
    const named = st.cells.filter(([, c]) => c === "failed" || c === "rolling" || c === "stopped").slice(0, 20);
    return [bar, named.length ? h("p", { class: "sub" }, named.map(([p, c], i) => [i ? ", " : "", h("a", { href: poolHref(p) }, p), " (" + c + ")"])) : null];
  }
  function renderFleet() {
    const sec = $("fleet-sec"), box = $("fleets"), fleets = S.fleets || [];
    sec.hidden = fleets.length === 0;
    box.replaceChildren(...fleets.map((f) => {
      const c = f.change || {}, status = (c.status && c.status.state) || "unknown";
      const halted = status === "halted";
      const head = h("p", { class: "fhead" }, h("strong", null, f.name), " change ", mono(c.id || "—"), " ",
        h("span", { class: "tag " + (halted ? "t-bad" : status === "completed" ? "t-ok" : "") }, status));
      const why = halted ? h("p", { class: "halt", role: "alert" }, "Halted ", c.status.at ? when(c.status.at) : null, ": ", richText(c.status.reason || ""))
        : status === "paused" ? h("p", { class: "sub" }, "Paused by " + c.status.by + ": ", richText(c.status.reason))
        : f.waiting ? h("p", { class: "sub" }, richText(f.waiting.message)) : null;
      const lanes = (f.stages || []).map((st, i) => h("div", { class: "lane" + (halted ? " lane-halted" : "") },
        h("div", { class: "lname" }, h("strong", null, (i + 1) + ". " + st.name), h("span", { class: "sub" },
          st.done + "/" + st.pools + " done" + (st.rolling ? ", " + st.rolling + " rolling" : "") + (st.failed ? ", " + st.failed + " failed" : "") +
          (st.soakSeconds ? ", soak " + human(st.soakSeconds) : "") + " — ", stageState(st))),
        laneCells(st)));
      const gates = Object.entries(c.gates || {}).map(([name, g]) => {
        const last = g.last;
        const text = !last ? "not read yet" : last.result === "holds" ? "holds (" + last.value + ")" : last.result === "breached" ? "breached (" + last.value + ")" : "cannot be read: " + last.error;
        return h("li", { class: last && last.result !== "holds" ? "err" : null }, "gate ", mono(name), ": " + text + (last ? ", read " + ago(last.at) : ""));
      });
      return h("div", { class: "fleet" }, head, why, lanes, gates.length ? h("ul", { class: "gates" }, gates) : null);
    }));
  }
  // ---- image channels: the image in force, the newest, the queued, each pool's lag ----
  async function loadImages() {
    try {
      S.images = await getJSON("/v1/images");
      if (S.route.view === "overview") renderImages();
    } catch (_) { /* the status view says what is wrong */ }
  }
  function release(r) {
    return r ? [mono(r.image), " (released ", when(r.released), ")"] : "none yet";
  }
  function renderImages() {
    const sec = $("images-sec"), box = $("images"), doc = S.images || {}, channels = doc.channels || [];
    sec.hidden = channels.length === 0;
    box.replaceChildren(...channels.map((c) => {
      const r = c.record || {}, pools = c.pools || [];
      const behind = pools.filter((p) => p.lagSeconds > 0);
      const rows = [
        h("li", null, "in force: ", release(r.inForce), r.change ? [" — change ", mono(r.change)] : null),
        r.newest && (!r.inForce || r.newest.image !== r.inForce.image) ? h("li", null, "newest: ", release(r.newest), r.eligibleAt ? [", eligible ", when(r.eligibleAt)] : null) : null,
        r.queued ? h("li", null, "queued: ", release(r.queued), ", after the change in flight") : null,
        r.error ? h("li", { class: "err", role: "alert" }, "source failing: ", richText(r.error), "; the image in force stays") : null,
        h("li", { class: "sub" }, pools.length + " pool(s), " + behind.length + " behind the channel" +
          (behind.length ? ": " + behind.slice(0, 10).map((p) => p.pool + " (" + human(p.lagSeconds) + ")").join(", ") : "") +
          (r.askedAt ? "; asked " + ago(r.askedAt) : "")),
      ];
      return h("div", { class: "fleet" }, h("p", { class: "fhead" }, h("strong", null, "channel " + c.name)), h("ul", { class: "gates" }, rows));
    }), ...Object.entries(doc.recalled || {}).map(([image, why]) =>
      h("p", { class: "halt" }, "Recalled ", mono(image), " by " + why.by + ": ", richText(why.reason || ""))));
  }
  function renderDaemonInfo() {
    const dl = $("daemon-info"), st = S.status, d = st.daemon || {}, r = st.reconcile || {};
    dl.replaceChildren();
    kv(dl, "mode", d.mode || "—", d.gitCommittedOnly ? " (git committed files only)" : "");
    kv(dl, "state", d.stopping ? "stopping" : d.ready ? "ready" : "not ready");
    if (d.ha) kv(dl, "HA", (d.ha.role || "") + " — lease ", mono(d.ha.lease || "?"), ", me ", mono(d.ha.identity || "?"), ", holder ", mono(d.ha.holder || "none"));
    kv(dl, "pid", String(d.pid ?? "—"));
    kv(dl, "started", d.startedAt ? when(d.startedAt) : "—");
    kv(dl, "pools dir", mono(d.dir || "—"));
    kv(dl, "state dir", mono(d.stateDir || "—"));
    kv(dl, "reconciles", nf.format(r.count || 0), r.lastTrigger ? ", last trigger " + r.lastTrigger : "");
    kv(dl, "last finished", r.lastFinishedAt ? when(r.lastFinishedAt) : "—");
    kv(dl, "next resync", r.nextResyncAt ? when(r.nextResyncAt) : "—");
    if (r.error) kv(dl, "reconcile error", h("span", { class: "err mono" }, r.error));
    const ov = st.overrides || [];
    if (ov.length) kv(dl, "overrides", h("details", null, h("summary", null, ov.length + " active"), h("pre", null, ov.map((o) => JSON.stringify(o)).join("\n"))));
  }
  function renderConfig() {
    const c = (S.status && S.status.config) || {};
    const dl = $("config-info");
    dl.replaceChildren();
    kv(dl, "valid", h("span", { class: "tag " + (c.valid === false ? "t-bad" : "t-ok") }, c.valid === false ? "no" : "yes"));
    if (c.revision) kv(dl, "revision", mono(shortRev(c.revision)), " ", c.revision.subject || "");
    if (c.rejectedRevision) kv(dl, "rejected", h("span", { class: "err" }, mono(shortRev(c.rejectedRevision)), " ", c.rejectedRevision.subject || ""));
    kv(dl, "in force since", c.inForceSince ? when(c.inForceSince) : "—");
    kv(dl, "last load", c.lastLoadAt ? when(c.lastLoadAt) : "—");
    // run --git-url: the repo, the last fetch, and what was not applied and why.
    const g = S.status && S.status.git;
    if (g) {
      kv(dl, "config repo", mono(g.url || "?"), " ", mono(g.branch || ""), g.path ? " " : "", g.path ? mono(g.path) : "");
      if (g.verify) kv(dl, "signed tips only", mono("--git-verify " + g.verify));
      kv(dl, "in force", g.inForce ? h("span", null, mono(shortRev(g.inForce)), " ", g.inForce.subject || "") : "nothing yet");
      kv(dl, "last fetch", g.lastFetchAt ? when(g.lastFetchAt) : "never",
        g.fetched && (!g.inForce || g.fetched.commit !== g.inForce.commit) ? h("span", null, ", tip ", mono(shortRev(g.fetched))) : "");
      if (g.error) kv(dl, "fetch failing", h("span", { class: "err" }, String(g.failures || 1), " in a row: ", richText(g.error)));
      if (g.refused) kv(dl, "refused", h("span", { class: "err" }, mono((g.refused.commit || "").slice(0, 7)), " ", richText(g.refused.reason || "")));
    }
    const ul = $("config-errors"), errs = c.errors || [];
    ul.replaceChildren(...errs.map((e) => h("li", null, String(e))));
    ul.hidden = errs.length === 0;
  }
  function renderSummary() {
    const box = $("state-summary");
    const counts = new Map();
    for (const p of S.pools.values()) counts.set(p.state, (counts.get(p.state) || 0) + 1);
    const states = [null, ...STATES, ...[...counts.keys()].filter((k) => !STATES.includes(k))];
    if (box.childElementCount !== states.length) {
      box.replaceChildren(...states.map((st) => h("button", {
        type: "button", class: "sum", "data-state": st ?? "all",
        onclick: () => { S.stateFilter = S.stateFilter === st || st === null ? null : st; S.page = 0; renderSummary(); renderTable(); },
      })));
    }
    [...box.children].forEach((b, i) => {
      const st = states[i];
      const n = st === null ? S.pools.size : counts.get(st) || 0;
      fill(b, st === null ? "all" : badge(st), " ", h("span", { class: "n" }, nf.format(n)));
      b.setAttribute("aria-pressed", String(S.stateFilter === st));
      b.classList.toggle("zero", n === 0 && st !== null);
    });
  }
  function filtered() {
    const f = S.filter.toLowerCase(), sf = S.stateFilter, out = [];
    for (const n of S.names) {
      const p = S.pools.get(n);
      if (sf && p.state !== sf) continue;
      if (f && !S.lower.get(n).includes(f)) continue;
      out.push(p);
    }
    return out;
  }
  function renderTable() {
    const list = filtered();
    const pages = Math.max(1, Math.ceil(list.length / PAGE_SIZE));
    S.page = Math.min(Math.max(0, S.page), pages - 1);
    const slice = list.slice(S.page * PAGE_SIZE, (S.page + 1) * PAGE_SIZE);
    // Reuse rows already on screen (patched in place) so that links under the pointer stay put.
    const tb = $("pools").tBodies[0], old = S.rowEls, trs = [];
    S.rowEls = new Map();
    for (const p of slice) {
      let tr = old.get(p.name);
      if (tr) patchRow(tr, p); else tr = poolRow(p);
      S.rowEls.set(p.name, tr);
      trs.push(tr);
    }
    if (!slice.length) trs.push(h("tr", null, h("td", { colspan: 6, class: "muted" }, S.pools.size ? "no pool matches the filter" : "no pools configured")));
    const cur = tb.children;
    if (cur.length !== trs.length || trs.some((tr, i) => cur[i] !== tr)) tb.replaceChildren(...trs);
    const filt = S.filter || S.stateFilter;
    $("page-info").textContent = "page " + (S.page + 1) + " of " + pages + " (" + nf.format(list.length) + " pool" + (list.length === 1 ? "" : "s") +
      (filt ? " matching, of " + nf.format(S.pools.size) : "") + ")";
    $("prev").disabled = S.page === 0;
    $("next").disabled = S.page >= pages - 1;
  }
  function revCell(rev) {
    if (!rev) return "—";
    const c = S.status && S.status.config && S.status.config.revision;
    const sha = rev.slice(rev.lastIndexOf("@") + 1);
    const subj = c && sha.length >= 4 && (c.commit || "").startsWith(sha) ? c.subject : "";
    return [mono(rev), subj ? " " : null, subj ? h("span", { class: "sub", title: subj }, trunc(subj, 50)) : null];
  }
  // A roll's progress: "4/6 done, 2 launching, 2 old draining" (the parts
  // that are not zero), the bar filled by done of desired. A daemon that
  // does not count them: "updated/desired".
  function progressText(r) {
    const want = r.desired || 0;
    if (typeof r.done !== "number") return r.updated + "/" + want + " updated, " + r.available + " available";
    return [r.done + "/" + want + " done", r.launching ? r.launching + " launching" : null, r.draining ? r.draining + " old draining" : null]
      .filter(Boolean).join(", ");
  }
  function progress(r) {
    if (!r) return "—";
    const want = r.desired || 0, hasDone = typeof r.done === "number", filled = hasDone ? r.done : r.updated || 0, text = progressText(r);
    return [
      h("span", { class: "progress-text", "data-desired": want, "data-done": hasDone ? r.done : null,
        "data-launching": hasDone ? r.launching || 0 : null, "data-draining": hasDone ? r.draining || 0 : null }, text),
      h("progress", { max: Math.max(1, want), value: Math.min(filled, want), "aria-label": text }),
    ];
  }
  // The phase of a roll, as the headline of a pool not in sync (none from
  // a daemon that does not say).
  function phaseOf(p) {
    const ph = p && p.rollout && p.rollout.phase;
    if (!ph || typeof ph !== "object" || !(ph.text || ph.kind) || p.state === "in-sync") return null;
    // A bake whose end has passed is over (the next event says what follows).
    return ph.kind === "bake" && ph.until && ms(ph.until) <= Date.now() ? null : ph;
  }
  const phaseLine = (ph) => [richText(ph.text || ph.kind), ph.until ? [" until ", timeEl(ph.until)] : null];
  function blockedText(b) {
    if (!b) return null;
    return [richText(b.reason || "blocked"), b.until ? [" until ", timeEl(b.until), inZone(tzOk(b.timezone), b.until)] : null];
  }
  function patchRow(tr, p) {
    const fresh = poolRow(p);
    tr.setAttribute("data-state", p.state);
    const cells = [...fresh.cells];
    for (let i = 1; i < cells.length; i++) tr.cells[i].replaceWith(cells[i]);
  }
  function poolRow(p) {
    const err = p.lastError && p.lastError.message, ph = phaseOf(p);
    return h("tr", { "data-pool": p.name, "data-state": p.state },
      h("td", { class: "name" }, h("a", { href: poolHref(p.name) }, p.name)),
      h("td", null, badge(p.state), ph ? h("span", { class: "phase", "data-kind": ph.kind || "" }, phaseLine(ph)) : null,
        p.message ? h("span", { class: "sub", title: p.message }, richText(p.message, 70)) : null),
      h("td", { class: "prog" }, progress(p.rollout)),
      h("td", null, revCell(p.revision)),
      h("td", null, p.blocked ? blockedText(p.blocked) : "—"),
      h("td", { class: err ? "err" : "muted", title: err ? (p.lastError.at ? p.lastError.at + ": " : "") + err : null }, err ? richText(err, 60) : "—"));
  }

  // ---- pool page ------------------------------------------------------------------
  function section(id, title) {
    return h("section", { id, "aria-labelledby": "h-" + id }, h("h2", { id: "h-" + id }, title), h("div", { class: "body" }));
  }
  const body = (id) => $(id).querySelector(".body");
  function showPool(name) {
    $("view-overview").hidden = true;
    const v = $("view-pool");
    v.hidden = false;
    document.title = "poolwright — " + name;
    S.doc = null; S.seqs = new Set(); S.early = [];
    v.replaceChildren(
      h("p", { class: "back" }, h("a", { href: "#/" }, "← all pools")),
      h("section", { id: "pool-head", "aria-labelledby": "h-pool" },
        h("h1", { id: "h-pool" }, h("span", { class: "mono" }, name), " ", h("span", { id: "pool-badge" })),
        h("p", { id: "phase", hidden: true }), h("p", { id: "pool-msg" }), h("div", { id: "pool-progress", class: "prog" }),
        h("dl", { id: "counts", class: "counts" }), h("div", { id: "pool-alerts" }), h("div", { id: "control" })),
      section("timeline", "Nodes"), section("capacity", "Capacity"), section("windows", "Disruption windows"),
      section("plan", "Plan"), section("forecast", "Forecast"), section("events", "Recent events"));
    connect("/v1/events/stream?pool=" + encodeURIComponent(name));
    loadPool(name, false);
  }
  async function loadPool(name, again) {
    const gen = ++S.loadGen;
    S.loading = true;
    try {
      const doc = await getJSON("/v1/pools/" + encodeURIComponent(name) + "/page");
      if (gen === S.loadGen) S.loading = false;
      if (gen !== S.loadGen || S.route.view !== "pool" || S.route.name !== name) return;
      doc.events = Array.isArray(doc.events) ? doc.events.slice() : [];
      S.doc = doc;
      S.seqs = new Set(doc.events.map((e) => e.seq));
      for (const e of S.early) addEvent(e);
      S.early = [];
      if (doc.pool) S.pools.set(name, doc.pool);
      if (doc.daemon && (!S.status || S.status.stub)) // optional: lets a direct load fill the header
        S.status = { daemon: doc.daemon, config: doc.config || (S.status && S.status.config), reconcile: doc.reconcile, pools: [], stub: true };
      showMsg("");
      renderPoolHead();
      if (!again) renderControl();
      renderCharts();
      renderPlan();
      renderForecast();
      renderEvents();
      renderDaemon();
    } catch (e) {
      if (gen === S.loadGen) { S.loading = false; S.early = []; }
      if (gen !== S.loadGen || S.route.view !== "pool") return;
      if (e.status === 404) showMsg("Unknown pool: " + e.message);
      else showMsg("Could not load pool " + name + ": " + e.message);
    }
  }
  function lastCounts(doc) {
    for (let i = doc.events.length - 1; i >= 0; i--) if (doc.events[i].counts) return doc.events[i].counts;
    return null;
  }
  function renderPoolHead() {
    const doc = S.doc, p = doc.pool || {};
    fill($("pool-badge"), badge(p.state));
    // The phase of the roll is the headline when the daemon says it; the
    // message follows as a second line.
    const ph = phaseOf(p), pe = $("phase");
    pe.hidden = !ph;
    if (ph) { pe.setAttribute("data-kind", ph.kind || ""); fill(pe, phaseLine(ph)); } else { pe.removeAttribute("data-kind"); fill(pe); }
    $("pool-msg").classList.toggle("secondary", !!ph);
    fill($("pool-msg"), richText(p.message || ""), p.revision ? h("span", { class: "rev" }, " · ", revCell(p.revision)) : null,
      p.provider ? h("span", { class: "muted" }, " · provider ", p.provider) : null);
    fill($("pool-progress"), p.rollout ? progress(p.rollout) : null);
    const c = p.rollout || lastCounts(doc) || {};
    const dl = $("counts");
    dl.replaceChildren();
    const keys = ["desired", "total", "available", "updated", "outdated"];
    if (typeof c.done === "number") keys.push("done", "launching", "draining");
    for (const k of keys) {
      dl.append(h("div", null, h("dt", null, k), h("dd", { "data-count": k }, c[k] == null ? "—" : String(c[k]))));
    }
    const al = $("pool-alerts");
    al.replaceChildren();
    if (p.pending && p.pending.length) al.append(h("p", null, "pending: ", p.pending.map((x, i) => [i ? "; " : "", richText(x)])));
    if (p.blocked) {
      const b = p.blocked;
      al.append(h("p", { class: "alert warn" }, h("strong", null, "Blocked: "), blockedText(b),
        b.since ? [" · since ", timeEl(b.since)] : "", p.blockedSeconds ? " (" + human(p.blockedSeconds) + ")" : ""));
    }
    // Who refuses a drain now (the pods and their PodDisruptionBudgets), by node.
    const drains = (p.rollout && p.rollout.blockedDrains) || {};
    for (const node of Object.keys(drains)) {
      al.append(h("p", { class: "alert warn", "data-blocked-drain": node }, h("strong", null, "Drain blocked: "),
        h("span", { class: "mono" }, node), ": ", richText(String(drains[node]))));
    }
    // Old nodes do-not-disrupt holds (kept in service, out of the roll).
    const held = (p.rollout && p.rollout.heldNodes) || {};
    for (const node of Object.keys(held)) {
      al.append(h("p", { class: "alert warn", "data-held-node": node }, h("strong", null, "Held (do-not-disrupt): "),
        h("span", { class: "mono" }, node), ": ", richText(String(held[node]))));
    }
    if (p.lastError) al.append(h("p", { class: "alert bad" }, h("strong", null, "Last error"), p.lastError.at ? [" (", timeEl(p.lastError.at), ")"] : "", ": ",
      h("span", { class: "mono" }, richText(p.lastError.message || ""))));
  }
  function renderControl() {
    const box = $("control"), name = S.route.name;
    box.replaceChildren();
    if (!S.doc.control) { box.append(h("p", { class: "muted" }, "read-only: pause and resume need the control socket or token")); return; }
    const input = h("input", { id: "reason", type: "text", required: true, placeholder: "why?", size: 40, "aria-describedby": "control-out" });
    const out = h("output", { id: "control-out", "aria-live": "polite" });
    const act = async (verb) => {
      const reason = input.value.trim();
      if (!reason) { out.textContent = "a reason is required"; input.focus(); return; }
      out.textContent = verb + "…";
      try {
        const r = await fetch("/v1/pools/" + encodeURIComponent(name) + "/" + verb, {
          method: "POST", headers: { "Content-Type": "application/json" }, body: JSON.stringify({ reason }) });
        const text = (await r.text()).trim();
        out.textContent = (r.ok ? "" : r.status + ": ") + (text || r.statusText);
        if (r.ok) { input.value = ""; refetchSoon(); }
      } catch (e) { out.textContent = verb + " failed: " + e.message; }
    };
    box.append(h("form", { class: "control", onsubmit: (e) => e.preventDefault() },
      h("label", { for: "reason" }, "Reason "), input, " ",
      h("button", { type: "button", id: "pause", onclick: () => act("pause") }, "Pause"), " ",
      h("button", { type: "button", id: "resume", onclick: () => act("resume") }, "Resume"), " ", out));
  }
  function renderPlan() {
    const b = body("plan"), t = S.doc.planText;
    fill(b, t ? h("pre", { class: "plan" }, t) : h("p", { class: "muted" }, "in sync: nothing planned"));
  }

  // ---- charts -----------------------------------------------------------------------
  const width = (el) => Math.max(560, Math.floor((el.clientWidth || 1000)));
  function niceStep(span, target, steps) {
    for (const st of steps) if (span / st <= target) return st;
    return steps[steps.length - 1] * Math.ceil(span / target / steps[steps.length - 1]);
  }
  const TIME_STEPS = [1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 10800, 21600, 43200, 86400].map((x) => x * 1000);
  // Ticks fall on round times of the zone shown (UTC, or the browser's zone).
  const zoneOffset = (v, tz) => (tz ? 0 : -new Date(v).getTimezoneOffset() * 60000);
  // A time axis: clock ticks (a new day's first tick names the day), and
  // the zone they are in left of the plot (data-zone).
  function timeAxis(g, x, t0, t1, y, tz, w) {
    const step = niceStep(t1 - t0, Math.max(3, Math.floor(w / 90)), TIME_STEPS);
    const off = zoneOffset(t0, tz), left = x(t0);
    let prevDay = dayKey(t0, tz);
    for (let t = Math.ceil((t0 + off) / step) * step - off; t <= t1; t += step) {
      const px = x(t), day = dayKey(t, tz), label = (day !== prevDay ? fmtDay(t, tz) + " " : "") + fmtClock(t, tz, step < 60000);
      prevDay = day;
      g.append(s("line", { class: "grid", x1: px, x2: px, y1: 0, y2: y }),
        s("text", { class: "tick", "data-xtick": t, x: px, y: y + 13, "text-anchor": px > x(t1) - 20 ? "end" : px < left + 20 ? "start" : "middle" }, label));
    }
    const zone = zoneName(t0, tz);
    g.append(s("text", { class: "tick tz", "data-zone": zone, x: left - 4, y: y + 13, "text-anchor": "end" }, s("title", null, "times in " + zone), zone));
  }
  function nowLine(g, px, y0, y1) {
    g.append(s("line", { class: "now", "data-now": "", x1: px, x2: px, y1: y0, y2: y1 }),
      s("text", { class: "tick now-t", x: px - 3, y: y0 + 9, "text-anchor": "end" }, "now"));
  }
  function svgRoot(w, hgt, label) {
    return s("svg", { role: "img", "aria-label": label, width: w, height: hgt, viewBox: "0 0 " + w + " " + hgt }, s("title", null, label));
  }
  function legend(items) {
    return h("ul", { class: "legend" }, items.map(([cls, text]) => h("li", null, h("span", { class: "sw " + cls, "aria-hidden": "true" }), text)));
  }
  function timeDomain(doc, now) {
    let t0 = now;
    for (const e of doc.events) { const t = ms(e.ts); if (t < t0) t0 = t; }
    if (now - t0 < 60000) t0 = now - 60000;
    return [t0, now + (now - t0) * 0.02];
  }

  function nodePhases(events, t0, now, current) {
    const nodes = new Map();
    for (const e of events) {
      if (!e.node) continue;
      const t = ms(e.ts);
      if (isNaN(t)) continue;
      let n = nodes.get(e.node);
      if (!n) {
        n = { id: e.node, bars: [], blocks: [], cur: null, last: t, start: t };
        // A node first seen mid-life was up before the window (one first seen
        // going away needs no bar before it).
        if (e.event !== "node_create_requested" && e.event !== "node_terminated") { n.cur = { phase: "healthy", start: t0, old: true }; n.start = t0; }
        nodes.set(e.node, n);
      }
      n.last = t;
      const to = (phase) => { if (n.cur) { n.cur.end = t; n.bars.push(n.cur); } n.cur = phase ? { phase, start: t } : null; };
      const cur = n.cur && n.cur.phase;
      switch (e.event) {
        case "node_create_requested": to("launching"); break;
        case "node_healthy": case "canary_healthy": case "node_uncordoned": if (cur !== "healthy") to("healthy"); break;
        case "node_cordoned": case "drain_started": case "node_quarantined": if (cur !== "draining") to("draining"); break;
        case "drain_blocked":
          if (cur !== "draining") to("draining");
          n.blocks.push({ t, msg: e.message || "drain blocked" });
          n.cur.blocked = e.message || "drain blocked";
          break;
        case "terminate_requested": case "node_failed": case "reimage_requested": if (cur !== "terminating") to("terminating"); break;
        case "node_terminated": to(null); break;
        default: break;
      }
    }
    for (const n of nodes.values()) if (n.cur) { n.cur.end = now; n.cur.open = true; n.bars.push(n.cur); n.cur = null; }
    // Nodes with no event in the window: drawn from the last observation,
    // in the phase they are in, since before the window when they are older.
    for (const o of current || []) {
      if (!o || typeof o.id !== "string" || nodes.has(o.id)) continue;
      const phase = o.state === "pending" ? "launching" : o.state === "terminating" ? "terminating"
        : o.cordoned ? "draining" : o.state === "unhealthy" ? "unhealthy" : "healthy";
      const since = ms(phase === "healthy" ? o.healthySince || o.launchedAt : o.launchedAt);
      const start = isNaN(since) || since < t0 ? t0 : since;
      nodes.set(o.id, { id: o.id, bars: [{ phase, start, end: now, open: true, old: start === t0 }], blocks: [], last: start, start });
    }
    return [...nodes.values()];
  }

  function renderCharts() {
    if (!S.doc || !$("timeline")) return;
    const now = Date.now();
    renderTimeline(now);
    renderCapacity(now);
    renderWindows(now);
  }
  function renderTimeline(now) {
    const doc = S.doc, b = body("timeline"), tz = viewTz();
    const [t0, t1] = timeDomain(doc, now);
    let nodes = nodePhases(doc.events, t0, now, doc.nodes);
    const total = nodes.length;
    if (!total) { fill(b, h("p", { class: "muted" }, "no node events in the recent window")); return; }
    if (total > MAX_NODES) nodes = nodes.sort((a, c) => c.last - a.last).slice(0, MAX_NODES);
    nodes.sort((a, c) => a.start - c.start || collator.compare(a.id, c.id));
    const w = width(b), rowH = 18, top = 4;
    const labelW = Math.min(170, Math.max(60, 7 * Math.max(...nodes.map((n) => n.id.length)) + 12));
    const plotH = nodes.length * rowH + top, hgt = plotH + 20;
    const x = (t) => labelW + ((t - t0) / (t1 - t0)) * (w - labelW - 8);
    const svg = svgRoot(w, hgt, "Node timeline of pool " + S.route.name + ": " + total + " nodes, phases launching, healthy, unhealthy, draining, terminating");
    const g = s("g");
    timeAxis(g, x, t0, t1, plotH, tz, w - labelW);
    nodes.forEach((n, i) => {
      const y = top + i * rowH;
      g.append(s("text", { class: "label", x: labelW - 6, y: y + rowH - 6, "text-anchor": "end" }, n.id));
      for (const bar of n.bars) {
        const x0 = x(bar.start), x1 = x(bar.end);
        const tip = n.id + " " + bar.phase + (bar.old ? " (since before the window)" : "") + ": " + fmtAt(bar.start, tz, { sec: true }) + " – " +
          (bar.open ? "now" : fmtAt(bar.end, tz, { sec: true })) + " (" + human((bar.end - bar.start) / 1000) + ")" + (bar.blocked ? "\nblocked: " + bar.blocked : "");
        g.append(s("rect", { class: "ph ph-" + bar.phase + (bar.blocked ? " blocked" : ""), "data-node": n.id, "data-phase": bar.phase,
          x: x0.toFixed(1), y: y + 3, width: Math.max(1.5, x1 - x0).toFixed(1), height: rowH - 6, rx: 2 }, s("title", null, tip)));
      }
      const lastBlock = n.blocks[n.blocks.length - 1];
      if (lastBlock) {
        const px = x(lastBlock.t);
        g.append(s("path", { class: "blk", "data-node": n.id, "data-marker": "drain_blocked", d: `M${px.toFixed(1)} ${y + 1}l5 8-5 8-5-8z` },
          s("title", null, n.id + " drain blocked: " + lastBlock.msg)));
      }
    });
    nowLine(g, x(now), 0, plotH);
    svg.append(g);
    const blocked = nodes.filter((n) => n.blocks.length);
    const rows = [];
    for (const n of nodes) for (const bar of n.bars) rows.push(h("tr", null, h("th", { scope: "row" }, n.id), h("td", null, bar.phase),
      h("td", null, bar.old ? "before window" : timeEl(bar.start, { sec: true })), h("td", null, bar.open ? "now" : timeEl(bar.end, { sec: true })),
      h("td", null, bar.blocked ? richText(bar.blocked) : "")));
    fill(b, 
      total > MAX_NODES ? h("p", { class: "muted" }, "showing " + MAX_NODES + " of " + nf.format(total) + " nodes (most recently active)") : null,
      h("div", { class: "chart" }, svg),
      legend([["ph-launching", "launching"], ["ph-healthy", "healthy"], ["ph-unhealthy", "unhealthy"], ["ph-draining", "draining"], ["ph-terminating", "terminating"], ["sw-blk", "drain blocked"], ["sw-now", "now"]]),
      blocked.length ? h("div", { id: "blocked-drains" }, h("h3", null, "Blocked drains"), h("ul", null, blocked.map((n) => {
        const last = n.blocks[n.blocks.length - 1];
        return h("li", { "data-node": n.id }, mono(n.id), ": ", richText(last.msg), " (", timeEl(last.t, { sec: true }), n.blocks.length > 1 ? ", " + n.blocks.length + " times" : "", ")");
      }))) : null,
      h("details", null, h("summary", null, "Node phases as a table"), h("table", { class: "small" },
        h("thead", null, h("tr", null, ["node", "phase", "from", "to", "blocked by"].map((c) => h("th", { scope: "col" }, c)))), h("tbody", null, rows))));
  }

  // Step chart for {x, total, available} points; shared by capacity and
  // forecast. Only what was observed is drawn: the series start at the first
  // point; with o.unknownFrom, the stretch from there to the first point is
  // hatched "not observed" (never drawn as 0). The svg carries the points
  // drawn as data-points, [[x, total, available], ...] (x in o.xUnit).
  function stepChart(o) {
    const { x0, x1, w, hgt, bounds, label } = o;
    const pts = o.pts.filter((p) => !isNaN(p.x)).sort((a, c) => a.x - c.x);
    const left = 48, bottom = 18, top = 6;
    let ymax = 1, ymin = Infinity;
    for (const p of pts) for (const v of [p.total, p.available]) if (v != null) { ymax = Math.max(ymax, v); ymin = Math.min(ymin, v); }
    if (bounds) for (const v of [bounds.maxTotal, bounds.size, bounds.floor]) if (v != null) { ymax = Math.max(ymax, v); ymin = Math.min(ymin, v); }
    ymax += 1;
    ymin = ymin - 2 < 3 ? 0 : ymin - 2; // zoom in on the interesting band, but keep 0 for small pools
    const x = (v) => left + ((v - x0) / (x1 - x0 || 1)) * (w - left - 8);
    const y = (v) => top + (1 - (v - ymin) / (ymax - ymin)) * (hgt - top - bottom);
    const svg = svgRoot(w, hgt, label), g = s("g");
    setAttrs(svg, { "data-points": JSON.stringify(pts.map((p) => [p.x, p.total ?? null, p.available ?? null])), "data-x-unit": o.xUnit || null,
      "data-observed-from": pts.length ? pts[0].x : null });
    const ystep = niceStep(ymax - ymin, Math.max(2, Math.min(6, Math.floor((hgt - top - bottom) / 22))), [1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000]);
    for (let v = Math.ceil(ymin / ystep) * ystep; v <= ymax; v += ystep) {
      g.append(s("line", { class: "grid", x1: left, x2: w - 8, y1: y(v), y2: y(v) }),
        s("text", { class: "tick", "data-ytick": v, x: left - 4, y: y(v) + 4, "text-anchor": "end" }, String(v)));
    }
    g.append(s("line", { class: "axis", x1: left, x2: left, y1: top, y2: hgt - bottom }),
      s("text", { class: "tick axis-label", "data-axis": "y", transform: "rotate(-90)", x: -(top + (hgt - top - bottom) / 2), y: 10, "text-anchor": "middle" }, "nodes"));
    if (o.xAxis) o.xAxis(g, x, hgt - bottom);
    if (o.unknownFrom != null && pts.length && pts[0].x > o.unknownFrom) unknownBand(g, x(Math.max(o.unknownFrom, x0)), x(pts[0].x), top, hgt - bottom, o.unknownFrom, pts[0].x, o.unknownTip);
    if (bounds && bounds.floor != null && bounds.maxTotal != null) {
      g.append(s("rect", { class: "band", "data-band": "", x: left, width: w - 8 - left, y: y(bounds.maxTotal), height: Math.max(0, y(bounds.floor) - y(bounds.maxTotal)) },
        s("title", null, "allowed band: floor " + bounds.floor + " to max total " + bounds.maxTotal)));
    }
    if (bounds && bounds.size != null) g.append(s("line", { class: "size", "data-size": "", x1: left, x2: w - 8, y1: y(bounds.size), y2: y(bounds.size) }, s("title", null, "size " + bounds.size)));
    for (const key of ["total", "available"]) {
      let d = "", prev = null;
      for (const p of pts) {
        const v = p[key];
        if (v == null) continue;
        const px = x(p.x).toFixed(1), py = y(v).toFixed(1);
        d += prev === null ? `M${px} ${py}` : `H${px}V${py}`;
        prev = v;
      }
      if (d) { d += "H" + x(o.end ?? x1).toFixed(1); g.append(s("path", { class: "ln ln-" + key, "data-series": key, d })); }
    }
    if (o.now != null) nowLine(g, x(o.now), top, hgt - bottom);
    svg.append(g);
    return svg;
  }
  // Before the first observation: a hatched band, "not observed".
  function unknownBand(g, xa, xb, y0, y1, from, to, tip) {
    g.append(s("defs", null, s("pattern", { id: "pw-hatch", width: 6, height: 6, patternUnits: "userSpaceOnUse", patternTransform: "rotate(45)" },
      s("line", { class: "hatch", x1: 0, y1: 0, x2: 0, y2: 6 }))));
    g.append(s("rect", { class: "unknown", "data-unknown": "", "data-from": from, "data-to": to, x: xa.toFixed(1), y: y0, width: Math.max(0, xb - xa).toFixed(1), height: y1 - y0, fill: "url(#pw-hatch)" },
      s("title", null, tip || "not observed")));
    if (xb - xa > 80) g.append(s("text", { class: "tick unknown-t", x: ((xa + xb) / 2).toFixed(1), y: y0 + 14, "text-anchor": "middle" }, "not observed"));
  }
  const capLegend = (b, unknown) => legend([["sw-total", "total"], ["sw-available", "available"], b ? ["sw-band", "floor … max total"] : null, b ? ["sw-size", "size"] : null,
    unknown ? ["sw-unknown", "not observed"] : null].filter(Boolean));
  function renderCapacity(now) {
    const doc = S.doc, b = body("capacity"), tz = viewTz();
    const [t0, t1] = timeDomain(doc, now);
    const pts = [];
    for (const e of doc.events) { const t = ms(e.ts); if (e.counts && !isNaN(t)) pts.push({ x: t, total: e.counts.total, available: e.counts.available }); }
    pts.sort((a, c) => a.x - c.x);
    const bd = doc.bounds;
    const bline = bd ? h("p", { class: "muted" }, "size " + bd.size + ", surge " + bd.surge + ", unavailable " + bd.unavailable + " → floor " + bd.floor + ", max total " + bd.maxTotal) : null;
    if (!pts.length) { fill(b, bline, h("p", { class: "muted" }, "no node counts in the recent events")); return; }
    const first = pts[0].x, unknown = first > t0;
    const svg = stepChart({ pts, x0: t0, x1: t1, w: width(b), hgt: 170, bounds: bd, now, end: now, xUnit: "ms", unknownFrom: t0,
      unknownTip: "not observed: no node counts before " + fmtAt(first, tz, { sec: true }),
      label: "Capacity of pool " + S.route.name + ": total and available nodes over time" + (bd ? ", against floor " + bd.floor + " and max total " + bd.maxTotal : "") +
        (unknown ? ", not observed before " + fmtAt(first, tz, { sec: true }) : ""),
      xAxis: (g, x, y) => timeAxis(g, x, t0, t1, y, tz, width(b)) });
    fill(b, bline, h("div", { class: "chart" }, svg), capLegend(bd, unknown),
      h("p", { id: "capacity-observed", class: "muted" }, "counts observed from ", timeEl(first, { sec: true }), unknown ? "; before that, not observed (hatched)" : ""));
  }
  function policyText(wd) {
    if (wd.policy === "Allow") return "Allow: disruptions any time";
    if (wd.policy === "Block") return "Block: no disruptions" + (wd.open && wd.open.length ? "" : " in the next 7 days");
    return (wd.policy || "unknown policy") + (wd.timezone ? ", windows in the zone " + wd.timezone : "");
  }
  const tzNote = (wd) => (wd.timezone && tzOk(wd.timezone) !== wd.timezone ? " (unknown time zone " + wd.timezone + ": read as UTC)" : "");
  // A stretch of time: "Thu 3 Dec, 21:00 UTC – 05:00 UTC" (the second day
  // only when it differs), as text or as <time>s with the window's zone too.
  const endDay = (a, c, tz) => dayKey(a, tz) !== dayKey(c, tz);
  const rangeText = (a, c, tz) => fmtAt(a, tz, { day: true }) + " – " + fmtAt(c, tz, { day: endDay(a, c, tz) });
  const range = (a, c, wtz) => [timeEl(a, { day: true }), " – ", timeEl(c, { day: endDay(a, c, viewTz()) }), inZone(wtz, a, c)];
  function renderWindows(now) {
    const wd = S.doc.windows, b = body("windows");
    if (!wd) { fill(b, h("p", { class: "muted" }, "no disruption policy information")); return; }
    const tz = viewTz(), wtz = tzOk(wd.timezone) || "UTC";
    const from = ms(wd.from) || now, to = ms(wd.to) || from + 7 * 86400000;
    const w = width(b), left = 4, right = 8, hgt = 58, barY = 16, barH = 22;
    const x = (t) => left + ((Math.min(Math.max(t, from), to) - from) / (to - from)) * (w - left - right);
    const opens = (wd.open || []).map((o) => [ms(o.start), ms(o.end)]).filter(([a, c]) => c > from && a < to);
    const svg = svgRoot(w, hgt, "Disruption windows for the next 7 days: " + policyText(wd) + ", " + opens.length + " open window" + (opens.length === 1 ? "" : "s"));
    const g = s("g");
    g.append(s("rect", { class: "closed", x: left, y: barY, width: w - left - right, height: barH }));
    for (const [a, c] of opens) {
      g.append(s("rect", { class: "open", "data-window": "", x: x(a).toFixed(1), y: barY, width: Math.max(1.5, x(c) - x(a)).toFixed(1), height: barH },
        s("title", null, "open " + rangeText(a, c, tz) + (wtz !== tz ? "\n(window's zone " + wtz + ": " + rangeText(a, c, wtz) + ")" : ""))));
    }
    let prev = dayKey(from, tz), firstPx = null;
    for (let t = Math.ceil(from / 900000) * 900000; t <= to; t += 900000) {
      const k = dayKey(t, tz);
      if (k === prev) continue;
      prev = k;
      const px = x(t);
      if (firstPx === null) firstPx = px;
      g.append(s("line", { class: "day", x1: px, x2: px, y1: barY - 4, y2: barY + barH + 4 }));
      if (px < w - 60) g.append(s("text", { class: "tick", x: px + 3, y: barY + barH + 15 }, fmtDay(t, tz)));
    }
    if (firstPx === null || firstPx > left + 75) g.append(s("text", { class: "tick", x: left + 2, y: barY + barH + 15 }, fmtDay(from, tz)));
    const nx = x(ms(wd.now) || now), zone = zoneName(from, tz);
    g.append(s("text", { class: "tick tz", "data-zone": zone, x: w - right, y: 10, "text-anchor": "end" }, "days in " + zone));
    g.append(s("line", { class: "now", "data-now": "", x1: nx, x2: nx, y1: 2, y2: barY + barH + 4 }), s("text", { class: "tick now-t", x: nx + 3, y: 10, "text-anchor": nx > w - 40 ? "end" : "start" }, "now"));
    svg.append(g);
    const cur = opens.find(([a, c]) => a <= now && now < c);
    const next = opens.filter(([a]) => a > now).slice(0, 3);
    fill(b, h("p", { id: "policy" }, h("strong", null, policyText(wd)), tzNote(wd)),
      h("div", { class: "chart" }, svg),
      legend([["sw-open", "open for disruptions"], ["sw-closed", "closed"], ["sw-now", "now"]]),
      h("p", { id: "windows-next", class: "muted" }, wd.policy === "Allow" ? "" : cur ? ["open now, until ", timeEl(cur[1]), inZone(wtz, cur[1]), ". "] : "closed now. ",
        next.length ? ["Next: ", next.map(([a, c], i) => [i ? "; " : "", range(a, c, wtz)])] : wd.policy === "Allow" ? "" : "no further window in 7 days"));
  }
  // Forecast ticks: a round step giving 4 to 8 of them ("+0s", "+30s", "+1m", "+1m30s").
  const REL_STEPS = [1, 2, 3, 5, 10, 15, 20, 30, 60, 120, 180, 300, 600, 900, 1200, 1800, 3600, 7200, 10800, 21600, 43200, 86400];
  function relAxis(g, x, end, y, w) {
    const st = niceStep(end, 7, REL_STEPS);
    for (let t = 0; t <= end + 1e-9; t += st) {
      const px = x(t);
      g.append(s("line", { class: "grid", x1: px, x2: px, y1: 0, y2: y }),
        s("text", { class: "tick", "data-xtick": t, x: px, y: y + 13, "text-anchor": t === 0 ? "start" : px > w - 30 ? "end" : "middle" }, rel(t)));
    }
  }
  function renderForecast() {
    const f = S.doc.forecast, b = body("forecast"), bd = S.doc.bounds;
    if (!f) { fill(b, h("p", { class: "muted" }, "no rollout to forecast")); return; }
    if (f.unavailable) { fill(b, h("p", { class: "muted", id: "forecast-unavailable" }, f.unavailable)); return; }
    const dl = h("dl", { class: "kv" }), d = f.durationSeconds || {};
    kv(dl, "duration", h("span", { id: "forecast-duration" }, "p50 " + dur(d.p50 || 0) + ", p90 " + dur(d.p90 || 0) + (d.p10 != null ? " (p10 " + dur(d.p10) + ")" : "")));
    const sec = { sec: (d.p90 || 0) < 600 }; // a short roll's finish times differ by seconds
    if (f.finish) kv(dl, "finish", "p50 ", f.finish.p50 ? timeEl(f.finish.p50, sec) : "—", ", p90 ", f.finish.p90 ? timeEl(f.finish.p90, sec) : "—");
    if (f.heldUntil) kv(dl, "held until", timeEl(f.heldUntil), " by the disruption policy", inZone(tzOk(f.timezone), f.heldUntil));
    if (f.heldUntil && f.rollingSeconds) kv(dl, "once it starts", "p50 " + dur(f.rollingSeconds.p50) + ", p90 " + dur(f.rollingSeconds.p90));
    if (f.windowRisk > 0) kv(dl, "window risk", h("span", { id: "forecast-window-risk" }, Math.round(f.windowRisk * 100) + "% chance the window closes first",
      f.restWaitsUntil ? [" and the rest waits until ", timeEl(f.restWaitsUntil)] : null));
    const flo = bd && f.minAvailable != null && f.minAvailable < bd.floor, over = bd && f.maxTotal != null && f.maxTotal > bd.maxTotal;
    kv(dl, "min available", h("span", { class: flo ? "err" : "" }, String(f.minAvailable ?? "—"), bd ? " (floor " + bd.floor + ")" : ""));
    kv(dl, "max total", h("span", { class: over ? "err" : "" }, String(f.maxTotal ?? "—"), bd ? " (bound " + bd.maxTotal + ")" : ""));
    const nh = (v) => (typeof v === "number" ? v.toFixed(2) : "—");
    if (f.extraNodeHours) kv(dl, "extra node-hours", "p50 " + nh(f.extraNodeHours.p50) + ", p90 " + nh(f.extraNodeHours.p90));
    if (f.deadlineRisk != null) kv(dl, "deadline risk", (f.deadlineRisk * 100).toFixed(1) + " %");
    kv(dl, "model", (f.runs || "?") + " runs, seed " + (f.seed ?? "?") + ", latencies from " + (f.latencySource || "?"), f.start ? [", start ", timeEl(f.start)] : "");
    const warns = f.warnings && f.warnings.length ? h("ul", { class: "warnings" }, f.warnings.map((wn) => h("li", null, richText(wn)))) : null;
    const cap = (f.capacity || []).map((p) => ({ x: p.t, total: p.total, available: p.available }));
    let chart = null;
    if (cap.length) {
      const end = Math.max(cap[cap.length - 1].x, 1), w = Math.min(width(b), 700);
      const svg = stepChart({ pts: cap, x0: 0, x1: end, w, hgt: 150, bounds: bd, xUnit: "s",
        label: "Forecast capacity (p50 run): total and available nodes over " + dur(end) + " from the start",
        xAxis: (g, x, y) => relAxis(g, x, end, y, w) });
      svg.id = "forecast-chart";
      chart = h("div", { class: "chart" }, svg);
    }
    fill(b, dl, warns, chart, chart ? capLegend(bd) : null);
  }
  function renderEvents() {
    const b = body("events"), ev = S.doc.events;
    if (!ev.length) { fill(b, h("p", { class: "muted" }, "no recent events")); return; }
    const rows = [];
    for (let i = ev.length - 1; i >= 0 && rows.length < 100; i--) {
      const e = ev[i], c = e.counts;
      rows.push(h("tr", { "data-seq": e.seq },
        h("td", { class: "nowrap" }, timeEl(e.ts, { sec: true })),
        h("td", { class: "mono" }, e.event || ""), h("td", { class: "mono" }, e.node || ""), h("td", null, richText(e.message || "")),
        h("td", { class: "nowrap" }, c ? "total " + c.total + " · avail " + c.available + " · upd " + c.updated + "/" + c.desired +
          (typeof c.done === "number" ? " · done " + c.done + "/" + c.desired : "") : "")));
    }
    fill(b, h("p", { class: "muted" }, "newest first; " + rows.length + " of " + ev.length + " events in the window"),
      h("div", { class: "tablewrap" }, h("table", { id: "event-table", class: "small" },
        h("thead", null, h("tr", null, ["time", "event", "node", "message", "counts"].map((c) => h("th", { scope: "col" }, c)))), h("tbody", null, rows))));
  }

  // ---- the zone times are shown in ----------------------------------------------------------
  function initTzChoice() {
    const sel = $("tz-choice");
    if (!sel) return;
    let local = "";
    try { local = new Intl.DateTimeFormat().resolvedOptions().timeZone || ""; } catch (_) { /* unnamed */ }
    const opt = sel.querySelector('option[value="local"]');
    if (opt) opt.textContent = "local" + (local ? " (" + local + ")" : "");
    sel.value = tzChoice;
    sel.addEventListener("change", () => {
      tzChoice = sel.value === "local" ? "local" : "utc";
      try { localStorage.setItem(TZ_KEY, tzChoice); } catch (_) { /* not kept */ }
      document.documentElement.setAttribute("data-tz", tzChoice);
      rerender();
    });
    document.documentElement.setAttribute("data-tz", tzChoice);
  }
  // Everything that shows a time, drawn again (the zone changed).
  function rerender() {
    if (S.route.view === "overview" && S.status) {
      renderDaemon();
      if (!S.status.stub) { renderDaemonInfo(); renderConfig(); }
      renderTable();
      if (S.fleets) renderFleet();
      if (S.images) renderImages();
      if (S.previews) renderPreviews();
    } else if (S.route.view === "pool" && S.doc) {
      renderPoolHead(); renderCharts(); renderForecast(); renderEvents(); renderDaemon();
    }
  }

  // ---- wiring ---------------------------------------------------------------------------
  function init() {
    initTzChoice();
    $("filter").addEventListener("input", (e) => { S.filter = e.target.value; S.page = 0; if (S.status) renderTable(); });
    $("prev").addEventListener("click", () => { S.page--; renderTable(); });
    $("next").addEventListener("click", () => { S.page++; renderTable(); });
    $("skip").addEventListener("click", (e) => { e.preventDefault(); $("main").focus(); });
    window.addEventListener("hashchange", onRoute);
    let rt = 0;
    window.addEventListener("resize", () => { clearTimeout(rt); rt = setTimeout(() => { if (S.route.view === "pool" && S.doc) { renderCharts(); renderForecast(); } }, 200); });
    // Move the "now" lines; this redraws locally and never asks the server.
    setInterval(() => { if (S.route.view === "pool" && S.doc && !document.hidden) renderCharts(); }, 5000);
    // Previews change on every fetch, not with an event: look again now and then.
    setInterval(() => { if (S.route.view === "overview" && S.status && S.status.git && !document.hidden) loadPreviews(); }, 15000);
    onRoute();
  }
  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", init); else init();
})();
