// jobgate console: small vanilla JS over the public /v1 API (same origin, sign-in cookie).
// Every write sends the page's CSRF token; the API applies the same rules as for a key.
"use strict";

/** "single-node ×3" for a cluster session, "—" for one container. */
function clusterText(s) {
  return s.cluster_size > 1 ? `${s.cluster_mode || "cluster"} \u00d7${s.cluster_size}` : "—";
}

const CSRF = document.querySelector('meta[name="csrf-token"]')?.content || "";
const PAGE = document.body.dataset.page;
const ADMIN = document.body.dataset.admin === "true";
const USER = document.body.dataset.user || "";
const ENDED = new Set(["SUCCEEDED", "FAILED", "TERMINATED", "CANCELLED", "ERROR"]);

class Problem extends Error {
  constructor(status, body) {
    super(body.detail || body.title || `HTTP ${status}`);
    this.status = status;
    this.body = body;
  }
}

async function api(method, path, body, headers = {}) {
  const init = { method, credentials: "same-origin", headers: { Accept: "application/json", ...headers } };
  if (method !== "GET") init.headers["X-CSRF-Token"] = CSRF;
  if (body !== undefined) {
    init.headers["Content-Type"] = "application/json";
    init.body = JSON.stringify(body);
  }
  const response = await fetch(path, init);
  if (response.status === 401) { window.location.assign("/sign-in"); throw new Problem(401, {}); }
  const text = await response.text();
  const data = text ? JSON.parse(text) : null;
  if (!response.ok) throw new Problem(response.status, data || {});
  return data;
}

function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (v === undefined || v === null || v === false) continue;
    if (k === "class") node.className = v;
    else if (k === "width") node.style.width = v; // CSSOM: allowed by the page's CSP
    else if (k.startsWith("on")) node.addEventListener(k.slice(2), v);
    else node.setAttribute(k, v === true ? "" : v);
  }
  for (const c of children.flat()) {
    if (c === null || c === undefined) continue;
    node.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return node;
}

// Re-render *container* with *render* and give focus back to the same control of the
// same row (keyboard users must not lose their place when a live list refreshes).
function keepFocus(container, render) {
  const active = document.activeElement;
  const owner = active && container.contains(active) ? active.closest("[data-key]") : null;
  const controls = owner ? [...owner.querySelectorAll("a, button, input, select")] : [];
  const index = controls.indexOf(active);
  const key = owner?.dataset.key;
  render();
  if (key === undefined || index < 0) return;
  const again = container.querySelector(`[data-key="${CSS.escape(key)}"]`);
  again?.querySelectorAll("a, button, input, select")[index]?.focus();
}

function age(iso) {
  const s = Math.max(0, (Date.now() - Date.parse(iso)) / 1000);
  if (s < 60) return `${Math.floor(s)}s`;
  if (s < 3600) return `${Math.floor(s / 60)}m`;
  if (s < 86400) return `${Math.floor(s / 3600)}h ${Math.floor((s % 3600) / 60)}m`;
  return `${Math.floor(s / 86400)}d`;
}

function duration(session) {
  if (!session.started_at) return age(session.created_at);
  const end = session.ended_at ? Date.parse(session.ended_at) : Date.now();
  const s = Math.max(0, (end - Date.parse(session.started_at)) / 1000);
  return `${age(session.created_at)} (ran ${s < 60 ? Math.floor(s) + "s" : Math.floor(s / 60) + "m"})`;
}

function statusBadge(status) {
  return el("span", { class: `status s-${status}` }, status);
}

function amount(slot, value) {
  if (slot !== "mem" || !/^\d+$/.test(String(value))) return String(value);
  const units = ["B", "KiB", "MiB", "GiB", "TiB"]; let n = Number(value); let u = 0;
  while (n >= 1024 && u < units.length - 1) { n /= 1024; u++; }
  return `${+n.toFixed(1)} ${units[u]}`;
}

// "cuda.shares 0.5 on mock-cuda-0" per allocated device, per container
function allocations(session) {
  const lines = [];
  for (const k of session.kernels) {
    const devices = new Set();
    for (const [slot, perDevice] of Object.entries(k.devices || {})) {
      for (const [device, share] of Object.entries(perDevice)) {
        lines.push(`${slot} ${share} on ${device}`);
        devices.add(slot);
      }
    }
    for (const [slot, value] of Object.entries(k.slots || {})) {
      if (!devices.has(slot)) lines.push(`${slot} ${amount(slot, value)}`);
    }
    if (session.kernels.length > 1) lines.push(`  (container ${k.index})`);
  }
  if (!lines.length) {
    for (const [slot, value] of Object.entries(session.resources)) lines.push(`${slot} ${amount(slot, value)}`);
  }
  return lines;
}

// shell-like words: spaces split, '…' and "…" group, \ escapes
function words(text) {
  const out = []; let cur = ""; let quote = null; let has = false;
  for (let i = 0; i < text.length; i++) {
    const c = text[i];
    if (quote) {
      if (c === quote) quote = null;
      else if (c === "\\" && quote === '"' && i + 1 < text.length) cur += text[++i];
      else cur += c;
    } else if (c === "'" || c === '"') { quote = c; has = true; }
    else if (c === "\\" && i + 1 < text.length) { cur += text[++i]; has = true; }
    else if (/\s/.test(c)) { if (has || cur) out.push(cur); cur = ""; has = false; }
    else cur += c;
  }
  if (quote) throw new Error("an unclosed quote");
  if (has || cur) out.push(cur);
  return out;
}

