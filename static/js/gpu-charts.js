// GPU metrics charts of one job (uPlot, vendored): utilisation, framebuffer and power per GPU,
// from /api/v1/jobs/ID/metrics/. Redrawn every refresh period while the job runs.
(function () {
  var root = document.querySelector("[data-gpu-metrics]");
  if (!root || typeof uPlot === "undefined") return;
  var url = root.getAttribute("data-gpu-metrics");
  var refresh = parseInt(root.getAttribute("data-refresh") || "0", 10);
  var charts = [];
  var panels = [
    { series: "util", title: "GPU utilisation (%)" },
    { series: "tensor", title: "Tensor activity (%)" },
    { series: "fb_used", title: "Framebuffer used (MiB)" },
    { series: "power", title: "Power (W)" },
  ];
  var colours = ["#2563eb", "#dc2626", "#16a34a", "#9333ea", "#ea580c", "#0891b2", "#ca8a04", "#db2777"];

  function label(device) {
    var name = device.uuid.slice(0, 12) + "…";
    if (device.mig_instance_id) name += " gi" + device.mig_instance_id + " " + device.mig_profile;
    return name + " (" + device.pod + ")";
  }

  function align(devices, key) {
    // uPlot wants one x array: merge the devices' timestamps, null where a device has no point.
    var times = {};
    devices.forEach(function (d) { d.timestamps.forEach(function (t) { times[t] = true; }); });
    var xs = Object.keys(times).map(Number).sort(function (a, b) { return a - b; });
    var data = [xs];
    devices.forEach(function (d) {
      var at = {};
      d.timestamps.forEach(function (t, i) { at[t] = d.mean[key][i]; });
      data.push(xs.map(function (t) { return t in at ? at[t] : null; }));
    });
    return data;
  }

  function draw(body) {
    var summary = document.querySelector("[data-gpu-summary]");
    if (summary && body.summary) {
      var s = body.summary;
      var pct = function (v) { return v === null ? "–" : v.toFixed(1) + " %"; };
      summary.textContent =
        "Mean utilisation " + pct(s.util_mean) + ", p95 " + pct(s.util_p95) +
        "; peak memory " + (s.fb_peak_mib === null ? "–" : Math.round(s.fb_peak_mib) + " of " + Math.round(s.fb_total_mib) + " MiB") +
        "; " + s.gpu_hours.toFixed(2) + " GPU-hours, " + s.energy_kwh.toFixed(3) + " kWh" +
        (s.idle ? " — idle: the GPUs were mostly unused" : "") +
        (s.idle_warning ? " (idle warning raised)" : "");
    }
    if (!body.devices.length) {
      root.textContent = "No GPU metrics yet: they appear once the job runs and dcgm-exporter is scraped.";
      return;
    }
    root.textContent = "";
    charts.forEach(function (c) { c.destroy(); });
    charts = [];
    panels.forEach(function (panel) {
      var series = [{}].concat(body.devices.map(function (d, i) {
        return { label: label(d), stroke: colours[i % colours.length], width: 1.5 };
      }));
      var el = document.createElement("div");
      root.appendChild(el);
      charts.push(new uPlot(
        { title: panel.title, width: Math.min(root.clientWidth || 800, 900), height: 180, series: series },
        align(body.devices, panel.series),
        el
      ));
    });
  }

  function load() {
    fetch(url, { headers: { Accept: "application/json" }, credentials: "same-origin" })
      .then(function (r) { return r.ok ? r.json() : Promise.reject(r.status); })
      .then(function (body) {
        draw(body);
        if (refresh > 0 && body.summary && body.summary.final) refresh = 0;
        if (refresh > 0) setTimeout(load, refresh * 1000);
      })
      .catch(function () { root.textContent = "GPU metrics could not be loaded."; });
  }
  load();
})();

// GPU usage of a project per day (held and used GPU-hours) from /api/v1/projects/SLUG/usage/.
(function () {
  var root = document.querySelector("[data-gpu-usage]");
  if (!root || typeof uPlot === "undefined") return;
  var since = Math.floor(Date.now() / 1000) - 30 * 86400;
  fetch(root.getAttribute("data-gpu-usage") + "&since=" + since, {
    headers: { Accept: "application/json" },
    credentials: "same-origin",
  })
    .then(function (r) { return r.ok ? r.json() : Promise.reject(r.status); })
    .then(function (body) {
      if (!body.rows.length) {
        root.textContent = "No GPU usage recorded yet (ended jobs are summed once rolled up).";
        return;
      }
      var xs = body.rows.map(function (row) { return Date.parse(row.day + "T00:00:00Z") / 1000; });
      new uPlot(
        {
          title: "GPU-hours per day",
          width: Math.min(root.clientWidth || 800, 900),
          height: 200,
          series: [
            {},
            { label: "held", stroke: "#2563eb", width: 1.5 },
            { label: "used", stroke: "#16a34a", width: 1.5 },
          ],
        },
        [
          xs,
          body.rows.map(function (row) { return row.gpu_hours_held; }),
          body.rows.map(function (row) { return row.gpu_hours_used; }),
        ],
        root
      );
    })
    .catch(function () { root.textContent = "GPU usage could not be loaded."; });
})();
