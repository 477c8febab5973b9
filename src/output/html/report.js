// spanprof's HTML report: charts as inline SVG from the JSON blob `spanprof-data`, sorting and
// filtering for the table. No library, nothing fetched. User strings (span names, targets) are
// only ever set as text (textContent, createTextNode), never parsed as HTML.
(function () {
  "use strict";
  document.documentElement.classList.add("js");
  var data = JSON.parse(document.getElementById("spanprof-data").textContent);
  var NS = "http://www.w3.org/2000/svg";
  var PALETTE = ["#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f", "#edc948", "#b07aa1",
    "#ff9da7", "#9c755f", "#bab0ac"];
  var TOP_BARS = 20, TOP_CURVES = 5, TOP_INSTANCES = 15;

  function el(tag, attrs, text) {
    var e = document.createElement(tag);
    for (var k in attrs || {}) e.setAttribute(k, attrs[k]);
    if (text !== undefined) e.textContent = text;
    return e;
  }
  function svgEl(tag, attrs, text) {
    var e = document.createElementNS(NS, tag);
    for (var k in attrs || {}) e.setAttribute(k, attrs[k]);
    if (text !== undefined) e.textContent = text;
    return e;
  }
  function tooltip(node, text) { node.appendChild(svgEl("title", {}, text)); return node; }

  // Three significant digits, as the console report prints them.
  function sig3(v) {
    var a = Math.abs(v);
    return a >= 100 ? v.toFixed(0) : a >= 10 ? v.toFixed(1) : v.toFixed(2);
  }
  function scaled(v, units, limit, compact) {
    var i = 0;
    while (i + 1 < units.length && Math.abs(v) / units[i][1] >= limit) i++;
    if (i > 0 && Math.abs(+sig3(v / units[i][1])) >= limit && i + 1 < units.length) i++;
    var x = v / units[i][1];
    var s = i === 0 ? String(Math.round(x)) : sig3(x);
    if (compact && s.indexOf(".") >= 0) s = s.replace(/\.?0+$/, "");
    return s + " " + units[i][0];
  }
  var TIME = [["ns", 1], ["µs", 1e3], ["ms", 1e6], ["s", 1e9], ["min", 60e9], ["h", 3600e9], ["d", 86400e9]];
  var BYTES = [["B", 1], ["KiB", 1024], ["MiB", 1048576], ["GiB", 1073741824], ["TiB", 1099511627776]];
  function fmtTime(ns, compact) { return scaled(ns, TIME, 1000, compact); }
  function fmtBytes(b, compact) { return scaled(b, BYTES, 1024, compact); }
  function fmtUnit(v, unit) {
    if (unit === "bytes") return fmtBytes(v, true);
    var s = Math.abs(v) >= 1000 ? v.toFixed(0) : +(+v.toPrecision(3)).toFixed(3) + "";
    return unit === "%" ? s + "%" : s + " " + unit;
  }

  // Round tick values covering [lo, hi].
  function niceTicks(lo, hi, count) {
    if (!(hi > lo)) hi = lo + 1;
    var step = Math.pow(10, Math.floor(Math.log10((hi - lo) / count)));
    var err = (hi - lo) / count / step;
    if (err >= 7.5) step *= 10; else if (err >= 3.5) step *= 5; else if (err >= 1.5) step *= 2;
    var ticks = [];
    for (var t = Math.ceil(lo / step) * step; t <= hi + step * 1e-9; t += step) ticks.push(+t.toPrecision(12));
    return ticks;
  }

  function widthOf(node, fallback) { return Math.max(node.clientWidth || 0, 0) || fallback; }

  // Axes: a bottom axis and a left axis with ticks, grid lines and titles (units included).
  function axes(svg, box, xTicks, yTicks, xTitle, yTitle) {
    var grid = svgEl("g", { "class": "grid" }), ax = svgEl("g", { "class": "axis" });
    yTicks.forEach(function (t) {
      grid.appendChild(svgEl("line", { x1: box.x, x2: box.x + box.w, y1: t.pos, y2: t.pos }));
      ax.appendChild(svgEl("text", { x: box.x - 6, y: t.pos + 4, "text-anchor": "end" }, t.label));
    });
    xTicks.forEach(function (t) {
      grid.appendChild(svgEl("line", { x1: t.pos, x2: t.pos, y1: box.y, y2: box.y + box.h }));
      ax.appendChild(svgEl("text", { x: t.pos, y: box.y + box.h + 16, "text-anchor": "middle" }, t.label));
    });
    ax.appendChild(svgEl("line", { x1: box.x, x2: box.x + box.w, y1: box.y + box.h, y2: box.y + box.h }));
    ax.appendChild(svgEl("line", { x1: box.x, x2: box.x, y1: box.y, y2: box.y + box.h }));
    ax.appendChild(svgEl("text", { "class": "axis-title x-title", x: box.x + box.w / 2, y: box.y + box.h + 36,
      "text-anchor": "middle" }, xTitle));
    if (yTitle) {
      var cy = box.y + box.h / 2;
      ax.appendChild(svgEl("text", { "class": "axis-title y-title", x: 14, y: cy, "text-anchor": "middle",
        transform: "rotate(-90 14 " + cy + ")" }, yTitle));
    }
    svg.appendChild(grid);
    svg.appendChild(ax);
  }

  function legend(items) {
    var box = el("div", { "class": "legend" });
    items.forEach(function (it) {
      var item = el("span", { "class": "item" });
      item.appendChild(el("span", { "class": "swatch", style: "background:" + it.color }));
      item.appendChild(document.createTextNode(it.text));
      box.appendChild(item);
    });
    return box;
  }

  function calls(n) { return n + (n === 1 ? " call" : " calls"); }
  function truncate(s, n) { return s.length <= n ? s : s.slice(0, n - 1) + "…"; }

  // Decades of nanoseconds covering [lo, hi], for log time axes.
  function decades(lo, hi) {
    var a = Math.floor(Math.log10(Math.max(lo, 1))), b = Math.ceil(Math.log10(Math.max(hi, 1)));
    if (b <= a) b = a + 1;
    var out = [];
    for (var d = a; d <= b; d++) out.push(Math.pow(10, d));
    return out;
  }

  // The first `top` of `items` drawn into a holder in `node`, the rest behind a button ("Show
  // all N" + `what`): `draw(holder, shown)` draws them, at first and at each click.
  function topOrAll(node, items, top, what, draw) {
    var showAll = false;
    var holder = el("div");
    node.appendChild(holder);
    var button = el("button", { type: "button" });
    if (items.length > top) {
      var controls = el("div", { "class": "controls" });
      controls.appendChild(button);
      node.appendChild(controls);
    }
    function redraw() {
      holder.textContent = "";
      button.textContent = showAll ? "Show the top " + top : "Show all " + items.length + what;
      draw(holder, showAll ? items : items.slice(0, top));
    }
    button.addEventListener("click", function () { showAll = !showAll; redraw(); });
    redraw();
  }

  // --- Self time: horizontal bars, the top ones first, the rest behind a button.
  function selfTimeChart(node) {
    var spans = data.spans.filter(function (s) { return s.calls > 0 || s.self_ns > 0; });
    topOrAll(node, spans, TOP_BARS, " span names", function (holder, shown) {
      var width = widthOf(node, 1300), labelW = Math.min(300, Math.max(160, width * 0.22)), rowH = 22;
      var box = { x: labelW + 8, y: 8, w: width - labelW - 8 - 150, h: Math.max(rowH * shown.length, rowH) };
      var svg = svgEl("svg", { width: width, height: box.h + 52, "class": "bars", role: "img",
        "aria-label": "self time by span name" });
      var max = Math.max.apply(null, shown.map(function (s) { return s.self_ns; }).concat([1]));
      var ticks = niceTicks(0, max, 6).map(function (t) {
        return { pos: box.x + box.w * t / max, label: fmtTime(t, true) };
      }).filter(function (t) { return t.pos <= box.x + box.w + 0.5; });
      axes(svg, box, ticks, [], "self time, total over all calls", null);
      shown.forEach(function (s, i) {
        var y = box.y + i * rowH;
        var w = Math.max(box.w * s.self_ns / max, 1);
        var label = svgEl("text", { x: labelW, y: y + rowH / 2 + 4, "text-anchor": "end", "class": "bar-label" },
          truncate(s.label, 42));
        tooltip(label, s.label + " (" + s.target + ")");
        svg.appendChild(label);
        var bar = svgEl("rect", { "class": "bar", x: box.x, y: y + 3, width: w, height: rowH - 6,
          "data-name": s.label, "data-self-ns": s.self_ns });
        // The figures as the table prints them (≈ where the back-off sampled the name).
        tooltip(bar, s.label + ": " + s.self_shown + " self, " + s.self_pct_shown + " of all self time, " +
          calls(s.calls) + (s.estimate ? " (sampled by the back-off: totals estimated)" : ""));
        svg.appendChild(bar);
        svg.appendChild(svgEl("text", { "class": "value", x: box.x + w + 6, y: y + rowH / 2 + 4 },
          s.self_shown + "  " + s.self_pct_shown));
      });
      holder.appendChild(svg);
    });
  }

  // --- Latency per call: percentile curves on a nines scale, log time axis, a chooser.
  var NINES_TICKS = [[0, "0"], [Math.log10(2), "50"], [Math.log10(5), "80"], [1, "90"], [Math.log10(20), "95"],
    [2, "99"], [Math.log10(200), "99.5"], [3, "99.9"], [Math.log10(2000), "99.95"], [4, "99.99"]];
  function latencyChart(node) {
    var spans = data.spans.filter(function (s) { return s.curve.length > 0; });
    var color = {};
    spans.forEach(function (s, i) { color[s.label] = PALETTE[i % PALETTE.length]; });
    var chosen = {};
    spans.slice(0, TOP_CURVES).forEach(function (s) { chosen[s.label] = true; });

    var wrap = el("div", { "class": "latency" });
    var plot = el("div", { "class": "plot", style: "flex:1;min-width:0" });
    var chooser = el("div", { "class": "chooser" });
    var search = el("input", { type: "search", placeholder: "find a span name", "aria-label": "find a span name" });
    var buttons = el("div", { "class": "controls" });
    var topButton = el("button", { type: "button" }, "Top " + TOP_CURVES);
    var clearButton = el("button", { type: "button" }, "Clear");
    buttons.appendChild(topButton);
    buttons.appendChild(clearButton);
    var list = el("ul");
    chooser.appendChild(search);
    chooser.appendChild(buttons);
    chooser.appendChild(list);
    wrap.appendChild(plot);
    wrap.appendChild(chooser);
    node.appendChild(wrap);

    var boxes = [];
    spans.forEach(function (s) {
      var li = el("li", { title: s.label + " (" + s.target + "), " + calls(s.calls) });
      var label = el("label");
      var box = el("input", { type: "checkbox", value: s.label });
      box.checked = !!chosen[s.label];
      box.addEventListener("change", function () { chosen[s.label] = box.checked; draw(); });
      label.appendChild(box);
      label.appendChild(el("span", { "class": "swatch", style: "background:" + color[s.label] }));
      label.appendChild(document.createTextNode(s.label));
      li.appendChild(label);
      list.appendChild(li);
      boxes.push({ span: s, box: box, li: li });
    });
    search.addEventListener("input", function () {
      var q = search.value.toLowerCase();
      boxes.forEach(function (b) {
        b.li.style.display = (b.span.label + " " + b.span.target).toLowerCase().indexOf(q) >= 0 ? "" : "none";
      });
    });
    function setChosen(labels) {
      chosen = {};
      labels.forEach(function (l) { chosen[l] = true; });
      boxes.forEach(function (b) { b.box.checked = !!chosen[b.span.label]; });
      draw();
    }
    topButton.addEventListener("click", function () {
      setChosen(spans.slice(0, TOP_CURVES).map(function (s) { return s.label; }));
    });
    clearButton.addEventListener("click", function () { setChosen([]); });

    function draw() {
      plot.textContent = "";
      var shown = spans.filter(function (s) { return chosen[s.label]; });
      var width = widthOf(plot, 1000), height = 380;
      var box = { x: 72, y: 10, w: width - 72 - 24, h: height - 60 };
      var svg = svgEl("svg", { width: width, height: height, "class": "percentiles", role: "img",
        "aria-label": "latency percentiles per span name" });
      var lo = Infinity, hi = 0, maxX = 1;
      shown.forEach(function (s) {
        s.curve.forEach(function (p) { lo = Math.min(lo, Math.max(p[1], 1)); hi = Math.max(hi, p[1]); maxX = Math.max(maxX, p[0]); });
      });
      if (!shown.length) { lo = 1e3; hi = 1e6; }
      maxX = Math.min(4, maxX);
      var ds = decades(lo, hi), yLo = Math.log10(ds[0]), yHi = Math.log10(ds[ds.length - 1]);
      function X(n) { return box.x + box.w * n / maxX; }
      function Y(ns) { return box.y + box.h * (1 - (Math.log10(Math.max(ns, 1)) - yLo) / (yHi - yLo)); }
      var xTicks = NINES_TICKS.filter(function (t) { return t[0] <= maxX + 1e-9; }).map(function (t) {
        return { pos: X(t[0]), label: t[1] };
      });
      var yTicks = ds.map(function (d) { return { pos: Y(d), label: fmtTime(d, true) }; });
      axes(svg, box, xTicks, yTicks, "percentile (%), nines scale", "busy time per call (log scale)");
      shown.forEach(function (s) {
        var d = s.curve.map(function (p, i) { return (i ? "L" : "M") + X(p[0]).toFixed(1) + "," + Y(p[1]).toFixed(1); }).join("");
        var path = svgEl("path", { d: d, fill: "none", stroke: color[s.label], "stroke-width": 2,
          "class": "curve", "data-name": s.label });
        tooltip(path, s.label);
        svg.appendChild(path);
        var last = s.curve[s.curve.length - 1];
        var dot = svgEl("circle", { cx: X(last[0]), cy: Y(last[1]), r: 3.5, fill: color[s.label], "class": "max-dot" });
        tooltip(dot, s.label + ": max " + fmtTime(last[1]) + " (" + calls(s.calls) + ")");
        svg.appendChild(dot);
      });
      if (!shown.length) {
        svg.appendChild(svgEl("text", { x: box.x + box.w / 2, y: box.y + box.h / 2, "text-anchor": "middle",
          "class": "axis-title" }, "Pick span names on the right"));
      }
      plot.appendChild(svg);
      plot.appendChild(legend(shown.map(function (s) {
        var p99 = s.curve.filter(function (p) { return Math.abs(p[0] - 2) < 1e-6; })[0];
        return { color: color[s.label], text: s.label + " (" + calls(s.calls) +
          (p99 ? ", p99 " + fmtTime(p99[1]) : "") + ", max " + fmtTime(s.curve[s.curve.length - 1][1]) + ")" };
      })));
    }
    draw();
  }

  // --- Latency per instance: wall and busy ranges (p50 to max, marks at p90 and p99).
  function instancesChart(node) {
    var spans = data.spans.filter(function (s) { return s.instance; });
    var kinds = [["wall", "#4e79a7"], ["busy", "#f28e2b"]];
    topOrAll(node, spans, TOP_INSTANCES, "", function (holder, shown) {
      var width = widthOf(node, 1300), labelW = Math.min(300, Math.max(160, width * 0.22)), rowH = 34;
      var box = { x: labelW + 8, y: 8, w: width - labelW - 8 - 40, h: rowH * shown.length };
      var svg = svgEl("svg", { width: width, height: box.h + 52, "class": "instances", role: "img",
        "aria-label": "latency per instance" });
      var lo = Infinity, hi = 0;
      shown.forEach(function (s) {
        kinds.forEach(function (k) { s.instance[k[0]].forEach(function (v) { lo = Math.min(lo, Math.max(v, 1)); hi = Math.max(hi, v); }); });
      });
      var ds = decades(lo, hi), a = Math.log10(ds[0]), b = Math.log10(ds[ds.length - 1]);
      function X(ns) { return box.x + box.w * (Math.log10(Math.max(ns, 1)) - a) / (b - a); }
      axes(svg, box, ds.map(function (d) { return { pos: X(d), label: fmtTime(d, true) }; }), [],
        "time per instance (log scale)", null);
      shown.forEach(function (s, i) {
        var y0 = box.y + i * rowH;
        var label = svgEl("text", { x: labelW, y: y0 + rowH / 2 + 4, "text-anchor": "end" }, truncate(s.label, 42));
        tooltip(label, s.label + " (" + s.target + "), " + s.instance.instances + " instances");
        svg.appendChild(label);
        kinds.forEach(function (k, j) {
          var q = s.instance[k[0]], y = y0 + 9 + j * 14;
          var g = svgEl("g", { "class": "range " + k[0], "data-name": s.label });
          tooltip(g, s.label + " " + k[0] + " per instance: p50 " + fmtTime(q[0]) + ", p90 " + fmtTime(q[1]) +
            ", p99 " + fmtTime(q[2]) + ", max " + fmtTime(q[3]) + " (" + s.instance.instances + " instances)");
          g.appendChild(svgEl("line", { x1: X(q[0]), x2: X(q[3]), y1: y, y2: y, stroke: k[1], "stroke-width": 2 }));
          g.appendChild(svgEl("line", { x1: X(q[3]), x2: X(q[3]), y1: y - 5, y2: y + 5, stroke: k[1], "stroke-width": 2 }));
          g.appendChild(svgEl("circle", { cx: X(q[0]), cy: y, r: 4.5, fill: k[1] }));
          g.appendChild(svgEl("circle", { cx: X(q[1]), cy: y, r: 3.5, fill: "#fff", stroke: k[1], "stroke-width": 2 }));
          g.appendChild(svgEl("rect", { x: X(q[2]) - 3, y: y - 3, width: 6, height: 6, fill: "#fff", stroke: k[1], "stroke-width": 2 }));
          svg.appendChild(g);
        });
      });
      holder.appendChild(svg);
      holder.appendChild(legend([
        { color: kinds[0][1], text: "wall: creation to close" },
        { color: kinds[1][1], text: "busy: sum of its calls" },
        { color: "#8c959f", text: "● p50  ○ p90  □ p99  | max" }
      ]));
    });
  }

  // --- GPU time per call: per span name timed on the GPU, its GPU time per timed entry beside
  // its busy (CPU-side) time per entry, on one linear axis; the most GPU time first.
  function gpuChart(node) {
    var spans = data.spans.filter(function (s) { return s.gpu; }).sort(function (a, b) {
      return b.gpu.total_ns - a.gpu.total_ns;
    });
    var kinds = [["gpu", "#59a14f"], ["busy", "#4e79a7"]];
    topOrAll(node, spans, TOP_BARS, "", function (holder, shown) {
      var width = widthOf(node, 1300), labelW = Math.min(300, Math.max(160, width * 0.22)), rowH = 40;
      var box = { x: labelW + 8, y: 8, w: width - labelW - 8 - 260, h: rowH * shown.length };
      var svg = svgEl("svg", { width: width, height: box.h + 52, "class": "gpu", role: "img",
        "aria-label": "GPU time beside busy time per call" });
      var max = Math.max.apply(null, shown.map(function (s) {
        return Math.max(s.gpu.mean_ns, s.gpu.busy_mean_ns);
      }).concat([1]));
      var ticks = niceTicks(0, max, 6).map(function (t) {
        return { pos: box.x + box.w * t / max, label: fmtTime(t, true) };
      }).filter(function (t) { return t.pos <= box.x + box.w + 0.5; });
      axes(svg, box, ticks, [], "time per call", null);
      shown.forEach(function (s, i) {
        var g = s.gpu, y0 = box.y + i * rowH;
        var label = svgEl("text", { x: labelW, y: y0 + rowH / 2 + 4, "text-anchor": "end", "class": "bar-label" },
          truncate(s.label, 42));
        tooltip(label, s.label + " (" + s.target + ")");
        svg.appendChild(label);
        [[g.mean_ns, g.mean_shown + " GPU per timed entry (" + calls(g.calls) + ", " + g.total_shown + " in all)"],
          [g.busy_mean_ns, g.busy_mean_shown + " busy per entry (" + calls(s.calls) + ")"]].forEach(function (v, j) {
          var y = y0 + 5 + j * 15, w = Math.max(box.w * v[0] / max, 1);
          var bar = svgEl("rect", { "class": "gpu-bar " + kinds[j][0], x: box.x, y: y, width: w, height: 12,
            fill: kinds[j][1], "data-name": s.label, "data-ns": v[0] });
          tooltip(bar, s.label + ": " + v[1]);
          svg.appendChild(bar);
          svg.appendChild(svgEl("text", { "class": "value", x: box.x + w + 6, y: y + 10 },
            j === 0 ? g.mean_shown + "  " + g.busy_pct_shown + " of busy" : g.busy_mean_shown));
        });
      });
      holder.appendChild(svg);
      holder.appendChild(legend([
        { color: kinds[0][1], text: "GPU time per timed entry (CUDA events on its stream)" },
        { color: kinds[1][1], text: "busy time per entry (enter to exit, CPU side)" }
      ]));
    });
  }

  // --- Resources over time: one line chart per unit.
  function timelineCharts(node) {
    var t = data.timeline.t_s;
    var tMax = Math.max.apply(null, t.concat([1e-9]));
    data.timeline.charts.forEach(function (chart) {
      var cell = el("div", { "class": "timeline-chart" });
      cell.appendChild(el("h3", {}, chart.title));
      node.appendChild(cell);
      var width = Math.min(widthOf(cell, 640), 900), height = 230;
      var box = { x: 76, y: 8, w: width - 76 - 20, h: height - 56 };
      var svg = svgEl("svg", { width: width, height: height, "class": "timeline", role: "img", "aria-label": chart.title });
      var lo = 0, hi = 0;
      chart.series.forEach(function (s) {
        s.values.forEach(function (v) { if (v !== null) { lo = Math.min(lo, v); hi = Math.max(hi, v); } });
      });
      if (chart.unit === "%") hi = Math.max(hi, 100);
      if (hi <= lo) hi = lo + 1;
      // Bytes: round numbers of the unit the largest value is shown in (0, 2, 4 … MiB).
      var u = 1;
      if (chart.unit === "bytes") while (u < 1099511627776 && Math.max(Math.abs(lo), hi) / u >= 1024) u *= 1024;
      var yt = niceTicks(lo / u, hi * 1.05 / u, 5).map(function (v) { return v * u; });
      lo = Math.min(lo, yt[0]); hi = Math.max(hi, yt[yt.length - 1]);
      function X(s) { return box.x + box.w * s / tMax; }
      function Y(v) { return box.y + box.h * (1 - (v - lo) / (hi - lo)); }
      axes(svg, box,
        niceTicks(0, tMax, 6).filter(function (s) { return s <= tMax; }).map(function (s) { return { pos: X(s), label: +s.toPrecision(4) + " s" }; }),
        yt.map(function (v) { return { pos: Y(v), label: fmtUnit(v, chart.unit) }; }),
        "time since start (s)", chart.axis);
      chart.series.forEach(function (s, i) {
        var d = "", pen = false;
        s.values.forEach(function (v, j) {
          if (v === null) { pen = false; return; }
          d += (pen ? "L" : "M") + X(t[j]).toFixed(1) + "," + Y(v).toFixed(1);
          pen = true;
        });
        var path = svgEl("path", { d: d, fill: "none", stroke: PALETTE[i % PALETTE.length], "stroke-width": 2,
          "class": "series", "data-name": s.name });
        tooltip(path, s.name);
        svg.appendChild(path);
        s.values.forEach(function (v, j) {
          if (v !== null && s.values.length <= 60) {
            var dot = svgEl("circle", { cx: X(t[j]), cy: Y(v), r: 2.5, fill: PALETTE[i % PALETTE.length] });
            tooltip(dot, s.name + " at " + t[j].toFixed(3) + " s: " + fmtUnit(v, chart.unit));
            svg.appendChild(dot);
          }
        });
      });
      cell.appendChild(svg);
      cell.appendChild(legend(chart.series.map(function (s, i) {
        var last = null;
        s.values.forEach(function (v) { if (v !== null) last = v; });
        return { color: PALETTE[i % PALETTE.length], text: s.name + (last === null ? "" : " (last " + fmtUnit(last, chart.unit) + ")") };
      })));
    });
  }

  // --- The table: click a heading to sort, type to filter.
  function table() {
    var tableEl = document.getElementById("span-table");
    if (!tableEl) return;
    var body = tableEl.tBodies[0], heads = tableEl.tHead.rows[0].cells;
    var rows = Array.prototype.slice.call(body.rows);
    var count = document.getElementById("span-count"), filter = document.getElementById("span-filter");
    var sortCol = -1, desc = true;
    function key(row, i) {
      var c = row.cells[i];
      return c.hasAttribute("data-v") ? parseFloat(c.getAttribute("data-v")) : c.textContent.toLowerCase();
    }
    function sortBy(i) {
      var numeric = heads[i].getAttribute("data-type") === "num";
      if (sortCol === i) desc = !desc; else { sortCol = i; desc = numeric; }
      rows.sort(function (a, b) {
        var x = key(a, i), y = key(b, i);
        var r = x < y ? -1 : x > y ? 1 : 0;
        return desc ? -r : r;
      });
      rows.forEach(function (r) { body.appendChild(r); });
      for (var j = 0; j < heads.length; j++) heads[j].classList.remove("sorted-asc", "sorted-desc");
      heads[i].classList.add(desc ? "sorted-desc" : "sorted-asc");
    }
    function applyFilter() {
      var q = filter.value.toLowerCase(), n = 0;
      rows.forEach(function (r) {
        var hit = (r.cells[0].textContent + " " + r.cells[1].textContent).toLowerCase().indexOf(q) >= 0;
        r.classList.toggle("hidden", !hit);
        if (hit) n++;
      });
      count.textContent = n + " of " + rows.length + " span names";
    }
    for (var i = 0; i < heads.length; i++) {
      (function (i) { heads[i].addEventListener("click", function () { sortBy(i); }); })(i);
    }
    filter.addEventListener("input", applyFilter);
    // The initial order is by self time (column 4), the most first.
    sortCol = 4;
    heads[4].classList.add("sorted-desc");
    // A fragment (#sort=p99&filter=step) sets the initial view: links into a report.
    var params = {};
    location.hash.replace(/^#/, "").split("&").forEach(function (kv) {
      var p = kv.split("=");
      if (p[0]) params[decodeURIComponent(p[0])] = decodeURIComponent(p[1] || "");
    });
    if (params.filter !== undefined) filter.value = params.filter;
    if (params.sort) {
      for (var j = 0; j < heads.length; j++) {
        if (heads[j].textContent === params.sort) {
          sortCol = -1;
          sortBy(j);
          if ((params.order === "asc") === desc) sortBy(j);
        }
      }
    }
    applyFilter();
  }

  function run(id, draw) {
    var node = document.getElementById(id);
    if (!node) return;
    try { draw(node); } catch (e) { node.textContent = "This chart could not be drawn: " + e; }
  }
  run("chart-self", selfTimeChart);
  run("chart-latency", latencyChart);
  run("chart-instances", instancesChart);
  run("chart-gpu", gpuChart);
  if (data.timeline) run("chart-resources", timelineCharts);
  table();
})();