// words back to one line a shell would split the same way
function shellJoin(argv) {
  return (argv || []).map((w) => (/[\s"'$;]/.test(w) ? `'${w.replaceAll("'", "'\\''")}'` : w)).join(" ");
}

// ---- sessions list ------------------------------------------------------------------
function sessionsPage() {
  const tbody = document.querySelector("#sessions tbody");
  const note = document.getElementById("list-status");
  const selected = new Set();
  const terminate = document.getElementById("terminate-selected");
  const selectAll = document.getElementById("select-all");
  const f = {
    status: document.getElementById("f-status"), type: document.getElementById("f-type"),
    scope: document.getElementById("f-scope"), project: document.getElementById("f-project"),
  };
  let shown = [];

  function query() {
    const q = new URLSearchParams({ limit: "200" });
    const st = f.status.value;
    if (st === "live") ["PENDING", "SCHEDULED", "PREPARING", "RUNNING", "TERMINATING", "PREEMPTED"].forEach((s) => q.append("status", s));
    else if (st) q.append("status", st);
    if (f.type.value) q.append("type", f.type.value);
    if (f.scope.value === "all") q.set("all", "true");
    return q;
  }

  function render(items) {
    const project = f.project.value.trim();
    shown = project ? items.filter((s) => s.project === project) : items;
    const rows = shown.map((s) => {
      const box = el("input", { type: "checkbox", "aria-label": `Select ${s.name || s.id.slice(0, 8)}` });
      box.checked = selected.has(s.id);
      box.disabled = ENDED.has(s.status);
      box.addEventListener("change", () => { box.checked ? selected.add(s.id) : selected.delete(s.id); sync(); });
      // why it waits, why it is being preempted (by whom), or why it ended
      const reason = s.status === "PENDING" ? s.pending_reason || s.status_reason : (ENDED.has(s.status) || s.status === "PREEMPTED" ? s.status_reason : "");
      return el("tr", { "data-id": s.id, "data-key": s.id, "data-name": s.name || "", "data-status": s.status },
        el("td", {}, box),
        el("td", {}, el("a", { href: `/sessions/${s.id}` }, s.name || s.id.slice(0, 8)),
          f.scope.value === "all" ? el("small", { class: "owner" }, ` ${s.owner}`) : null),
        el("td", {}, s.type, s.cluster_size > 1 ? el("div", { class: "cluster" }, clusterText(s)) : null),
        el("td", { class: "status-cell" }, statusBadge(s.status),
          reason ? el("div", { class: "reason" }, reason) : null),
        el("td", { class: "alloc" }, allocations(s).map((line) => el("div", {}, line))),
        el("td", {}, s.node || "—"),
        el("td", {}, duration(s)));
    });
    keepFocus(tbody, () => tbody.replaceChildren(...rows));
    if (!rows.length) tbody.append(el("tr", {}, el("td", { colspan: "7", class: "empty" }, "No sessions. Launch one.")));
    sync();
  }

  function sync() {
    for (const id of [...selected]) if (!shown.some((s) => s.id === id && !ENDED.has(s.status))) selected.delete(id);
    terminate.disabled = selected.size === 0;
    terminate.textContent = selected.size ? `Terminate selected (${selected.size})` : "Terminate selected";
  }

  let timer = null;
  async function refresh() {
    clearTimeout(timer);
    try {
      const page = await api("GET", `/v1/sessions?${query()}`);
      render(page.items);
      note.textContent = "";
    } catch (e) {
      if (e.status !== 401) note.textContent = `Could not refresh: ${e.message}`;
    }
    timer = setTimeout(refresh, 1500);
  }

  selectAll.addEventListener("change", () => {
    for (const s of shown) if (!ENDED.has(s.status)) (selectAll.checked ? selected.add(s.id) : selected.delete(s.id));
    render(shown);
  });
  terminate.addEventListener("click", async () => {
    const ids = [...selected];
    if (!ids.length || !window.confirm(`Terminate ${ids.length} session(s)?`)) return;
    const failed = [];
    for (const id of ids) {
      try { await api("DELETE", `/v1/sessions/${id}`); } catch (e) { failed.push(e.message); }
      selected.delete(id);
    }
    note.textContent = failed.length ? `Not terminated: ${failed.join("; ")}` : `Terminating ${ids.length} session(s).`;
    refresh();
  });
  for (const input of Object.values(f)) input.addEventListener("change", refresh);
  f.project.addEventListener("input", () => render(shown));
  launchDialog(refresh);
  refresh();
}

// ---- launch dialog ------------------------------------------------------------------
function launchDialog(onLaunched) {
  const dialog = document.getElementById("launch");
  const form = document.getElementById("launch-form");
  const image = form.elements.image; const version = form.elements.version;
  const slot = form.elements.accel_slot; const amount = form.elements.accel;
  const fit = document.getElementById("accel-fit");
  const folderBox = document.getElementById("l-folders");
  let images = {}; let nodes = [];

  function groupImages(list) {
    const byName = {};
    for (const item of list) {
      if ((item.state || "ready") !== "ready") continue; // a commit under way or failed
      const at = item.name.lastIndexOf(":");
      const slash = item.name.lastIndexOf("/");
      const [name, tag] = at > slash ? [item.name.slice(0, at), item.name.slice(at + 1)] : [item.name, "latest"];
      (byName[name] ||= []).push(tag);
    }
    return byName;
  }

  function fillVersions() {
    const tags = images[image.value] || [];
    version.replaceChildren(...tags.map((t) => el("option", { value: t }, t)));
    version.disabled = !tags.length;
  }

  function groupNodes() { return nodes.filter((n) => n.resource_group === form.elements.resource_group.value); }

  function showFit() {
    const name = slot.value;
    if (!name) { fit.textContent = ""; amount.disabled = true; return; }
    amount.disabled = false;
    const live = groupNodes().filter((n) => n.status === "ready" && n.admin_state === "ready");
    const quantum = live.map((n) => n.slot_types?.[name]?.quantum).find(Boolean) || "1";
    const unit = live.map((n) => n.slot_types?.[name]?.unit).find(Boolean) || "";
    amount.step = quantum; amount.min = "0";
    document.getElementById("accel-unit").textContent = `(${name}, steps of ${quantum}${unit ? " " + unit : ""})`;
    let total = 0; let largest = 0;
    for (const n of live) {
      total += Number(n.free[name] || 0);
      for (const d of n.devices) {
        if (d.slot !== name || d.health !== "healthy") continue;
        largest = Math.max(largest, Number(d.capacity) - Number(n.device_used?.[d.id] || 0));
      }
    }
    fit.textContent = `Fits now: up to ${+largest.toFixed(3)} on one device; ${+total.toFixed(3)} free in this group.`;
  }

  // data folders by name: a box each (and read-only); dot-folders mount by themselves
  function fillFolders(list) {
    const picked = new Map([...folderBox.querySelectorAll("[data-folder]")].map((d) =>
      [d.dataset.ref, [d.querySelector("[name=folder]").checked, d.querySelector("[name=folder_ro]").checked]]));
    const usable = list.filter((f) => !f.automount && !f.trashed_at);
    if (!usable.length) return;
    const named = {};
    for (const f of usable) named[f.name] = (named[f.name] || 0) + 1;
    folderBox.replaceChildren(...usable.map((f) => {
      // by name; by id only when two listed folders share it (an admin sees everyone's)
      const ref = named[f.name] > 1 ? f.id : f.name;
      const [on, ro] = picked.get(ref) || [false, false];
      const readOnly = f.permission === "ro";
      return el("div", { class: "folder-pick", "data-folder": f.name, "data-ref": ref },
        el("label", {}, el("input", { type: "checkbox", name: "folder", value: f.name, checked: on }), ` ${f.name}`),
        el("small", {}, `${f.usage}${f.owner !== `user ${USER}` ? ", " + f.owner : ""}`),
        el("label", {}, el("input", { type: "checkbox", name: "folder_ro", checked: ro || readOnly, disabled: readOnly,
          "aria-label": `${f.name} read-only` }), " read-only"));
    }));
  }

  async function load() {
    const [imageList, nodeList, groups, folders] = await Promise.all([
      api("GET", "/v1/images"), api("GET", "/v1/nodes"), api("GET", "/v1/resource-groups").catch(() => []),
      api("GET", "/v1/folders").catch(() => ({ items: [] })),
    ]);
    fillFolders(folders.items);
    images = groupImages(imageList);
    image.replaceChildren(el("option", { value: "" }, "runtime default"),
      ...Object.keys(images).sort().map((n) => el("option", { value: n }, n)));
    fillVersions();
    nodes = nodeList.items;
    const names = new Set(groups.map((g) => g.name).concat(nodes.map((n) => n.resource_group)));
    const group = form.elements.resource_group;
    const was = group.value || "default";
    group.replaceChildren(...[...names].sort().map((g) => el("option", { value: g }, g)));
    if (names.has(was)) group.value = was;
    const slots = new Set();
    for (const n of nodes) for (const s of Object.keys(n.slot_types || {})) slots.add(s);
    const chosen = slot.value;
    slot.replaceChildren(el("option", { value: "" }, "none"), ...[...slots].sort().map((s) => el("option", { value: s }, s)));
    if (slots.has(chosen)) slot.value = chosen;
    else if (slots.size) slot.value = [...slots].sort()[0];
    showFit();
  }

  function clearErrors() {
    for (const p of form.querySelectorAll(".error")) p.textContent = "";
    for (const i of form.querySelectorAll("[aria-invalid]")) i.removeAttribute("aria-invalid");
  }

  function fieldError(field, message) {
    let key = field;
    if (slot.value && field === `resources.${slot.value}`) key = "accelerator";
    let box = null;
    for (let k = key; k && !box; k = k.includes(".") ? k.slice(0, k.lastIndexOf(".")) : "") {
      box = form.querySelector(`[data-field="${CSS.escape(k)}"]`);
    }
    const holder = box || form;
    const p = box ? box.querySelector(".error") : document.getElementById("err-form");
    p.textContent = box ? message : `${field}: ${message}`;
    holder.querySelectorAll("input, select, textarea").forEach((i) => i.setAttribute("aria-invalid", "true"));
    (box?.querySelector("input, select, textarea") || p).focus?.();
  }

  function request() {
    const v = form.elements; const body = { type: v.type.value };
    if (v.name.value.trim()) body.name = v.name.value.trim();
    const ref = v.image_ref.value.trim();
    if (ref) body.image = ref;
    else if (image.value) body.image = `${image.value}:${version.value || "latest"}`;
    try { const cmd = words(v.command.value.trim()); if (cmd.length) body.command = cmd; }
    catch (e) { throw { field: "command", message: e.message }; }
    const env = {};
    for (const line of v.env.value.split("\n").map((l) => l.trim()).filter(Boolean)) {
      const eq = line.indexOf("=");
      if (eq < 1) throw { field: "env", message: `not NAME=value: ${line}` };
      env[line.slice(0, eq)] = line.slice(eq + 1);
    }
    if (Object.keys(env).length) body.env = env;
    if (v.workdir.value.trim()) body.workdir = v.workdir.value.trim();
    const resources = {};
    if (v.cpu.value) resources.cpu = v.cpu.value;
    if (v.mem.value.trim()) resources.mem = v.mem.value.trim();
    if (slot.value && Number(amount.value) > 0) resources[slot.value] = amount.value;
    if (Object.keys(resources).length) body.resources = resources;
    body.resource_group = v.resource_group.value || "default";
    body.cluster_size = Number(v.cluster_size.value || 1);
    if (body.cluster_size > 1) body.cluster_mode = v.cluster_mode.value || "single-node";
    const folders = [...folderBox.querySelectorAll("[data-folder]")]
      .filter((d) => d.querySelector("[name=folder]").checked)
      .map((d) => ({ name: d.dataset.ref, read_only: d.querySelector("[name=folder_ro]").checked }));
    if (folders.length) body.folders = folders;
    // left empty: the gateway's default (50, or the policy's max_priority when lower)
    if (v.priority.value !== "") body.priority = Number(v.priority.value);
    if (v.starts_at.value.trim()) body.starts_at = v.starts_at.value.trim();
    const count = Number(v.count.value || 1);
    if (!Number.isInteger(count) || count < 1) throw { field: "count", message: "a whole number, 1 or more" };
    return [body, count];
  }

  document.getElementById("open-launch").addEventListener("click", () => {
    clearErrors();
    dialog.showModal();
    load().catch((e) => fieldError("form", e.message));
  });
  document.getElementById("launch-cancel").addEventListener("click", () => dialog.close());
  image.addEventListener("change", fillVersions);
  slot.addEventListener("change", showFit);
  form.elements.resource_group.addEventListener("change", showFit);

  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    clearErrors();
    let body; let count;
    try { [body, count] = request(); } catch (e) { fieldError(e.field || "form", e.message); return; }
    const submit = document.getElementById("launch-submit");
    submit.disabled = true;
    const batch = `${Date.now().toString(36)}-${Math.random().toString(36).slice(2)}`;
    try {
      // several: one array request (all or none; each gets JOBGATE_ARRAY_INDEX)
      const one = count > 1 ? { ...body, count } : body;
      try {
        await api("POST", "/v1/sessions", one, { "Idempotency-Key": `console-${batch}` });
      } catch (e) {
        if (!(e instanceof Problem)) throw e;
        const errors = e.body.errors || [{ field: e.body.field || "form", message: e.body.detail || e.message }];
        for (const err of errors) fieldError(err.field || "form", err.message);
        return;
      }
      dialog.close();
      onLaunched();
    } finally {
      submit.disabled = false;
    }
  });
}

// ---- one session ----------------------------------------------------------------------
function sessionPage() {
  const id = document.getElementById("session").dataset.id;
  const logs = document.getElementById("s-logs");
  const follow = document.getElementById("s-follow");
  let source = null; let current = null;

  function facts(s) {
    const rows = [
      ["Type", s.type], ["Owner", s.owner], ["Project", s.project || "—"], ["Image", s.image || "runtime default"],
      ["Command", shellJoin(s.command) || "—"], ["Resources", allocations(s).join(", ") || "—"],
      ["Resource group", s.resource_group], ["Priority", s.priority], ["Cluster", clusterText(s)],
      ...(s.cluster_size > 1 ? [["Containers", s.kernels.map((k) => `${k.hostname}: ${k.status} on ${k.node || "—"}`).join(", ")]] : []),
      ["Node", s.node || "—"], ["Created", new Date(s.created_at).toLocaleString()],
      ["Started", s.started_at ? new Date(s.started_at).toLocaleString() : "—"],
      ["Ended", s.ended_at ? new Date(s.ended_at).toLocaleString() : "—"],
      ["Exit code", s.exit_code ?? "—"], ["Id", s.id],
    ];
    if (s.idle_deadline) rows.push(["Idle until", new Date(s.idle_deadline).toLocaleString()]);
    return rows.flatMap(([k, v]) => [el("dt", {}, k), el("dd", {}, String(v))]);
  }

  async function apps(s) {
    const holder = document.getElementById("s-apps");
    if (!s.apps.length) { holder.replaceChildren(); return; }
    const list = await api("GET", `/v1/sessions/${id}/apps`);
    holder.replaceChildren(...list.map((a) => el("button", {
      type: "button", class: "app", "data-app": a.name, disabled: !a.ready,
      title: a.ready ? `Open ${a.name} in a new tab` : `${a.name} opens once the session runs`,
      onclick: async () => {
        const win = window.open("", "_blank");
        try {
          const link = await api("POST", `/v1/sessions/${id}/apps/${encodeURIComponent(a.name)}`);
          if (win) { win.opener = null; win.location.href = link.url; } else window.location.assign(link.url);
        } catch (e) { if (win) win.close(); document.getElementById("s-reason").textContent = e.message; }
      },
    }, `Open ${a.name}`)));
  }

  async function refresh() {
    let s;
    try { s = await api("GET", `/v1/sessions/${id}`); } catch (e) { return; }
    const changed = !current || current.status !== s.status;
    current = s;
    document.getElementById("s-title").textContent = s.name || s.id.slice(0, 8);
    document.getElementById("s-status").replaceChildren(statusBadge(s.status));
    document.getElementById("s-reason").textContent = s.status === "PENDING" ? s.pending_reason || s.status_reason : s.status_reason;
    document.getElementById("s-facts").replaceChildren(...facts(s));
    document.getElementById("s-terminate").disabled = ENDED.has(s.status);
    document.querySelector("#s-kernels tbody").replaceChildren(...s.kernels.map((k) => el("tr", {},
      el("td", {}, k.index), el("td", {}, k.status), el("td", {}, k.node || "—"),
      el("td", {}, allocations({ kernels: [k], resources: {} }).join(", ")),
      el("td", {}, Object.entries(k.ports).map(([n, p]) => `${n}:${p}`).join(", ") || "—"),
      el("td", {}, k.exit_code ?? "—"))));
    document.querySelector("#s-history tbody").replaceChildren(...(s.history || []).map((h) => el("tr", {},
      el("td", {}, new Date(h.at).toLocaleTimeString()), el("td", {}, h.from_status || "—"),
      el("td", {}, statusBadge(h.to_status)), el("td", {}, h.reason))));
    if (changed) apps(s).catch(() => {});
  }

  function startFollow() {
    stopFollow();
    logs.textContent = "";
    source = new EventSource(`/v1/sessions/${id}/logs?follow=true`);
    source.addEventListener("log", (e) => {
      const d = JSON.parse(e.data);
      const atEnd = logs.scrollTop + logs.clientHeight >= logs.scrollHeight - 4;
      logs.append(d.stream === "stderr" ? el("span", { class: "stderr" }, d.data) : d.data);
      if (atEnd) logs.scrollTop = logs.scrollHeight;
    });
    source.addEventListener("status", () => refresh());
    source.addEventListener("end", () => { stopFollow(); refresh(); });
    source.onerror = () => { if (source && source.readyState === EventSource.CLOSED) stopFollow(); };
  }
  function stopFollow() { if (source) { source.close(); source = null; } }

  follow.addEventListener("change", async () => {
    if (follow.checked) startFollow();
    else { stopFollow(); }
  });
  document.getElementById("s-terminate").addEventListener("click", async () => {
    if (!window.confirm("Terminate this session?")) return;
    try { await api("DELETE", `/v1/sessions/${id}`); } catch (e) { document.getElementById("s-reason").textContent = e.message; }
    refresh();
  });
  refresh().then(() => {
    if (current && ENDED.has(current.status)) {
      follow.checked = false;
      api("GET", `/v1/sessions/${id}/logs?format=json`).then((r) => {
        logs.replaceChildren(...r.items.map((x) => x.stream === "stderr" ? el("span", { class: "stderr" }, x.data) : x.data));
      });
    } else startFollow();
  });
  setInterval(() => { if (!current || !ENDED.has(current.status)) refresh(); }, 3000);
}

// ---- nodes -----------------------------------------------------------------------------
function bar(label, parts, capacity) {
  const cap = Number(capacity) || 1;
  const used = parts.reduce((a, p) => a + p.amount, 0);
  const title = parts.map((p) => `${p.who} ${amount(label, +p.amount.toFixed(3))}`).join(", ") || "free";
  return el("div", { class: "meter", role: "img", "aria-label": `${label}: ${+used.toFixed(3)} of ${capacity} used (${title})` },
    el("span", { class: "meter-label" }, label),
    el("span", { class: "meter-track" }, parts.map((p, i) => el("span", {
      class: `meter-part p${i % 6}${p.others ? " others" : ""}`, width: `${(100 * p.amount) / cap}%`, title: `${p.who}: ${p.amount}`,
    }, ""))),
    el("span", { class: "meter-text" }, `${amount(label, +used.toFixed(3))} / ${amount(label, capacity)}`,
      parts.length ? ` — ${title}` : ""));
}

function nodesPage() {
  const holder = document.getElementById("nodes");
  async function refresh() {
    let nodes; let sessions;
    try {
      [nodes, sessions] = await Promise.all([
        api("GET", "/v1/nodes"),
        api("GET", `/v1/sessions?limit=500${ADMIN ? "&all=true" : ""}&status=SCHEDULED&status=PREPARING&status=RUNNING&status=TERMINATING&status=PREEMPTED`),
      ]);
    } catch (e) { setTimeout(refresh, 3000); return; }
    const holders = {}; // node -> device -> [{who, amount}]
    for (const s of sessions.items) for (const k of s.kernels) {
      if (!k.node) continue;
      for (const perDevice of Object.values(k.devices || {})) for (const [d, amount] of Object.entries(perDevice)) {
        ((holders[k.node] ||= {})[d] ||= []).push({ who: `${s.name || s.id.slice(0, 8)}${ADMIN ? " (" + s.owner + ")" : ""}`, amount: Number(amount) });
      }
    }
    keepFocus(holder, () => holder.replaceChildren(...nodes.items.map((n) => {
      const slots = Object.keys(n.capacity).sort().map((slot) => bar(slot, [{ who: "in use", amount: Number(n.occupied[slot] || 0) }].filter((p) => p.amount > 0), n.capacity[slot]));
      const devices = n.devices.map((d) => {
        const parts = [...((holders[n.id] || {})[d.id] || [])];
        const known = parts.reduce((a, p) => a + p.amount, 0);
        const rest = Number(n.device_used?.[d.id] || 0) - known;
        if (rest > 1e-9) parts.push({ who: "others", amount: rest, others: true });
        return el("li", { class: `device health-${d.health}` },
          el("div", {}, el("strong", {}, d.id), ` ${d.model}, ${(d.memory / 2 ** 30).toFixed(0)} GiB, ${d.health}`),
          bar(d.slot, parts, d.capacity));
      });
      const actions = ADMIN ? el("div", { class: "actions" }, ["drain", "cordon", "uncordon"].map((a) => el("button", {
        type: "button", "data-action": a, "aria-label": `${a} ${n.hostname}`,
        disabled: (a === "uncordon") === (n.admin_state === "ready"),
        onclick: async () => { await api("POST", `/v1/nodes/${encodeURIComponent(n.id)}/${a}`); refresh(); },
      }, a))) : null;
      return el("section", { class: "node", "data-node": n.id, "data-key": n.id, "aria-label": `Node ${n.hostname}` },
        el("h2", {}, n.hostname, " ", el("span", { class: `status s-${n.status}` }, n.status),
          n.admin_state !== "ready" ? el("span", { class: "status s-CANCELLED" }, n.admin_state) : null),
        el("p", { class: "hint" }, `${n.id} · ${n.runtime} · group ${n.resource_group} · ${n.arch} · ${n.running_kernels} running · limits ${n.limits_enforced ? "enforced" : "not enforced"}`),
        el("div", { class: "meters" }, slots),
        devices.length ? el("ul", { class: "devices" }, devices) : null,
        actions);
    })));
    if (!nodes.items.length) holder.replaceChildren(el("p", {}, "No nodes have registered yet."));
    setTimeout(refresh, 2000);
  }
  refresh();
}

// ---- admin -----------------------------------------------------------------------------
function table(id, rows) {
  const t = document.getElementById(id);
  if (!rows.length) { t.replaceChildren(el("tbody", {}, el("tr", {}, el("td", {}, "none")))); return; }
  const keys = Object.keys(rows[0]);
  const show = (v) => (v !== null && typeof v === "object" ? JSON.stringify(v) : String(v ?? "—"));
  t.replaceChildren(el("thead", {}, el("tr", {}, keys.map((k) => el("th", { scope: "col" }, k)))),
    el("tbody", {}, rows.map((r) => el("tr", {}, keys.map((k) => el("td", {}, show(r[k])))))));
}

function adminPage() {
  async function refresh() {
    const [users, projects, policies, groups, audit] = await Promise.all(
      ["/v1/users", "/v1/projects", "/v1/policies", "/v1/resource-groups", "/v1/audit?limit=50"].map((p) =>
        api("GET", p).catch((e) => [{ error: `could not load ${p}: ${e.message}` }])));
    table("a-users", users); table("a-projects", projects); table("a-policies", policies); table("a-groups", groups);
    table("a-audit", Array.isArray(audit) ? audit : audit.items.map((r) => ({
      time: when(r.at), user: r.user, credential: r.credential, action: r.action, target: r.target,
      status: r.status, client: r.client })));
  }
  const form = document.getElementById("user-form");
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    const err = document.getElementById("err-user"); err.textContent = "";
    try {
      const user = await api("POST", "/v1/users", { name: form.elements.name.value, role: form.elements.role.value });
      const key = await api("POST", `/v1/users/${encodeURIComponent(user.name)}/keys`, { name: "console" });
      const note = document.getElementById("new-key");
      note.hidden = false;
      note.replaceChildren(`${user.name}'s API key (shown once, store it now): `, el("code", {}, key.key));
      form.reset(); refresh();
    } catch (e) { err.textContent = e.message; }
  });
  refresh();
}

