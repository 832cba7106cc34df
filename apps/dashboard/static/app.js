// zactors dashboard: one page, drawn from the JSON API; live from Server-Sent Events.
// Everything from the network goes into the DOM as text (textContent), never as HTML.
"use strict";
(function () {
  const base = location.pathname.replace(/[^/]*$/, "");
  const state = { snapshot: null, times: [], series: {}, view: null, tail: null };
  const MAX_POINTS = 180, TAIL_ROWS = 200;

  // -- DOM helpers -------------------------------------------------------------
  function el(tag, attrs, ...children) {
    const node = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      if (k === "class") node.className = v;
      else if (k.startsWith("on")) node.addEventListener(k.slice(2), v);
      else if (v !== null && v !== undefined) node.setAttribute(k, v);
    }
    for (const child of children.flat()) {
      if (child === null || child === undefined) continue;
      node.append(child instanceof Node ? child : document.createTextNode(String(child)));
    }
    return node;
  }
  const svgNS = "http://www.w3.org/2000/svg";
  function svg(tag, attrs) {
    const node = document.createElementNS(svgNS, tag);
    for (const [k, v] of Object.entries(attrs)) node.setAttribute(k, v);
    return node;
  }
  function shown(value) {  // {text|hex, size, truncated} from the server's render.show
    if (value === null || value === undefined) return el("span", { class: "muted" }, "-");
    const body = value.text !== undefined ? el("span", { class: "mono" }, value.text) : el("span", { class: "hex" }, value.hex);
    return value.truncated ? el("span", {}, body, el("span", { class: "more" }, " ... (" + value.size + " bytes)")) : body;
  }
  function number(x) {
    if (typeof x !== "number") return String(x);
    if (Math.abs(x) >= 1e6) return (x / 1e6).toFixed(1) + "M";
    if (Math.abs(x) >= 1e4) return (x / 1e3).toFixed(1) + "k";
    return Number.isInteger(x) ? String(x) : x.toFixed(1);
  }
  function seconds(x) {  // a ttl left: "0.4 s", "12 s", "3 min", "5 h", "2 d"
    if (x < 10) return x.toFixed(1) + " s";
    if (x < 120) return Math.round(x) + " s";
    if (x < 7200) return Math.round(x / 60) + " min";
    if (x < 172800) return Math.round(x / 3600) + " h";
    return Math.round(x / 86400) + " d";
  }
  function bytes(n) {
    const units = ["B", "KiB", "MiB", "GiB", "TiB"];
    let i = 0;
    while (n >= 1024 && i < units.length - 1) { n /= 1024; i++; }
    return (i ? n.toFixed(1) : n) + " " + units[i];
  }
  function pairLine(p) {  // a ZEPS broker of a pair: role, state, peer, replication lag, last failover
    const lag = Object.values(p.replication_lag || {}).reduce((a, b) => a + b, 0);
    const last = p.last_failover;
    return el("p", { class: "mono" }, "Pair: " + p.role + " " + p.state + (p.ready ? "" : " (catching up)") +
      ", peer " + (p.peer_endpoint || p.peer || "?") + " " + (p.peer_state || "silent") +
      ", replication lag " + lag + (p.degraded ? ", DEGRADED" : "") +
      ", last change " + (last ? last.from + " -> " + last.to + " at " + new Date(last.time * 1000).toLocaleTimeString() + " (" + last.reason + ")" : "never"));
  }

  function table(columns, rows, empty) {
    if (!rows.length) return el("div", { class: "empty" }, empty || "Nothing yet.");
    return el("table", {},
      el("thead", {}, el("tr", {}, columns.map(c => el("th", { class: c.num ? "num" : "" }, c.title)))),
      el("tbody", {}, rows.map(row => el("tr", {}, columns.map(c => el("td", { class: c.num ? "num" : "" }, c.cell(row)))))));
  }
  function tiles(items) {
    return el("div", { class: "tiles" }, items.map(([label, value]) => el("div", { class: "tile" }, el("b", {}, value), el("span", {}, label))));
  }
  function api(path, options) {
    return fetch(base + "api/" + path, Object.assign({ credentials: "same-origin" }, options || {}))
      .then(r => r.json().then(body => { if (!r.ok) throw new Error(body.error || r.statusText); return body; }));
  }

  // -- charts: a polyline over the last points, scaled to their maximum -------------
  function chart(label, points, unit) {
    const width = 300, height = 56, n = points.length;
    const top = Math.max(1, ...points);
    const box = svg("svg", { viewBox: "0 0 " + width + " " + height, preserveAspectRatio: "none", role: "img" });
    box.append(svg("line", { x1: 0, y1: height - 0.5, x2: width, y2: height - 0.5, stroke: "#e5e7eb" }));
    if (n > 1) {
      const xy = points.map((v, i) => ((i / (MAX_POINTS - 1)) * width + (MAX_POINTS - n) / (MAX_POINTS - 1) * width).toFixed(1)
        + "," + (height - 2 - (v / top) * (height - 6)).toFixed(1));
      box.append(svg("polygon", { points: xy[0].split(",")[0] + "," + height + " " + xy.join(" ") + " " + xy[n - 1].split(",")[0] + "," + height }));
      box.append(svg("polyline", { points: xy.join(" ") }));
    }
    const current = n ? points[n - 1] : 0;
    return el("div", { class: "chart", "data-series": label },
      el("div", { class: "label" }, el("span", {}, label), el("span", { class: "value" }, number(current) + (unit || ""))),
      box);
  }
  function chartGrid(name) {
    return el("div", { class: "grid" }, charts(name).map(c => el("div", { class: "card" }, c)));
  }
  function charts(name) {
    const part = state.snapshot.sources[name], series = state.series[name] || {};
    return Object.entries(part.charted || {}).map(([key, label]) => chart(label, series[key] || []));
  }

  // -- views -----------------------------------------------------------------------
  const views = {
    overview: { title: "Overview", live: true, draw() {
      const parts = state.snapshot.sources;
      return [el("h1", {}, "Overview"), el("div", { class: "grid" }, Object.entries(parts).map(([name, part]) =>
        el("div", { class: "card", "data-source": name },
          el("h3", {}, el("span", { class: "dot " + part.status }), el("a", { href: "#/" + name }, part.title)),
          el("div", { class: "summary" }, part.summary),
          charts(name))))];
    } },
    majordomo: { title: "Majordomo", live: true, draw(part) {
      const d = part.data, c = d.counters;
      return [tiles([["workers", d.workers], ["queued", d.queued], ["requests/s", number(part.now.requests || 0)],
                     ["expired", c.expired || 0], ["re-dispatched", c.redispatched || 0]]),
        chartGrid("majordomo"),
        el("h2", {}, "Services"),
        table([{ title: "service", cell: r => r[0] }, { title: "workers", num: 1, cell: r => r[1].workers },
               { title: "idle", num: 1, cell: r => r[1].idle }, { title: "queued", num: 1, cell: r => r[1].queued }],
              Object.entries(d.services).sort(), "No services yet: start a worker."),
        el("h2", {}, "Endpoint"), el("p", { class: "mono" }, d.endpoint, d.worker_endpoint && d.worker_endpoint !== d.endpoint ? " (workers: " + d.worker_endpoint + ")" : ""),
        counters(c)];
    } },
    zeps: { title: "ZEPS", live: true, draw(part, arg) {
      const d = part.data;
      if (arg) return stream(d, arg);
      const totals = part.totals || {};
      return [tiles([["streams", Object.keys(d.streams).length], ["peers", d.peers],
                     ["published", totals.published || 0], ["published/s", number(part.now.published || 0)],
                     ["delivered", totals.delivered || 0], ["delivered/s", number(part.now.delivered || 0)],
                     ["ack", d.ack || "written"]]),
        chartGrid("zeps"),
        el("h2", {}, "Streams"),
        table([{ title: "stream", cell: r => [el("a", { href: "#/zeps/" + encodeURIComponent(r[0]) }, r[0]),
                                               r[1].remote !== undefined ? el("span", { class: "muted" }, " (pair " + (r[1].remote + 1) + ")") : ""] },
               { title: "sequences", num: 1, cell: r => r[1].first_seq + " - " + r[1].last_seq },
               { title: "rate/s", num: 1, cell: r => number(r[1].rate) },
               { title: "journal", num: 1, cell: r => bytes(r[1].bytes) },
               { title: "peers", num: 1, cell: r => r[1].peers },
               { title: "subscribers", num: 1, cell: r => r[1].subscriber_count }],
              Object.entries(d.streams).sort(), "No streams yet: publish to one."),
        el("p", { class: "muted" }, "Acknowledged (PING-OK, delivery) once ", el("b", {}, d.ack || "written"),
           d.ack === "synced" ? ": an fsync covered it (survives a power loss)." : ": handed to the OS (survives a crash of the broker, not a power loss)."),
        el("h2", {}, "Consumer groups"),
        table([{ title: "stream / group", cell: g => g.stream + " / " + g.group },
               { title: "lag", num: 1, cell: g => g.lag }, { title: "pending", num: 1, cell: g => g.pending },
               { title: "oldest pending", num: 1, cell: g => number(g.oldest_pending_age) + " s" },
               { title: "members", num: 1, cell: g => g.members },
               { title: "redelivered", num: 1, cell: g => g.redelivered },
               { title: "dead letters", num: 1, cell: g => g.dead_letters }],
              d.groups || [], "No consumer groups."),
        el("p", { class: "muted" }, "Journal: ", el("span", { class: "mono" }, d.journal), "  Endpoint: ", el("span", { class: "mono" }, d.endpoint)),
        d.pair ? pairLine(d.pair) : "",
        d.cluster ? [el("h2", {}, "Cluster map (streams placed by a hash of their name; no rebalancing)"),
          table([{ title: "pair", cell: c => el("span", { class: "mono" }, String(c.index + 1) + ". " + c.pair) },
                 { title: "state", cell: c => el("span", { class: "pill" + (c.error ? " warn" : "") }, c.error ? "unreachable" : c.state) },
                 { title: "streams", num: 1, cell: c => c.error ? "" : c.streams },
                 { title: "peers", num: 1, cell: c => c.error ? "" : c.peers },
                 { title: "error", cell: c => c.error || "" }],
                d.cluster.map((c, index) => Object.assign({ index }, c)), "")] : "",
        counters(d.counters)];
    } },
    clone: { title: "Clone", live: false, draw(part, arg) { return cloneView(part, arg || ""); } },
    harmony: { title: "Harmony", live: true, draw(part) {
      const d = part.data;
      return [tiles([["peers", d.peer_count], ["evasive", d.evasive], ["groups", d.groups.length]]), chartGrid("harmony"),
        el("p", {}, "This node: ", el("b", {}, d.name), " ", el("span", { class: "mono muted" }, d.uuid + "  " + (d.endpoint || ""))),
        el("p", {}, "Own groups: ", d.own_groups.length ? d.own_groups.map(g => el("span", { class: "pill" }, g)) : el("span", { class: "muted" }, "none")),
        el("h2", {}, "Peers"),
        table([{ title: "name", cell: p => p.name }, { title: "id", cell: p => el("span", { class: "mono" }, p.id.slice(0, 12)) },
               { title: "address", cell: p => el("span", { class: "mono" }, p.address) },
               { title: "groups", cell: p => p.groups.map(g => el("span", { class: "pill" }, g)) },
               { title: "headers", cell: p => Object.entries(p.headers).map(([k, v]) => el("div", { class: "mono" }, k + ": " + v)) },
               { title: "state", cell: p => el("span", { class: "pill" + (p.state === "alive" ? "" : " warn") }, p.state) },
               { title: "backlog", num: 1, cell: p => p.backlog }],
              d.peers, "No peers yet."),
        counters(d.counters)];
    } },
    supervisor: { title: "Supervision", live: true, draw(part) {
      const d = part.data, c = d.counters;
      const state = p => p.running ? "running" : p.starting ? "starting" : "restarting";
      return [tiles([["parts", d.children.length], ["restarts", c.restarts || 0], ["deaths", c.child_deaths || 0]]),
        chartGrid("supervisor"),
        el("h2", {}, "Parts (in start order; they stop in reverse)"),
        table([{ title: "part", cell: p => p.name },
               { title: "state", cell: p => el("span", { class: "pill" + (p.running ? "" : " warn") }, state(p)) },
               { title: "restarts", num: 1, cell: p => p.restarts },
               { title: "policy", cell: p => p.restart },
               { title: "last death", cell: p => el("span", { class: "mono" }, p.last_reason || "") }],
              d.children, "No parts."),
        counters(c)];
    } },
  };

  function counters(c) {
    const rows = Object.entries(c || {}).filter(([, v]) => typeof v === "number").sort();
    return [el("h2", {}, "Counters"), rows.length ? el("div", { class: "tiles" }, rows.map(([k, v]) =>
      el("div", { class: "tile" }, el("b", {}, number(v)), el("span", {}, k.replace(/_/g, " "))))) :
      el("div", { class: "empty" }, "Nothing counted yet.")];
  }

  function stream(d, name) {
    const s = d.streams[name];
    if (!s) return [el("p", { class: "empty" }, "No stream named ", el("b", {}, name), ".")];
    return [el("div", { id: "stream-stats" }, streamStats(name, s)), tailBox(name)];
  }
  function streamStats(name, s) {
    return [el("p", { class: "crumbs" }, el("a", { href: "#/zeps" }, "Streams"), " / ", el("b", {}, name)),
      tiles([["first", s.first_seq], ["last", s.last_seq], ["rate/s", number(s.rate)], ["journal", bytes(s.bytes)],
             ["unwritten", Math.max(0, s.last_seq - s.written_seq)], ["unsynced", Math.max(0, s.written_seq - s.synced_seq)]]),
      el("h2", {}, "Subscribers"),
      table([{ title: "peer", cell: x => el("span", { class: "mono" }, x.peer.slice(0, 16)) },
             { title: "patterns", cell: x => x.patterns.map(p => el("span", { class: "pill" }, p || "(all)")) },
             { title: "mode", cell: x => x.mode }, { title: "lag", num: 1, cell: x => x.lag },
             { title: "credit", num: 1, cell: x => bytes(x.credit) }, { title: "delivered", num: 1, cell: x => x.delivered }],
            s.subscribers, "No subscribers."),
      s.subscriber_count > s.subscribers.length ? el("p", { class: "muted" }, "The " + s.subscribers.length + " most behind of " + s.subscriber_count + " shown.") : ""];
  }

  // -- the live tail: its own event stream, kept across snapshot redraws -------------
  function tailBox(name) {
    const t = state.tail;
    if (t && t.name === name) return t.box;
    stopTail();
    const body = el("tbody", {});
    const notice = el("div", { class: "notice" }, "Not following.");
    const key = el("input", { type: "text", name: "key", placeholder: "key filter: prefix, re:..., glob:...", "aria-label": "key filter" });
    const form = el("form", { class: "bar", onsubmit: e => { e.preventDefault(); startTail(name, key.value); } },
      key, el("button", { type: "submit" }, "Follow"),
      el("button", { type: "button", class: "plain", onclick: () => { stopTail(true); } }, "Stop"));
    const box = el("section", { id: "tail-box" }, el("h2", {}, "Live tail"), form, notice,
      el("table", { id: "tail" }, el("thead", {}, el("tr", {}, el("th", { class: "num" }, "seq"), el("th", {}, "key"), el("th", {}, "body"))), body));
    state.tail = { name, box, body, notice, source: null };
    startTail(name, "");
    return box;
  }
  function startTail(name, key) {
    const t = state.tail;
    if (t.source) t.source.close();
    t.body.replaceChildren();
    const source = new EventSource(base + "api/zeps/tail?stream=" + encodeURIComponent(name) + "&key=" + encodeURIComponent(key));
    t.source = source;
    t.notice.className = "notice";
    t.notice.textContent = "Following " + name + (key ? " (keys " + key + ")" : "") + ": new messages appear here.";
    source.addEventListener("messages", e => {
      const batch = JSON.parse(e.data);
      for (const m of batch.messages) t.body.prepend(el("tr", {}, el("td", { class: "num" }, m.seq), el("td", {}, shown(m.key)), el("td", {}, shown(m.body))));
      while (t.body.rows.length > TAIL_ROWS) t.body.lastChild.remove();
      if (batch.skipped) t.notice.textContent = "Following " + name + ": " + batch.skipped + " older messages in the last batch not shown.";
    });
    source.addEventListener("error", e => {
      if (e.data) { t.notice.className = "notice bad"; t.notice.textContent = JSON.parse(e.data).error; source.close(); }
    });
  }
  function stopTail(keep) {
    const t = state.tail;
    if (t && t.source) { t.source.close(); t.source = null; t.notice.textContent = "Stopped."; }
    if (!keep) state.tail = null;
  }

  // -- Clone: browse by subtree, set and delete ---------------------------------------
  function cloneView(part, prefix) {
    const d = part.data, out = el("div", {});
    const notice = el("div", { class: "notice", id: "clone-notice" });
    const crumbs = el("p", { class: "crumbs" }, el("a", { href: "#/clone" }, "(root)"));
    let acc = "";
    for (const piece of prefix.split("/").filter(Boolean)) {
      acc += "/" + piece;
      crumbs.append(" / ", el("a", { href: "#/clone/" + encodeURIComponent(acc + "/") }, piece));
    }
    const key = el("input", { type: "text", name: "key", placeholder: "key", value: prefix, "aria-label": "key" });
    const value = el("input", { type: "text", name: "value", placeholder: "value", "aria-label": "value" });
    const ttl = el("input", { type: "number", name: "ttl", placeholder: "ttl s (optional)", min: "0", step: "any", "aria-label": "ttl" });
    const form = el("form", { class: "bar", id: "clone-set", onsubmit: e => {
      e.preventDefault();
      const body = { key: key.value, value: value.value };
      if (ttl.value) body.ttl = Number(ttl.value);
      change("set", body, notice, prefix);
    } }, key, value, ttl, el("button", { type: "submit" }, "Set"));
    const listing = el("div", {}, el("p", { class: "muted" }, "Loading keys..."));
    out.append(tiles([["keys", d.keys], ["sequence", d.sequence], ["state", d.role + " " + d.state],
                      ["updates/s", number(part.now.updates || 0)]]),
      chartGrid("clone"),
      el("h2", {}, "Map"), crumbs, form, notice, listing);
    api("clone/keys?limit=200&prefix=" + encodeURIComponent(prefix)).then(r => {
      listing.replaceChildren(
        r.subtrees.length ? el("div", { class: "bar" }, r.subtrees.map(s =>
          el("a", { class: "pill", href: "#/clone/" + encodeURIComponent(s.prefix.text || ""), "data-hex": s.raw }, shown(s.prefix), " (" + s.keys + ")"))) : "",
        table([{ title: "key", cell: k => shown(k.key) }, { title: "value", cell: k => shown(k.value) },
               { title: "ttl", num: true, cell: k => k.ttl === null || k.ttl === undefined ? "\u2014" :
                   el("span", { class: "ttl", "data-until": String(performance.now() / 1000 + k.ttl) }, seconds(k.ttl)) },
               { title: "", cell: k => k.key.text !== undefined ? el("button", { class: "danger", type: "button",
                   onclick: () => change("delete", { key: k.key.text }, notice, prefix) }, "delete") : "" }],
              r.keys, "No keys here."),
        r.truncated ? el("p", { class: "muted" }, "Showing the first " + r.keys.length + " keys.") : "");
    }, err => { listing.replaceChildren(el("p", { class: "notice bad" }, err.message)); });
    return [out];
  }
  // the ttl cells count down between listings: one timer for the page, only while such cells are shown
  setInterval(() => {
    const now = performance.now() / 1000;
    for (const cell of document.querySelectorAll("span.ttl[data-until]")) {
      const left = Number(cell.dataset.until) - now;
      cell.textContent = left > 0 ? seconds(left) : "expired";
    }
  }, 1000);
  function change(verb, body, notice, prefix) {
    api("clone/" + verb, { method: "POST", headers: { "Content-Type": "application/json" }, body: JSON.stringify(body) })
      .then(r => { notice.className = r.confirmed ? "notice" : "notice bad";
                   notice.textContent = (verb === "set" ? "Set " : "Deleted ") + body.key + (r.confirmed ? "" : " (not confirmed by the server yet)");
                    setTimeout(() => { if (location.hash.startsWith("#/clone")) render(true); }, 400); },
            err => { notice.className = "notice bad"; notice.textContent = err.message; });
  }

  // -- routing and live updates ---------------------------------------------------------
  function route() {
    const [name, ...rest] = location.hash.replace(/^#\/?/, "").split("/");
    return { name: name || "overview", arg: rest.length ? decodeURIComponent(rest.join("/")) : "" };
  }
  function menu() {
    const here = route().name, items = [["overview", "Overview"]];
    for (const [name, part] of Object.entries(state.snapshot.sources)) items.push([name, part.title]);
    document.getElementById("menu").replaceChildren(...items.map(([name, title]) => {
      const status = name === "overview" ? null : state.snapshot.sources[name].status;
      return el("li", {}, el("a", { href: "#/" + name, class: name === here ? "here" : "" },
        status ? el("span", { class: "dot " + status }) : el("span", { class: "dot" }), title));
    }));
  }
  function render(force) {
    if (!state.snapshot) return;
    const r = route(), view = views[r.name], part = state.snapshot.sources[r.name];
    const key = r.name + "/" + r.arg;
    if (!force && state.view === key && view && !view.live) { menu(); return; }
    const stats = document.getElementById("stream-stats");
    if (!force && state.view === key && r.name === "zeps" && r.arg && stats && part && part.data && part.data.streams[r.arg]) {
      menu();  // keep the tail (and its filter box, maybe being typed in) as it is
      stats.replaceChildren(...streamStats(r.arg, part.data.streams[r.arg]));
      return;
    }
    if (!(r.name === "zeps" && r.arg)) stopTail();
    state.view = key;
    menu();
    const main = document.getElementById("main");
    let content;
    if (r.name === "overview") content = view.draw();
    else if (!part) content = [el("p", { class: "empty" }, "Nothing called ", el("b", {}, r.name), " here.")];
    else if (!part.data) content = [el("p", { class: "empty" }, part.title + " is not answering: " + part.summary)];
    else content = (view || generic).draw(part, r.arg);
    if (r.name !== "overview") content.unshift(el("h1", {}, part ? part.title : r.name));
    main.replaceChildren(...content.flat(2).filter(x => x !== "" && x !== null && x !== undefined));
  }
  const generic = { draw(part) { return [el("pre", { class: "mono" }, JSON.stringify(part.data, null, 2))]; } };

  function take(snapshot) {
    state.snapshot = snapshot;
    state.times.push(snapshot.time);
    for (const [name, part] of Object.entries(snapshot.sources)) {
      const series = state.series[name] = state.series[name] || {};
      for (const key of Object.keys(part.charted || {})) {
        const points = series[key] = series[key] || [];
        points.push(part.now[key] || 0);
        if (points.length > MAX_POINTS) points.shift();
      }
    }
    render(false);
  }
  function connect() {
    const live = document.getElementById("live");
    const events = new EventSource(base + "api/events");
    events.addEventListener("open", () => { live.className = "live"; live.textContent = "live"; });
    events.addEventListener("error", () => { live.className = "live off"; live.textContent = "reconnecting"; });
    events.addEventListener("snapshot", e => {
      const snapshot = JSON.parse(e.data);
      if (state.snapshot && snapshot.time <= state.snapshot.time) return;
      take(snapshot);
    });
  }
  window.addEventListener("hashchange", () => render(true));
  api("history").then(h => {
    state.times = h.times.slice();
    state.series = h.series;
    return api("status");
  }).then(snapshot => { state.snapshot = snapshot; render(true); connect(); },
          err => { document.getElementById("main").replaceChildren(el("p", { class: "notice bad" }, "Cannot reach the API: " + err.message)); });
})();
