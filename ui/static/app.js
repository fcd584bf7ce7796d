// The leasehold status page. It calls the node that served it through the
// Connect API's JSON form, with the token the user gave (kept in this tab's
// sessionStorage only), and polls: the cluster every second, jobs, queues
// and workers every two, events by long poll. Every value from the server
// is written as text, never as HTML.
"use strict";

const state = {
  token: sessionStorage.getItem("leasehold-token") || "",
  events: [],        // the last maxEvents events, oldest first
  afterSeq: null,    // the events' cursor
  selectedJob: null, // the job whose detail is open
};
const maxEvents = 1000;
const incidentTypes = new Set([
  "leader.changed", "leader.absence_rule", "worker.unreachable", "worker.reachable",
  "lease.expired", "job.lost", "job.failed", "job.dead", "quota.exceeded", "quota.cleared",
]);

class APIError extends Error {
  constructor(code, message) { super(message); this.code = code; }
}

async function call(service, method, body) {
  const headers = { "Content-Type": "application/json", "Connect-Protocol-Version": "1" };
  if (state.token) headers["Authorization"] = "Bearer " + state.token;
  const resp = await fetch(`/leasehold.v1.${service}/${method}`, {
    method: "POST", headers, body: JSON.stringify(body || {}),
  });
  const text = await resp.text();
  let data = {};
  try { data = text ? JSON.parse(text) : {}; } catch (e) { data = { code: "unknown", message: text }; }
  if (!resp.ok) {
    const err = new APIError(data.code || String(resp.status), data.message || resp.statusText);
    if (err.code === "unauthenticated") askToken(err.message);
    throw err;
  }
  return data;
}

function askToken(message) {
  const form = document.getElementById("auth");
  form.hidden = false;
  document.getElementById("auth-error").textContent = state.token ? message : "";
}

document.getElementById("auth").addEventListener("submit", (ev) => {
  ev.preventDefault();
  state.token = document.getElementById("token").value.trim();
  sessionStorage.setItem("leasehold-token", state.token);
  document.getElementById("auth").hidden = true;
  refreshAll();
});

// --- formatting ---

function enumName(v, prefix) {
  if (v === undefined || v === null) return "";
  return String(v).replace(prefix, "").toLowerCase();
}

function when(ts) {
  if (!ts) return "";
  const t = new Date(ts);
  const secs = Math.round((Date.now() - t.getTime()) / 1000);
  const iso = t.toISOString().replace(/\.\d+Z$/, "Z");
  return `${iso} (${age(secs)})`;
}

function age(secs) {
  const a = Math.abs(secs);
  let s;
  if (a < 90) s = `${a}s`;
  else if (a < 5400) s = `${Math.round(a / 60)}m`;
  else if (a < 129600) s = `${Math.round(a / 3600)}h`;
  else s = `${Math.round(a / 86400)}d`;
  return secs >= 0 ? `${s} ago` : `in ${s}`;
}

function bytes(n) {
  n = Number(n || 0);
  const units = ["B", "KiB", "MiB", "GiB", "TiB"];
  let i = 0;
  while (n >= 1024 && i < units.length - 1) { n /= 1024; i++; }
  return `${n.toFixed(i ? 1 : 0)} ${units[i]}`;
}

function setText(id, text) { document.getElementById(id).textContent = text; }

// rows fills a table's body, one row per item, every cell as text. onClick,
// when given, makes each row open something.
function rows(tableId, items, cells, onClick) {
  const body = document.querySelector(`#${tableId} tbody`);
  const frag = document.createDocumentFragment();
  for (const item of items) {
    const tr = document.createElement("tr");
    for (const c of cells(item)) {
      const td = document.createElement("td");
      td.textContent = c === undefined || c === null ? "" : String(c);
      tr.appendChild(td);
    }
    if (onClick) {
      tr.className = "clickable";
      tr.addEventListener("click", () => onClick(item));
    }
    frag.appendChild(tr);
  }
  body.replaceChildren(frag);
}