// ---- endpoints ---------------------------------------------------------------------------
function when(iso) { return iso ? new Date(iso).toLocaleString() : "—"; }

function endpointsPage() {
  const tbody = document.querySelector("#endpoints tbody");
  const note = document.getElementById("list-status");
  async function refresh() {
    try {
      const list = await api("GET", "/v1/endpoints");
      keepFocus(tbody, () => tbody.replaceChildren(...list.map((e) => el("tr", { "data-name": e.name, "data-key": e.name },
        el("td", {}, el("a", { href: `/endpoints/${encodeURIComponent(e.name)}` }, e.name)),
        el("td", {}, statusBadge(e.status), e.status_reason ? el("div", { class: "reason" }, e.status_reason) : null),
        el("td", { class: "replicas" }, `${e.ready_replicas} / ${e.desired_replicas}`),
        el("td", {}, el("a", { href: e.url, class: "url" }, e.url)),
        el("td", {}, e.revision), el("td", {}, age(e.created_at))))));
      if (!list.length) tbody.append(el("tr", {}, el("td", { colspan: "6", class: "empty" }, "No endpoints.")));
      note.textContent = "";
    } catch (e) { if (e.status !== 401) note.textContent = `Could not refresh: ${e.message}`; }
    setTimeout(refresh, 2000);
  }
  refresh();
}

