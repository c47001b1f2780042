// Berth dashboard: live updates over server-sent events, charts by Chart.js when installed.
// Plain JavaScript, no build step; every page works without it, this only keeps it current.
"use strict";

const berth = {
  charts: {},

  fmtTime(ts) {
    if (!ts) return "";
    const d = new Date(Number(ts) * 1000);
    return d.toISOString().replace("T", " ").slice(0, 19) + "Z";
  },

  times(root) {
    for (const el of (root || document).querySelectorAll(".ts[data-ts]")) {
      el.textContent = berth.fmtTime(el.dataset.ts);
    }
  },

  debounce(fn, ms) {
    let timer = null;
    return () => { clearTimeout(timer); timer = setTimeout(fn, ms); };
  },

  async getJSON(url) {
    const r = await fetch(url, { credentials: "same-origin" });
    if (!r.ok) throw new Error(`${url}: ${r.status}`);
    return r.json();
  },

  async post(url, body) {
    const r = await fetch(url, {
      method: "POST",
      credentials: "same-origin",
      headers: { "Content-Type": "application/json", "X-Berth-Dashboard": "1" },
      body: JSON.stringify(body || {}),
    });
    const data = await r.json().catch(() => ({}));
    if (!r.ok) throw new Error((data.error && data.error.message) || `HTTP ${r.status}`);
    return data;
  },

  // The live stream: `decision` and `change` events to the page's handlers.
  connect(handlers) {
    const table = document.getElementById("stream");
    const after = table ? `?after=${encodeURIComponent(table.dataset.cursor)}` : "";
    const source = new EventSource(`/dashboard/api/stream${after}`);
    const dot = document.getElementById("live");
    source.onopen = () => dot && dot.classList.add("on");
    source.onerror = () => dot && dot.classList.remove("on");
    source.addEventListener("decision", (e) => handlers.decision && handlers.decision(JSON.parse(e.data)));
    source.addEventListener("change", (e) => handlers.change && handlers.change(JSON.parse(e.data)));
    window.addEventListener("pagehide", () => source.close());
    return source;
  },

  // ------------------------------------------------------------------ overview
  overview() {
    const table = document.getElementById("overview");
    const family = table.dataset.family;
    const refresh = berth.debounce(async () => {
      const data = await berth.getJSON(`/dashboard/api/overview${family ? `?family=${encodeURIComponent(family)}` : ""}`);
      const walk = (node) => {
        const k = `${node.kind}:${node.key}`;
        berth.setCell(`${k}|hosts`, String(node.hosts));
        for (const [flavor, n] of Object.entries(node.capacity)) {
          const cell = berth.setCell(`${k}|cap|${flavor}`, String(n));
          if (cell) cell.classList.toggle("zero", n === 0);
        }
        for (const what of ["vcpus", "pinned", "memory_mb"]) {
          const total = node.usage[what];
          const cell = document.querySelector(`[data-k="${CSS.escape(`${k}|${what}`)}"] .bar`);
          if (cell && total) {
            const p = (100 * node.usage[`${what}_used`]) / total;
            cell.style.setProperty("--p", `${p.toFixed(1)}%`);
            cell.textContent = `${p.toFixed(0)}%`;
          }
        }
        node.children.forEach(walk);
      };
      walk(data.tree);
    }, 400);
    berth.connect({ change: refresh });
  },

  setCell(key, text) {
    const cell = document.querySelector(`[data-k="${CSS.escape(key)}"]`);
    if (cell && cell.textContent.trim() !== text) {
      cell.textContent = text;
      cell.classList.remove("flash");
      void cell.offsetWidth;
      cell.classList.add("flash");
    }
    return cell;
  },

  // ------------------------------------------------------------------ placements
  placements() {
    const body = document.querySelector("#stream tbody");
    const counts = { success: 0, failure: 0 };
    for (const row of body.rows) counts[row.classList.contains("success") ? "success" : "failure"] += 1;
    const showCounts = () => {
      document.getElementById("counts").textContent = `${counts.success} placed, ${counts.failure} failed (shown)`;
    };
    showCounts();
    const statsEl = document.getElementById("stats-data");
    if (statsEl) berth.statsCharts(JSON.parse(statsEl.textContent));
    const refreshStats = berth.debounce(async () => {
      if (statsEl) berth.statsCharts(await berth.getJSON("/dashboard/api/stats?days=30"));
    }, 1000);
    berth.connect({
      decision(d) {
        const tr = document.createElement("tr");
        tr.className = `${d.outcome} new`;
        tr.dataset.id = d.id;
        const outcome = d.outcome === "success" ? d.outcome : `${d.outcome}: ${d.reason}`;
        const cells = [berth.fmtTime(d.ts), outcome, d.flavor, d.business_type || "", d.project,
          String(d.count), d.detail || "", d.latency_ms.toFixed(1)];
        cells.forEach((text, i) => {
          const td = document.createElement("td");
          if (i === 1) {
            const span = document.createElement("span");
            span.className = `st ${d.outcome === "success" ? "up" : "down"}`;
            span.textContent = text;
            td.appendChild(span);
          } else td.textContent = text;
          if (i === 5 || i === 7) td.className = "num";
          if (i === 6) {
            td.className = "detail";
            if (d.why) td.appendChild(berth.whyDetails(d));
          }
          tr.appendChild(td);
        });
        body.insertBefore(tr, body.firstChild);
        while (body.rows.length > 500) body.deleteRow(body.rows.length - 1);
        counts[d.outcome === "success" ? "success" : "failure"] += 1;
        showCounts();
        refreshStats();
      },
    });
  },

  // A decision's compact why (`placing.why_record`), as the `why_details` macro renders it.
  whyDetails(d) {
    const w = d.why;
    const el = (tag, text, cls) => {
      const e = document.createElement(tag);
      if (text !== undefined && text !== null) e.textContent = text;
      if (cls) e.className = cls;
      return e;
    };
    const num = (x) => (x === null || x === undefined ? "" : String(Number(Number(x).toPrecision(6))));
    const details = el("details", null, "why");
    details.dataset.testid = "why";
    details.appendChild(el("summary", `why: ${d.why_line || ""}`));
    for (const inst of w.instances) {
      details.appendChild(el("p", inst.summary, "small why-summary"));
      const table = el("table", null, "why-table");
      const head = el("tr");
      [["rank", "num"], ["host"], ["weigher"], ["raw", "num"], ["norm", "num"], ["× mult", "num"], ["= part", "num"]]
        .forEach(([text, cls]) => head.appendChild(el("th", text, cls)));
      table.appendChild(el("thead")).appendChild(head);
      const body = table.appendChild(el("tbody"));
      inst.ranked.forEach((c, r) => {
        const rows = w.weighers.map((name, i) => [name, num(c.raw[i]), num(c.norm[i]), num(w.multipliers[i]), num(c.part[i]), inst.constant[i] ? "const" : ""]);
        rows.push(["score", "", "", "", num(c.score), "score"]);
        rows.forEach(([name, raw, norm, mult, part, cls], i) => {
          const tr = el("tr", null, `${cls}${i === 0 ? " first" : ""}`);
          [[i === 0 ? String(r + 1) : "", "num"], [i === 0 ? c.host : ""], [name], [raw, "num"], [norm, "num"], [mult, "num"], [part, "num"]]
            .forEach(([text, tdc]) => tr.appendChild(el("td", text, tdc)));
          body.appendChild(tr);
        });
      });
      details.appendChild(table);
    }
    if (w.instances_total > w.instances.length) {
      details.appendChild(el("p", `the first ${w.instances.length} of ${w.instances_total} instances are kept`, "small"));
    }
    return details;
  },

  statsCharts(days) {
    const labels = days.map((d) => d.day);
    const rate = days.map((d) => (d.success_rate === null ? null : +(100 * d.success_rate).toFixed(2)));
    const reasons = {};
    for (const d of days) for (const [r, n] of Object.entries(d.failures)) reasons[r] = (reasons[r] || 0) + n;
    berth.chart("rate-chart", "rate-table", "line", labels,
      [{ label: "success rate %", data: rate, borderColor: "#1e8e4f", tension: 0.2 }],
      days.map((d) => [d.day, `${d.successes}/${d.requests}`]));
    berth.chart("reason-chart", "reason-table", "bar", Object.keys(reasons),
      [{ label: "failures (30 days)", data: Object.values(reasons), backgroundColor: "#c7372f" }],
      Object.entries(reasons));
  },

  // A Chart.js chart, or a plain table of `rows` when Chart.js is not installed.
  chart(canvasId, fallbackId, type, labels, datasets, rows) {
    const canvas = document.getElementById(canvasId);
    if (!canvas) return;
    if (window.Chart) {
      const old = berth.charts[canvasId];
      if (old) {
        old.data.labels = labels;
        old.data.datasets.forEach((ds, i) => { ds.data = datasets[i].data; });
        old.update();
        return;
      }
      berth.charts[canvasId] = new window.Chart(canvas, {
        type, data: { labels, datasets },
        options: { animation: false, responsive: true, maintainAspectRatio: false,
          scales: type === "line" ? { y: { min: 0, max: 100 } } : { y: { beginAtZero: true, ticks: { precision: 0 } } },
          plugins: { legend: { display: datasets.length > 1 || type === "line" } } },
      });
      return;
    }
    canvas.hidden = true;
    const box = document.getElementById(fallbackId);
    box.textContent = "";
    const t = document.createElement("table");
    for (const r of rows) {
      const tr = t.insertRow();
      for (const v of r) tr.insertCell().textContent = String(v);
    }
    box.appendChild(t);
  },

  // ------------------------------------------------------------------ defrag
  defrag() {
    const auto = document.getElementById("auto-confirm");
    document.addEventListener("click", async (e) => {
      const button = e.target.closest("button[data-action]");
      if (!button) return;
      const plan = button.closest("[data-plan]").dataset.plan;
      const action = button.dataset.action;
      const q = action === "execute" && auto && auto.checked ? "?auto_confirm=true" : "";
      button.disabled = true;
      try {
        berth.showPlan(await berth.post(`/dashboard/api/defrag/${plan}/${action}${q}`));
      } catch (err) {
        berth.flashError(err.message);
      } finally {
        button.disabled = false;
      }
    });
    const form = document.getElementById("new-plan");
    if (form) {
      form.addEventListener("submit", async (e) => {
        e.preventDefault();
        const f = new FormData(form);
        try {
          const plan = await berth.post("/dashboard/api/defrag", {
            cluster: f.get("cluster"), objective: f.get("objective"),
            flavors: f.get("flavor") ? [f.get("flavor")] : [],
            max_migrations: Number(f.get("max_migrations")),
          });
          window.location.assign(`/dashboard/defrag/${plan.id}`);
        } catch (err) {
          berth.flashError(err.message);
        }
      });
    }
    const refresh = berth.debounce(async () => {
      for (const el of document.querySelectorAll("[data-testid^='state-']")) {
        const id = el.dataset.testid.slice("state-".length);
        if (["planned", "running", "paused"].includes(el.textContent.trim()) || document.body.dataset.plan === id) {
          berth.showPlan(await berth.getJSON(`/dashboard/api/defrag/${id}`));
        }
      }
    }, 300);
    berth.connect({ change: refresh });
  },

  flashError(message) {
    const el = document.getElementById("plan-error") || document.getElementById("action-error");
    if (el) el.textContent = message;
  },

  showPlan(plan) {
    for (const el of document.querySelectorAll(`[data-testid="state-${plan.id}"]`)) {
      el.textContent = plan.state;
      el.className = `st plan-${plan.state}`;
    }
    const done = (plan.steps_by_state || {}).done || 0;
    for (const el of document.querySelectorAll(`[data-testid="progress-${plan.id}"]`)) {
      el.textContent = `${done}/${plan.migrations} steps done`;
      const bar = el.previousElementSibling && el.previousElementSibling.firstElementChild;
      if (bar) bar.style.width = `${plan.migrations ? (100 * done) / plan.migrations : 100}%`;
    }
    const chips = document.querySelector("[data-testid='steps-by-state']");
    if (chips) chips.textContent = Object.entries(plan.steps_by_state).map(([k, v]) => `${v} ${k}`).join(" · ");
    for (const box of document.querySelectorAll(`.actions[data-plan="${plan.id}"]`)) {
      const allowed = { planned: ["execute", "cancel"], running: ["pause", "cancel"], paused: ["resume", "cancel"] }[plan.state] || [];
      box.textContent = "";
      for (const action of allowed) {
        const b = document.createElement("button");
        b.dataset.action = action;
        b.textContent = { execute: "start", pause: "pause", resume: "resume", cancel: "cancel" }[action];
        if (action === "cancel") b.className = "danger";
        box.appendChild(b);
      }
    }
    if (plan.steps) {
      const rows = document.querySelectorAll("[data-testid='steps'] tbody tr");
      plan.steps.forEach((s, i) => {
        const cell = rows[i] && rows[i].querySelector(".st");
        if (cell) { cell.textContent = s.state; cell.className = `st step-${s.state}`; }
      });
    }
  },

  // ------------------------------------------------------------------ elastic
  elastic() {
    const el = document.getElementById("hours-data");
    if (!el) return;
    const hours = JSON.parse(el.textContent);
    const days = Object.keys(hours).sort();
    const groups = [...new Set(days.flatMap((d) => Object.keys(hours[d])))].sort();
    const palette = ["#2458d6", "#1e8e4f", "#c98a08", "#c7372f", "#7a3ed6", "#0f8fa0"];
    berth.chart("hours-chart", "hours-table", "bar", days,
      groups.map((g, i) => ({ label: g, data: days.map((d) => +(hours[d][g] || 0).toFixed(2)), backgroundColor: palette[i % palette.length] })),
      days.flatMap((d) => Object.entries(hours[d]).map(([g, h]) => [d, g, h.toFixed(2)])));
  },
};

document.addEventListener("DOMContentLoaded", () => {
  berth.times();
  const pageName = document.body.dataset.page;
  const hasStream = !!document.getElementById("stream");
  if (pageName === "overview" && document.getElementById("overview")) berth.overview();
  else if (pageName === "placements" && hasStream) berth.placements();
  else if (pageName === "defrag") berth.defrag();
  else if (pageName === "elastic") berth.elastic();
});
window.berth = berth;
