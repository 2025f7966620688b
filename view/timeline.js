// lora-sched view: draws a view.layout.Layout (JSON in #layout-data) on a canvas.
// Wheel: zoom steps around the cursor (shift+wheel: zoom rows); drag: pan; double-click or "reset": fit all.
// Hover: a request's id, adapter, tokens and wait, and what it does at that step; over the band, the step's batch.
// With "#selftest" in the URL the page hovers and zooms itself once and writes what it saw into #view-status
// (the browser test reads it with --dump-dom).
(function () {
  "use strict";
  var data = JSON.parse(document.getElementById("layout-data").textContent);
  var canvas = document.getElementById("timeline");
  var tip = document.getElementById("tip");
  var status = document.getElementById("view-status");
  var ctx = canvas.getContext("2d");
  var rows = data.rows, steps = data.steps;
  var stepIndex = {};
  steps.forEach(function (s, i) { stepIndex[s.step] = i; });
  var byStep = {};
  steps.forEach(function (s) { byStep[s.step] = s; });
  var violAt = {};
  data.violations.forEach(function (v) { (violAt[v.step] = violAt[v.step] || []).push(v); });
  var starAt = {};
  data.star_spans.forEach(function (sp) { for (var k = sp[1]; k <= sp[2]; k++) starAt[k] = sp[0]; });
  var peak = data.max_loras;
  steps.forEach(function (s) {
    var all = {}; s.batch.concat(s.running).forEach(function (a) { all[a] = 1; });
    peak = Math.max(peak, Object.keys(all).length);
  });
  var hasVictims = steps.some(function (s) { return s.victims.length > 0; });

  var G = { left: 130, right: 20, top: 8, bottom: 22 };
  var W = 800, H = 600, bandTop = 0, bandH = 0, stripH = 0, axisH = 18, tlTop = 0;
  var view = { x0: 0, x1: 1, y0: 0, y1: 1 };

  function layoutGeometry() {
    var header = document.getElementById("head").offsetHeight;
    var legend = document.getElementById("legend").offsetHeight;
    W = Math.max(480, window.innerWidth - 16);
    var want = 150 + Math.min(rows.length, 140) * 12;
    H = Math.max(360, Math.min(want, window.innerHeight - header - legend - 24));
    bandTop = G.top + 14;
    bandH = Math.min(140, 26 + 14 * (peak + 1));
    stripH = hasVictims ? 16 : 0;
    tlTop = bandTop + bandH + stripH + axisH;
    var dpr = window.devicePixelRatio || 1;
    canvas.width = Math.round(W * dpr); canvas.height = Math.round(H * dpr);
    canvas.style.width = W + "px"; canvas.style.height = H + "px";
    ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
  }
  function reset() {
    view = { x0: data.first_step - 0.5, x1: data.last_step + 1.5, y0: 0, y1: Math.max(rows.length, 1) };
  }
  function sx(step) { return G.left + (step - view.x0) / (view.x1 - view.x0) * (W - G.left - G.right); }
  function xstep(px) { return view.x0 + (px - G.left) / (W - G.left - G.right) * (view.x1 - view.x0); }
  function sy(row) { return tlTop + (row - view.y0) / (view.y1 - view.y0) * (H - tlTop - G.bottom); }
  function yrow(py) { return view.y0 + (py - tlTop) / (H - tlTop - G.bottom) * (view.y1 - view.y0); }
  function rowH() { return (H - tlTop - G.bottom) / (view.y1 - view.y0); }
  function color(a, kind) { return data.colors[String(a)][kind]; }
  function acolor(a) { return data.adapter_colors[String(a)] || "#999999"; }
  function bandY(k) { return bandTop + bandH - (k / (peak + 1)) * bandH; }

  function niceStep(span, px) {
    var raw = span / Math.max(1, px / 70), p = Math.pow(10, Math.floor(Math.log10(raw)));
    var m = raw / p; var n = m < 1.5 ? 1 : m < 3.5 ? 2 : m < 7.5 ? 5 : 10;
    return Math.max(1, n * p);
  }

  function draw() {
    var drawn = { segments: 0, marks: 0, blocks: 0 };
    ctx.clearRect(0, 0, W, H);
    ctx.font = "11px sans-serif";
    var xa = Math.max(data.first_step, Math.floor(view.x0)), xb = Math.min(data.last_step + 1, Math.ceil(view.x1));
    var cw = sx(1) - sx(0);
    // regions (a lasso's loop)
    data.regions.forEach(function (r) {
      ctx.fillStyle = "#fff2b3";
      ctx.fillRect(sx(r.start - 0.5), bandTop, sx(r.end + 0.5) - sx(r.start - 0.5), H - bandTop - G.bottom);
      ctx.fillStyle = "#665500"; ctx.fillText(r.label, Math.max(G.left, sx(r.start - 0.5)) + 2, G.top + 10);
    });
    // ---- band ----
    ctx.save();
    ctx.beginPath(); ctx.rect(G.left, bandTop - 14, W - G.left - G.right, bandH + stripH + 14); ctx.clip();
    steps.forEach(function (s) {
      if (s.step < xa - 1 || s.step > xb + 1) return;
      var x = sx(s.step - 0.5);
      if (s.throttle) { ctx.fillStyle = "#dddddd"; ctx.fillRect(x, bandTop, cw, bandH); }
      s.batch.forEach(function (a, i) {
        ctx.fillStyle = acolor(a); ctx.fillRect(x, bandY(i + 1), Math.max(cw, 0.5), bandY(i) - bandY(i + 1));
        drawn.blocks++;
      });
      var k = s.batch.length;
      s.running.forEach(function (a) {
        if (s.batch.indexOf(a) >= 0) return;
        ctx.strokeStyle = acolor(a); ctx.lineWidth = 1.2;
        ctx.strokeRect(x + 1, bandY(k + 1) + 1, Math.max(cw - 2, 0.5), bandY(k) - bandY(k + 1) - 2);
        k++; drawn.blocks++;
      });
      s.victims.forEach(function (a) {
        ctx.fillStyle = acolor(a);
        ctx.fillRect(x, bandTop + bandH + 3, Math.max(cw, 0.5), stripH - 5);
      });
    });
    ctx.strokeStyle = "#000"; ctx.setLineDash([5, 4]); ctx.lineWidth = 1;
    ctx.beginPath(); ctx.moveTo(G.left, bandY(data.max_loras)); ctx.lineTo(W - G.right, bandY(data.max_loras)); ctx.stroke();
    ctx.setLineDash([]);
    ctx.restore();
    ctx.fillStyle = "#000";
    ctx.fillText("adapters in batch", 4, bandTop + bandH - 4);
    ctx.fillText("max_loras " + data.max_loras, 4, bandY(data.max_loras) + 4);
    if (hasVictims) ctx.fillText("victim held for r*", 4, bandTop + bandH + 13);
    // ---- x axis ----
    var tick = niceStep(view.x1 - view.x0, W - G.left - G.right);
    ctx.fillStyle = "#444"; ctx.strokeStyle = "#ddd"; ctx.lineWidth = 1;
    for (var t = Math.ceil(view.x0 / tick) * tick; t <= view.x1; t += tick) {
      var px = sx(t);
      ctx.beginPath(); ctx.moveTo(px, tlTop - 4); ctx.lineTo(px, H - G.bottom); ctx.stroke();
      ctx.fillText(String(t), px - 6, tlTop - 6);
    }
    ctx.fillText("step", W - G.right - 26, H - 6);
    // ---- rows ----
    var rh = rowH();
    var ra = Math.max(0, Math.floor(view.y0)), rb = Math.min(rows.length, Math.ceil(view.y1));
    ctx.save();
    ctx.beginPath(); ctx.rect(G.left, tlTop, W - G.left - G.right, H - tlTop - G.bottom); ctx.clip();
    var pad = rh > 4 ? rh * 0.1 : 0;
    for (var i = ra; i < rb; i++) {
      var row = rows[i], y = sy(i);
      row.segments.forEach(function (sg) {
        if (sg.end < view.x0 - 1 || sg.start > view.x1 + 1) return;
        var x0 = sx(sg.start - 0.5), w = Math.max(sx(sg.end + 0.5) - x0, 0.6);
        if (sg.kind === "idle") {
          ctx.strokeStyle = acolor(row.adapter); ctx.lineWidth = 1;
          ctx.strokeRect(x0 + 0.5, y + pad + 0.5, w - 1, Math.max(rh - 2 * pad - 1, 0.5));
        } else {
          ctx.fillStyle = color(row.adapter, sg.kind); ctx.fillRect(x0, y + pad, w, Math.max(rh - 2 * pad, 0.6));
        }
        drawn.segments++;
      });
      row.marks.forEach(function (m) {
        if (m.step < view.x0 - 1 || m.step > view.x1 + 1) return;
        var cx = sx(m.kind === "finished" ? m.step + 0.5 : m.step), cy = y + rh / 2, r = Math.max(2, Math.min(6, rh * 0.35));
        if (m.kind === "violation") {
          ctx.strokeStyle = data.violation_color; ctx.lineWidth = 1.5;
          ctx.beginPath(); ctx.arc(cx, cy, r + 1, 0, 2 * Math.PI); ctx.stroke();
        } else if (m.kind === "finished") {
          ctx.fillStyle = "#000"; ctx.fillRect(cx - 1, y + pad, 2, Math.max(rh - 2 * pad, 1));
        } else if (m.kind === "aborted") {
          ctx.strokeStyle = "#000"; ctx.lineWidth = 1.5; ctx.beginPath();
          ctx.moveTo(cx - r, cy - r); ctx.lineTo(cx + r, cy + r); ctx.moveTo(cx - r, cy + r); ctx.lineTo(cx + r, cy - r);
          ctx.stroke();
        } else if (m.kind === "preempted") {
          ctx.fillStyle = "#000"; ctx.beginPath();
          ctx.moveTo(cx - r, cy - r); ctx.lineTo(cx + r, cy - r); ctx.lineTo(cx, cy + r); ctx.fill();
        }
        drawn.marks++;
      });
    }
    var rowOf = {};
    rows.forEach(function (r, i) { rowOf[r.id] = i; });
    data.star_spans.forEach(function (sp) {
      var i = rowOf[sp[0]], y = sy(i);
      if (i < ra || i >= rb) return;
      ctx.strokeStyle = "#000"; ctx.lineWidth = 1.5;
      ctx.strokeRect(sx(sp[1] - 0.5), y, sx(sp[2] + 0.5) - sx(sp[1] - 0.5), rh);
      ctx.fillStyle = "#000"; ctx.font = Math.max(8, Math.min(16, rh)) + "px sans-serif";
      ctx.fillText("\u2605", sx(sp[1]) - 5, y + rh / 2 + 5);
      ctx.font = "11px sans-serif";
    });
    ctx.restore();
    // violations: a line through band and rows, the property's name above
    var named = {}, nNamed = 0;
    data.violations.forEach(function (v) {
      if (v.step < view.x0 || v.step > view.x1) return;
      var px = sx(v.step);
      ctx.strokeStyle = data.violation_color; ctx.globalAlpha = 0.6; ctx.lineWidth = 1;
      ctx.beginPath(); ctx.moveTo(px, bandTop); ctx.lineTo(px, H - G.bottom); ctx.stroke(); ctx.globalAlpha = 1;
      if (!named[v.property]) {
        named[v.property] = 1;
        ctx.fillStyle = data.violation_color;
        ctx.fillText(v.property + " (step " + v.step + ")", px + 3, bandTop + 10 + 12 * nNamed++);
      }
    });
    // row labels
    ctx.save();
    ctx.beginPath(); ctx.rect(0, tlTop, G.left, H - tlTop - G.bottom); ctx.clip();
    if (rh >= 9) {
      ctx.font = Math.min(12, rh - 1) + "px sans-serif";
      for (var j = ra; j < rb; j++) {
        ctx.fillStyle = acolor(rows[j].adapter);
        ctx.fillText(rows[j].id, 4, sy(j) + rh / 2 + 4);
      }
    } else {
      var start = 0;
      for (var g = 1; g <= rows.length; g++) {
        if (g === rows.length || rows[g].adapter !== rows[start].adapter) {
          var a = rows[start].adapter, mid = sy((start + g) / 2);
          ctx.fillStyle = acolor(a);
          ctx.fillText((a === 0 ? "base" : "adapter " + a) + " (" + (g - start) + ")", 4, mid + 4);
          ctx.strokeStyle = "#ccc"; ctx.beginPath(); ctx.moveTo(0, sy(start)); ctx.lineTo(W, sy(start)); ctx.stroke();
          start = g;
        }
      }
    }
    ctx.restore();
    return drawn;
  }

  var KIND_TEXT = data.kind_labels;
  function describeRow(i, step) {
    var r = rows[i];
    var lines = [r.id + " \u00b7 " + (r.adapter === 0 ? "base model (adapter 0)" : "adapter " + r.adapter)];
    lines.push("tokens: prompt " + r.prompt_tokens + ", max_tokens " + r.max_tokens +
      (r.priority ? ", priority " + r.priority : "") + "; arrived at step " + r.arrival);
    lines.push(r.first_admitted === null ? "never admitted: waited " + r.wait + " steps"
      : "first admitted at step " + r.first_admitted + ": wait " + r.wait + " steps");
    var seg = null;
    r.segments.forEach(function (sg) { if (sg.start <= step && step <= sg.end) seg = sg; });
    if (seg && stepIndex[step] !== undefined) {
      var what = KIND_TEXT[seg.kind];
      if (seg.kind === "prefill") what += ", " + seg.tokens[stepIndex[step] - stepIndex[seg.start]] + " tokens";
      if (seg.kind === "decode") what += ", 1 token";
      lines.push("step " + step + ": " + what);
      var tot = seg.kind === "decode" ? seg.steps : seg.tokens.reduce(function (a, b) { return a + b; }, 0);
      lines.push("this " + seg.kind + " run: steps " + seg.start + "\u2013" + seg.end +
        (seg.kind === "prefill" || seg.kind === "decode" ? ", " + tot + " tokens" : ""));
    } else {
      lines.push("step " + step + ": not present");
    }
    if (starAt[step] === r.id) lines.push("r* (fair's starving request) at this step");
    r.marks.forEach(function (m) {
      if (m.step === step && m.kind !== "violation") lines.push(m.kind + " at step " + step);
    });
    (violAt[step] || []).forEach(function (v) {
      if (v.requests.indexOf(r.id) >= 0) lines.push("VIOLATED " + v.property + ": " + v.message);
    });
    if (r.outcome) lines.push("outcome: " + r.outcome);
    return lines;
  }
  function describeStep(step) {
    var s = byStep[step];
    if (!s) return ["step " + step + ": no step line"];
    var lines = ["step " + step + ": " + s.scheduled + " requests scheduled, " + s.tokens + " tokens",
      "adapters in batch: [" + s.batch.join(", ") + "] (max_loras " + data.max_loras + ")",
      "adapters running: [" + s.running.join(", ") + "]"];
    if (s.throttle) lines.push("prefill throttled (DP)");
    if (s.star) lines.push("r* = " + s.star + (s.victims.length ? ", victim adapter(s) held: [" + s.victims.join(", ") + "]" : ""));
    (violAt[step] || []).forEach(function (v) { lines.push("VIOLATED " + v.property + ": " + v.message); });
    return lines;
  }
  function hover(px, py) {
    var step = Math.round(xstep(px)), lines = null;
    if (px >= G.left && py >= tlTop && py < H - G.bottom) {
      var i = Math.floor(yrow(py));
      if (i >= 0 && i < rows.length) lines = describeRow(i, step);
    } else if (px >= G.left && py >= bandTop - 14 && py < tlTop) {
      lines = describeStep(step);
    }
    if (!lines) { tip.style.display = "none"; return ""; }
    tip.textContent = "";
    lines.forEach(function (l, k) {
      var d = document.createElement("div"); d.textContent = l; if (k === 0) d.style.fontWeight = "bold"; tip.appendChild(d);
    });
    tip.style.display = "block";
    tip.style.left = Math.min(px + 14, W - 330) + "px";
    tip.style.top = (py + 14) + "px";
    return lines.join("\n");
  }
  function zoom(px, py, factor, rowsToo) {
    if (rowsToo) {
      var r = yrow(py), nh = Math.max(3, (view.y1 - view.y0) * factor);
      view.y0 = Math.max(0, r - (r - view.y0) * nh / (view.y1 - view.y0)); view.y1 = view.y0 + nh;
    } else {
      var s = xstep(px), nw = Math.max(1.5, (view.x1 - view.x0) * factor);
      view.x0 = s - (s - view.x0) * nw / (view.x1 - view.x0); view.x1 = view.x0 + nw;
    }
    draw();
  }
  function local(ev) { var b = canvas.getBoundingClientRect(); return [ev.clientX - b.left, ev.clientY - b.top]; }
  var dragging = null;
  canvas.addEventListener("wheel", function (ev) {
    ev.preventDefault();
    var p = local(ev);
    zoom(p[0], p[1], Math.exp(ev.deltaY * 0.0015), ev.shiftKey);
    hover(p[0], p[1]);
  }, { passive: false });
  canvas.addEventListener("mousedown", function (ev) { dragging = { p: local(ev), v: Object.assign({}, view) }; });
  window.addEventListener("mouseup", function () { dragging = null; });
  canvas.addEventListener("mousemove", function (ev) {
    var p = local(ev);
    if (dragging) {
      var dx = (p[0] - dragging.p[0]) / (W - G.left - G.right) * (dragging.v.x1 - dragging.v.x0);
      var dy = (p[1] - dragging.p[1]) / (H - tlTop - G.bottom) * (dragging.v.y1 - dragging.v.y0);
      view.x0 = dragging.v.x0 - dx; view.x1 = dragging.v.x1 - dx;
      var h = dragging.v.y1 - dragging.v.y0;
      view.y0 = Math.min(Math.max(0, dragging.v.y0 - dy), Math.max(0, rows.length - h)); view.y1 = view.y0 + h;
      draw();
    }
    hover(p[0], p[1]);
  });
  canvas.addEventListener("mouseleave", function () { tip.style.display = "none"; });
  canvas.addEventListener("dblclick", function () { reset(); draw(); });
  document.getElementById("zoom-in").addEventListener("click", function () { zoom(W / 2, 0, 0.5, false); });
  document.getElementById("zoom-out").addEventListener("click", function () { zoom(W / 2, 0, 2, false); });
  document.getElementById("zoom-rows").addEventListener("click", function () { zoom(W / 2, tlTop, 0.5, true); });
  document.getElementById("reset").addEventListener("click", function () { reset(); draw(); });
  window.addEventListener("resize", function () { layoutGeometry(); draw(); });

  layoutGeometry();
  reset();
  var first = draw();
  status.setAttribute("data-rows", String(rows.length));
  status.setAttribute("data-segments", String(first.segments));
  status.setAttribute("data-marks", String(first.marks));
  status.setAttribute("data-blocks", String(first.blocks));
  status.setAttribute("data-ready", "1");

  if (location.hash === "#selftest") {
    // Hover the middle of the first running segment, zoom in there, hover again.
    var target = null;
    rows.some(function (r, i) {
      return r.segments.some(function (sg) {
        if (sg.kind === "prefill" || sg.kind === "decode") { target = { i: i, step: sg.start, id: r.id }; return true; }
        return false;
      });
    });
    if (target) {
      var b = canvas.getBoundingClientRect();
      var px = sx(target.step), py = sy(target.i) + rowH() / 2;
      var opts = { clientX: b.left + px, clientY: b.top + py, bubbles: true };
      canvas.dispatchEvent(new MouseEvent("mousemove", opts));
      status.setAttribute("data-target", target.id);
      status.setAttribute("data-hover", tip.textContent ? Array.prototype.map.call(tip.children,
        function (d) { return d.textContent; }).join(" | ") : "");
      var before = view.x1 - view.x0;
      canvas.dispatchEvent(new WheelEvent("wheel", { clientX: opts.clientX, clientY: opts.clientY, deltaY: -400,
        bubbles: true, cancelable: true }));
      status.setAttribute("data-zoomed", String(view.x1 - view.x0 < before));
      status.setAttribute("data-hover-zoomed", Array.prototype.map.call(tip.children,
        function (d) { return d.textContent; }).join(" | "));
      canvas.dispatchEvent(new MouseEvent("mousemove", { clientX: b.left + 2, clientY: b.top + bandTop + 5 }));
      canvas.dispatchEvent(new MouseEvent("mousemove", { clientX: b.left + sx(target.step), clientY: b.top + bandTop + 20 }));
      status.setAttribute("data-hover-band", Array.prototype.map.call(tip.children,
        function (d) { return d.textContent; }).join(" | "));
    }
    status.setAttribute("data-selftest", "1");
  }
})();