function endpointPage() {
  const name = document.getElementById("endpoint").dataset.name;
  const base = `/v1/endpoints/${encodeURIComponent(name)}`;

  async function refresh() {
    let e;
    try { e = await api("GET", base); } catch (err) { document.getElementById("e-reason").textContent = err.message; return; }
    document.getElementById("e-status").replaceChildren(statusBadge(e.status));
    document.getElementById("e-reason").textContent = e.status_reason;
    const a = e.autoscale; const r = e.current;
    const rows = [
      ["URL", el("a", { href: e.url, id: "e-url" }, e.url)], ["Replicas ready / desired", `${e.ready_replicas} / ${e.desired_replicas}`],
      ["Autoscale", a.min_replicas === a.max_replicas ? `fixed at ${a.max_replicas}` : `${a.min_replicas}–${a.max_replicas}`],
      ["Revision", `${e.revision}${e.stable_revision ? ` (last ready: ${e.stable_revision})` : ""}`],
      ["Image", r.image || "runtime default"], ["Command", shellJoin(r.command) || "—"], ["Port", r.port],
      ["Health check", r.probe.path || "—"], ["Public", e.public ? "yes (no token needed)" : "no (a token is needed)"],
      ["Load", `${e.in_flight} in flight, ${e.queued} queued, ${e.rps} req/s`], ["Owner", e.owner], ["Created", when(e.created_at)],
    ];
    document.getElementById("e-facts").replaceChildren(...rows.flatMap(([k, v]) => [el("dt", {}, k), el("dd", {}, v)]));
    const replicas = document.querySelector("#e-replicas-table tbody");
    keepFocus(replicas, () => replicas.replaceChildren(...e.replicas.map((x) => el("tr", { "data-index": x.index, "data-key": x.session_id },
      el("td", {}, x.index), el("td", {}, x.state),
      el("td", {}, el("a", { href: `/sessions/${x.session_id}` }, x.session_id.slice(0, 8)), " ", statusBadge(x.session_status)),
      el("td", {}, x.node || "—"), el("td", { class: "ready" }, x.ready ? "ready" : (x.health || x.reason || "not yet")),
      el("td", {}, x.revision), el("td", {}, x.in_flight), el("td", {}, x.rps)))));
    document.getElementById("e-events").replaceChildren(...e.events.slice(0, 10).map((v) =>
      el("li", {}, el("time", {}, new Date(v.at).toLocaleTimeString()), ` ${v.kind}: ${v.message}`)));
  }

  const tokens = document.querySelector("#e-tokens tbody");
  async function loadTokens() {
    const list = await api("GET", `${base}/tokens`);
    tokens.replaceChildren(...list.map((t) => el("tr", { "data-token": t.id, "data-key": t.id },
      el("td", {}, t.name || "—"), el("td", {}, el("code", {}, `${t.prefix}…`)), el("td", {}, when(t.created_at)),
      el("td", {}, t.expires_at ? when(t.expires_at) : "never"), el("td", {}, t.revoked_at ? when(t.revoked_at) : "—"),
      el("td", {}, t.revoked_at ? null : el("button", { type: "button", class: "danger", "aria-label": `Revoke ${t.name || t.prefix}`,
        onclick: async () => {
          if (!window.confirm(`Revoke token ${t.name || t.prefix}? Callers using it are refused from now on.`)) return;
          try { await api("DELETE", `${base}/tokens/${encodeURIComponent(t.id)}`); } catch (e) { document.getElementById("err-token").textContent = e.message; }
          const note = document.getElementById("new-token");
          if (note.dataset.token === t.id) { note.hidden = true; note.replaceChildren(); } // no use showing a dead token
          loadTokens();
        } }, "Revoke")))));
    if (!list.length) tokens.append(el("tr", {}, el("td", { colspan: "6", class: "empty" }, "No tokens.")));
  }

  const tokenForm = document.getElementById("token-form");
  tokenForm.addEventListener("submit", async (event) => {
    event.preventDefault();
    const err = document.getElementById("err-token"); err.textContent = "";
    const body = { name: tokenForm.elements.name.value.trim() };
    if (tokenForm.elements.expires.value.trim()) body.expires = tokenForm.elements.expires.value.trim();
    try {
      const made = await api("POST", `${base}/tokens`, body);
      const note = document.getElementById("new-token");
      note.hidden = false; note.dataset.token = made.id;
      note.replaceChildren(`Token ${made.name || made.prefix} (shown once, store it now): `, el("code", { id: "token-value" }, made.token));
      tokenForm.reset(); loadTokens();
    } catch (e) { err.textContent = e.message; }
  });

  const scaleForm = document.getElementById("scale-form");
  scaleForm.addEventListener("submit", async (event) => {
    event.preventDefault();
    const err = document.getElementById("err-scale"); err.textContent = "";
    const body = {};
    for (const k of ["replicas", "min_replicas", "max_replicas"]) if (scaleForm.elements[k].value) body[k] = Number(scaleForm.elements[k].value);
    if (!Object.keys(body).length) { err.textContent = "Give a number of replicas, or a range."; return; }
    try { await api("POST", `${base}/scale`, body); scaleForm.reset(); refresh(); } catch (e) { err.textContent = e.message; }
  });

  refresh(); loadTokens().catch((e) => { document.getElementById("err-token").textContent = e.message; });
  setInterval(refresh, 2000);
}

