// hicache report page: a tooltip over each chart that names every line's value at the
// nearest time, read from the points' <title>s (text only: nothing from the page becomes markup).
(function () {
  "use strict";
  var tip = document.getElementById("tip");
  if (!tip) { return; }

  function model(svg) {
    if (svg.hicache) { return svg.hicache; }
    var series = Array.prototype.map.call(svg.querySelectorAll("g.series"), function (g) {
      var dots = Array.prototype.slice.call(g.querySelectorAll("circle"));
      return { dots: dots, xs: dots.map(function (c) { return +c.getAttribute("cx"); }) };
    });
    var all = [];
    series.forEach(function (s) { all = all.concat(s.xs); });
    all.sort(function (a, b) { return a - b; });
    all = all.filter(function (x, i) { return i === 0 || x !== all[i - 1]; });
    svg.hicache = { series: series, xs: all, at: -1, hot: [] };
    return svg.hicache;
  }

  function nearest(xs, x) {
    var lo = 0, hi = xs.length - 1;
    if (hi < 0) { return -1; }
    while (lo < hi) {
      var mid = (lo + hi) >> 1;
      if (xs[mid] < x) { lo = mid + 1; } else { hi = mid; }
    }
    return lo > 0 && x - xs[lo - 1] < xs[lo] - x ? lo - 1 : lo;
  }

  function show(svg, x, clientX, clientY) {
    var m = model(svg), lines = [];
    m.hot.forEach(function (c) { c.classList.remove("hot"); });
    m.hot = [];
    m.series.forEach(function (s) {
      var i = nearest(s.xs, x);
      if (i < 0 || Math.abs(s.xs[i] - x) > 30) { return; }
      var dot = s.dots[i], title = dot.querySelector("title");
      dot.classList.add("hot");
      m.hot.push(dot);
      if (title) { lines.push(title.textContent); }
    });
    var guide = svg.querySelector(".guide");
    if (!lines.length) { hide(svg); return; }
    guide.setAttribute("x1", x);
    guide.setAttribute("x2", x);
    guide.setAttribute("visibility", "visible");
    tip.textContent = lines.join("\n");
    tip.hidden = false;
    var box = tip.getBoundingClientRect();
    var left = clientX + 14 + box.width > window.innerWidth ? clientX - 14 - box.width : clientX + 14;
    tip.style.left = Math.max(4, left + window.scrollX) + "px";
    tip.style.top = Math.max(4, clientY + window.scrollY - box.height - 10) + "px";
  }

  function hide(svg) {
    var m = model(svg);
    m.hot.forEach(function (c) { c.classList.remove("hot"); });
    m.hot = [];
    svg.querySelector(".guide").setAttribute("visibility", "hidden");
    tip.hidden = true;
  }

  function toView(svg, clientX) {
    var pt = svg.createSVGPoint();
    pt.x = clientX;
    pt.y = 0;
    return pt.matrixTransform(svg.getScreenCTM().inverse()).x;
  }

  Array.prototype.forEach.call(document.querySelectorAll("svg.plot"), function (svg) {
    svg.addEventListener("pointermove", function (e) { show(svg, toView(svg, e.clientX), e.clientX, e.clientY); });
    svg.addEventListener("pointerleave", function () { hide(svg); });
    svg.addEventListener("blur", function () { hide(svg); });
    svg.addEventListener("keydown", function (e) {
      var m = model(svg), step = { ArrowRight: 1, ArrowLeft: -1 }[e.key];
      if (!step || !m.xs.length) { return; }
      e.preventDefault();
      var x = m.at < 0 ? m.xs[0] : m.xs[Math.min(m.xs.length - 1, Math.max(0, m.at + step))];
      m.at = m.xs.indexOf(x);
      var r = svg.getBoundingClientRect(), ctm = svg.getScreenCTM();
      show(svg, x, ctm.a * x + ctm.e, r.top + 20);
    });
  });
  document.addEventListener("keydown", function (e) { if (e.key === "Escape") { tip.hidden = true; } });
})();