function showError(id, err) { setText(id, err ? `${err.code || "error"}: ${err.message}` : ""); }

// --- the cluster ---

async function refreshCluster() {
  try {
    const [st, mem] = await Promise.all([call("ClusterService", "Status"), call("ClusterService", "Members")]);
    showError("cluster-error", null);
    setText("node-line", `node ${st.id} · ${st.state}${st.leaderId ? " · leader " + st.leaderId : " · no leader"}`);
    setText("leader", st.leaderId ? `${st.leaderId} (${st.leaderApi || "?"})` : "none");
    setText("term", st.term || "0");
    setText("this-node", `${st.id} ${st.state}`);
    setText("health", st.ready ? "ready" : "not ready");
    setText("indexes", `${st.commitIndex || 0} / ${st.appliedIndex || 0}`);
    setText("counts", `${st.workers || 0} / ${st.liveLeases || 0}`);
    const quota = Number(st.stateQuotaBytes || 0);
    setText("state-bytes", bytes(st.stateBytes) + (quota ? ` of ${bytes(quota)}` : ""));
    const t = st.timings || {};
    setText("timings", `renew ${t.renew || "?"}, grace ${t.grace || "?"}, toleration ${t.toleration || "?"}`);
    document.getElementById("insecure").hidden = !st.insecure;
    if (state.afterSeq === null) state.afterSeq = Math.max(0, Number(st.lastEventSeq || 0) - maxEvents);
    rows("members", mem.members || [], (m) => [
      m.id, m.leader ? "leader" : (m.voter ? "voter" : "non-voter"), m.raftAddr, m.apiAddr, m.level || "", m.version || "",
    ]);
  } catch (err) {
    showError("cluster-error", err);
    setText("node-line", "unreachable");
  }
}

// --- queues ---

async function refreshQueues() {
  try {
    const res = await call("QueueService", "ListQueues", { pageSize: 200 });
    showError("queues-error", null);
    setText("queues-note", res.nextPageToken ? "showing the first 200 queues (leasehold queue list --after for the rest)" : "");
    rows("queue-table", res.queues || [], (q) => [
      q.name + (q.paused ? " (paused)" : "") + (q.maxRunning ? ` (max ${q.maxRunning} running)` : ""),
      q.ready || 0, q.scheduled || 0, q.running || 0, q.dead || 0,
      q.oldestReadySince ? when(q.oldestReadySince) : "", Number(q.grantRate || 0).toFixed(1),
    ]);
  } catch (err) {
    showError("queues-error", err);
  }
}

// --- jobs ---

function jobStateParam() {
  const v = document.getElementById("job-state").value;
  return v ? "JOB_STATE_" + v.toUpperCase() : undefined;
}

async function refreshJobs() {
  try {
    const req = { pageSize: 100 };
    const st = jobStateParam();
    if (st) req.state = st;
    const queue = document.getElementById("job-queue").value.trim();
    if (queue) req.queue = queue;
    const res = await call("JobService", "ListJobs", req);
    showError("jobs-error", null);
    setText("jobs-more", res.nextPageToken && res.nextPageToken !== "0" ? "showing the first 100; narrow the filter for the rest" : "");
    rows("job-table", res.jobs || [], (j) => {
      const last = (j.leases || [])[(j.leases || []).length - 1] || {};
      return [j.spec.id, j.spec.queue, j.spec.kind, enumName(j.state, "JOB_STATE_"), j.attempts || 0,
        last.token || "", last.workerId || "", enumName(last.outcome, "OUTCOME_"), when(j.updatedAt)];
    }, (j) => openJob(j.spec.id));
    if (state.selectedJob) openJob(state.selectedJob);
  } catch (err) {
    showError("jobs-error", err);
  }
}