// ---- data folders ------------------------------------------------------------------------
function size(bytes) { return bytes === null || bytes === undefined ? "—" : amount("mem", String(bytes)); }

function foldersPage() {
  const tbody = document.querySelector("#folders tbody");
  async function refresh() {
    const list = (await api("GET", "/v1/folders")).items;
    tbody.replaceChildren(...list.map((f) => el("tr", { "data-name": f.name },
      el("td", {}, el("a", { href: `/folders/${encodeURIComponent(f.id)}` }, f.name), f.automount ? el("small", {}, " (automount)") : null),
      el("td", {}, f.owner), el("td", {}, f.usage), el("td", {}, f.permission), el("td", {}, when(f.created_at)),
      el("td", {}, (f.sessions || []).map((id) => el("a", { href: `/sessions/${id}` }, `${id.slice(0, 8)} `))))));
    if (!list.length) tbody.append(el("tr", {}, el("td", { colspan: "6", class: "empty" }, "No data folders. Create one.")));
  }
  const form = document.getElementById("folder-form");
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    const err = document.getElementById("err-folder"); err.textContent = "";
    try {
      await api("POST", "/v1/folders", { name: form.elements.name.value.trim(), usage: form.elements.usage.value });
      form.reset(); refresh();
    } catch (e) { err.textContent = e.message; }
  });
  refresh();
}

// tus 1.0 core, in one PATCH: announce the length and path, then send the bytes
async function upload(folder, path, file) {
  const utf8 = new TextEncoder().encode(path);
  const headers = { "Tus-Resumable": "1.0.0", "Upload-Length": String(file.size), "Upload-Metadata": `path ${btoa(String.fromCharCode(...utf8))}` };
  const made = await fetch(`/v1/folders/${encodeURIComponent(folder)}/uploads`, { method: "POST", headers: { ...headers, "X-CSRF-Token": CSRF }, credentials: "same-origin" });
  if (!made.ok) throw new Problem(made.status, await made.json().catch(() => ({})));
  if (file.size === 0) return;
  const sent = await fetch(made.headers.get("Location"), {
    method: "PATCH", body: file, credentials: "same-origin",
    headers: { "Tus-Resumable": "1.0.0", "Upload-Offset": "0", "Content-Type": "application/offset+octet-stream", "X-CSRF-Token": CSRF },
  });
  if (!sent.ok) throw new Problem(sent.status, await sent.json().catch(() => ({})));
}

function folderPage() {
  const holder = document.getElementById("folder");
  const folder = holder.dataset.name; const label = holder.dataset.label;
  const here = new URLSearchParams(window.location.search).get("path") || "";
  const tbody = document.querySelector("#files tbody");
  const link = (path) => `/folders/${encodeURIComponent(folder)}${path ? `?path=${encodeURIComponent(path)}` : ""}`;
  const parts = here ? here.split("/") : [];
  document.getElementById("crumbs").replaceChildren(el("a", { href: link("") }, label),
    ...parts.flatMap((p, i) => [" / ", i === parts.length - 1 ? el("span", { "aria-current": "page" }, p) : el("a", { href: link(parts.slice(0, i + 1).join("/")) }, p)]));

  async function refresh() {
    const q = here ? `?path=${encodeURIComponent(here)}` : "";
    const entries = (await api("GET", `/v1/folders/${encodeURIComponent(folder)}/files${q}`)).items;
    entries.sort((a, b) => (a.type === "dir") === (b.type === "dir") ? a.path.localeCompare(b.path) : (a.type === "dir" ? -1 : 1));
    tbody.replaceChildren(...entries.map((e) => {
      const base = e.path.slice(e.path.lastIndexOf("/") + 1);
      const href = `/v1/folders/${encodeURIComponent(folder)}/files/${e.path.split("/").map(encodeURIComponent).join("/")}`;
      const name = e.type === "dir" ? el("a", { href: link(e.path) }, `${base}/`)
        : e.type === "file" ? el("a", { href, download: base, "aria-label": `Download ${base}` }, base) : base;
      return el("tr", { "data-path": e.path }, el("td", {}, name), el("td", {}, e.type),
        el("td", {}, e.type === "file" ? size(e.size) : "—"), el("td", {}, new Date(e.mtime * 1000).toLocaleString()));
    }));
    if (!entries.length) tbody.append(el("tr", {}, el("td", { colspan: "4", class: "empty" }, "Empty. Upload a file.")));
  }

  const form = document.getElementById("upload-form");
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    const err = document.getElementById("err-upload"); const progress = document.getElementById("up-progress");
    err.textContent = "";
    const files = [...form.elements.file.files];
    let done = 0;
    for (const file of files) {
      progress.textContent = `Uploading ${file.name} (${done + 1} of ${files.length})…`;
      try { await upload(folder, here ? `${here}/${file.name}` : file.name, file); done++; } catch (e) { err.textContent = `${file.name}: ${e.message}`; break; }
    }
    progress.textContent = done ? `Uploaded ${done} file(s).` : "";
    form.reset(); refresh();
  });
  refresh().catch((e) => { document.getElementById("err-upload").textContent = e.message; });
}