async function openJob(id) {
  state.selectedJob = id;
  try {
    const res = await call("JobService", "GetJob", { id });
    const j = res.job;
    document.getElementById("job-detail").hidden = false;
    setText("job-detail-id", `${j.spec.id} · ${enumName(j.state, "JOB_STATE_")}`);
    const spec = Object.assign({}, j.spec);
    if (spec.payload) spec.payload = `(base64) ${spec.payload}`;
    setText("job-detail-spec", JSON.stringify(Object.assign(spec, {
      attempts: j.attempts || 0, losses: j.losses || 0, reason: j.reason, notBefore: j.notBefore,
      submittedAt: j.submittedAt, finishedAt: j.finishedAt,
      progress: j.progress ? `${j.progress} (heard ${when(j.progressAt)})` : undefined,
    }), null, 2));
    rows("job-leases", j.leases || [], (l) => [l.token, l.workerId, enumName(l.state, "LEASE_STATE_"),
      when(l.grantedAt), when(l.endedAt), enumName(l.outcome, "OUTCOME_"), l.ref, l.message]);
    rows("job-events", state.events.filter((e) => e.jobId === id).reverse(), (e) => [
      e.seq, when(e.time), e.type, e.token || "", e.workerId || "", e.detail || ""]);
  } catch (err) {
    if (err.code === "not_found" && state.selectedJob === id) {
      // Purged (or never there): close it rather than ask again every refresh.
      state.selectedJob = null;
      document.getElementById("job-detail").hidden = true;
    }
    showError("jobs-error", err);
  }
}

document.getElementById("job-filter").addEventListener("submit", (ev) => { ev.preventDefault(); refreshJobs(); });

// --- workers ---

async function refreshWorkers() {
  try {
    const res = await call("WorkerService", "ListWorkers");
    showError("workers-error", null);
    rows("worker-table", res.workers || [], (w) => [w.id, enumName(w.state, "WORKER_STATE_"),
      w.lastHeard ? when(w.lastHeard) : "", w.leaseCount || 0, w.capacity || 0, w.version || ""]);
  } catch (err) {
    showError("workers-error", err);
  }
}

// --- events, by long poll ---

function renderEvents() {
  const newest = state.events.slice(-200).reverse();
  rows("event-table", newest, (e) => [e.seq, when(e.time), e.type, e.jobId || "", e.token || "", e.workerId || "", e.detail || ""],
    (e) => { if (e.jobId) { location.hash = "#jobs"; openJob(e.jobId); } });
  rows("incident-table", state.events.filter((e) => incidentTypes.has(e.type)).slice(-200).reverse(),
    (e) => [e.seq, when(e.time), e.type, e.jobId || "", e.workerId || "", e.detail || ""]);
}

async function followEvents() {
  for (;;) {
    if (state.afterSeq === null) { await sleep(500); continue; }
    try {
      const res = await call("EventService", "ListEvents", { afterSeq: String(state.afterSeq), limit: 500, wait: "10s" });
      showError("events-error", null);
      const got = res.events || [];
      if (got.length) {
        state.events.push(...got);
        if (state.events.length > maxEvents) state.events.splice(0, state.events.length - maxEvents);
        state.afterSeq = Number(got[got.length - 1].seq);
        renderEvents();
      } else if (res.lastSeq && Number(res.lastSeq) < state.afterSeq) {
        state.afterSeq = Number(res.lastSeq); // a restore moved the log back
      }
    } catch (err) {
      showError("events-error", err);
      await sleep(1000);
    }
  }
}

function sleep(ms) { return new Promise((r) => setTimeout(r, ms)); }

// --- tabs and timers ---

function showTab() {
  const tab = (location.hash || "#cluster").slice(1);
  for (const s of document.querySelectorAll("main > section")) s.hidden = s.id !== tab;
  for (const a of document.querySelectorAll("nav a")) a.classList.toggle("active", a.dataset.tab === tab);
}
window.addEventListener("hashchange", showTab);

function refreshAll() {
  refreshCluster();
  refreshQueues();
  refreshJobs();
  refreshWorkers();
}

showTab();
refreshAll();
setInterval(refreshCluster, 1000);
setInterval(() => { refreshQueues(); refreshJobs(); refreshWorkers(); }, 2000);
setInterval(renderEvents, 5000); // ages move on
followEvents();