// ---- templates -------------------------------------------------------------------------
function templatesPage() {
  const tbody = document.querySelector("#templates tbody");
  api("GET", "/v1/templates").then((list) => {
    tbody.replaceChildren(...list.map((t) => el("tr", { "data-name": t.name },
      el("td", {}, el("a", { href: `/templates/${encodeURIComponent(t.name)}` }, t.name)), el("td", {}, t.description || "—"),
      el("td", {}, t.params.map((p) => (p.default === null ? p.name : `${p.name}=${p.default}`)).join(", ") || "none"),
      el("td", {}, el("a", { href: `/templates/${encodeURIComponent(t.name)}`, "aria-label": `Run ${t.name}` }, "Run…")))));
    if (!list.length) tbody.append(el("tr", {}, el("td", { colspan: "4", class: "empty" }, "No templates.")));
  });
}

function templatePage() {
  const name = document.getElementById("template").dataset.name;
  const form = document.getElementById("run-form");
  const err = (field) => document.getElementById(`err-${field}`);
  api("GET", `/v1/templates/${encodeURIComponent(name)}`).then((t) => {
    document.getElementById("tp-description").textContent = t.description;
    const s = t.session;
    const rows = [["Image", s.image || "runtime default"], ["Command", shellJoin(s.command) || "—"],
      ["Resources", Object.entries(s.resources || {}).map(([k, v]) => `${k} ${v}`).join(", ") || "default"]];
    document.getElementById("tp-facts").replaceChildren(...rows.flatMap(([k, v]) => [el("dt", {}, k), el("dd", {}, v)]));
    document.getElementById("tp-params").replaceChildren(...t.params.map((p) => el("div", { class: "field", "data-field": `params.${p.name}` },
      el("label", { for: `p-${p.name}` }, p.name, el("small", {}, p.default === null ? " (required)" : ` (default: ${p.default || "empty"})`),
        el("small", {}, ` — JOBGATE_PARAM_${p.name.toUpperCase()}`)),
      el("input", { id: `p-${p.name}`, name: `param:${p.name}`, "data-param": p.name, value: p.default ?? "", required: p.default === null, "aria-describedby": `err-params.${p.name}` }),
      el("p", { class: "error", id: `err-params.${p.name}` }))));
    if (!t.params.length) document.getElementById("tp-params").append(el("p", { class: "hint" }, "This template takes no parameters."));
  }).catch((e) => { err("form").textContent = e.message; });

  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    for (const p of form.querySelectorAll(".error")) p.textContent = "";
    for (const i of form.querySelectorAll("[aria-invalid]")) i.removeAttribute("aria-invalid");
    const params = {};
    for (const input of form.querySelectorAll("[data-param]")) {
      if (input.required && !input.value) { input.setAttribute("aria-invalid", "true"); err(`params.${input.dataset.param}`).textContent = "required"; input.focus(); return; }
      params[input.dataset.param] = input.value;
    }
    const body = { params };
    if (form.elements.name.value.trim()) body.name = form.elements.name.value.trim();
    const submit = document.getElementById("run-submit"); submit.disabled = true;
    try {
      const key = `console-run-${Date.now().toString(36)}-${Math.random().toString(36).slice(2)}`;
      const session = await api("POST", `/v1/templates/${encodeURIComponent(name)}/run`, body, { "Idempotency-Key": key });
      window.location.assign(`/sessions/${session.id}`);
    } catch (e) {
      const field = e.body?.errors?.[0]?.field || e.body?.field || "form";
      const box = form.querySelector(`[data-field="${CSS.escape(field)}"]`);
      (box ? box.querySelector(".error") : err("form")).textContent = e.message;
      box?.querySelector("input")?.setAttribute("aria-invalid", "true");
    } finally { submit.disabled = false; }
  });
}

({
  sessions: sessionsPage, session: sessionPage, nodes: nodesPage, admin: adminPage,
  endpoints: endpointsPage, endpoint: endpointPage, folders: foldersPage, folder: folderPage,
  templates: templatesPage, template: templatePage,
})[PAGE]?.();
