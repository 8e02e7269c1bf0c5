// tests/web/layout.test.js — every page reads cleanly (issue 28, point 7),
// in headless Chromium at 1280×800 and 1920×1080 against a real scheduler
// and agent (started by tests/web/run.sh: HF_URL, HF_USER_TOKEN, HF_SHOTS).
//
// A small bash trial program reports metrics that are hard to label (a
// learning rate near 2.5e-4, a loss that moves in the 6th decimal), writes
// timestamped lines to stderr, and one experiment's trials report only
// steps 430 and 431 (as a live fork does). On every page — the experiment
// list, a finished multi-objective experiment, a live one, a trial, compare,
// agents — layoutProblems() (run in the page) measures bounding boxes:
//   * text clipped by its box or spilling out of its panel, a table wider
//     than its card (a column cut at the right edge);
//   * buttons of one group wrapped onto two lines;
//   * text boxes that overlap;
//   * uPlot axis labels wider than their axis (".50e-4"), x labels that
//     overlap ("7:12am7:13am"), repeated tick labels ("430 430 431"), the
//     same for the ECharts axes (their labels read back from the model);
//   * a chart with nothing drawn and no message, or a message in a big
//     empty box;
// and the header's counts must equal the trial table's states; stderr lines
// are marked but not red, and carry one timestamp only.
'use strict';
const { test, before, after } = require('node:test');
const assert = require('node:assert/strict');
const fs = require('node:fs');
const os = require('node:os');
const path = require('node:path');
const { api, until, launch } = require('./helpers');

const URL = process.env.HF_URL;
const TOKEN = process.env.HF_USER_TOKEN;
const SHOTS = process.env.HF_SHOTS || '/tmp';
if (!URL || !TOKEN) throw new Error('run through tests/web/run.sh (HF_URL, HF_USER_TOKEN)');

// The trial program (os.tmpdir() is bound into the agent's sandbox by run.sh).
const progDir = fs.mkdtempSync(path.join(os.tmpdir(), 'hf-layout-'));
fs.chmodSync(progDir, 0o755);
const prog = path.join(progDir, 'layout_trial.sh');
fs.writeFileSync(prog, `#!/usr/bin/env bash
# layout_trial.sh FIRST_STEP EPOCHS SLEEP_AFTER
x=$(jq -r .x <<<"$HYPERFARM_HPARAMS")
first=$1; n=$2
for ((i = 0; i < n; i++)); do
  s=$((first + i))
  echo "$(date '+%Y-%m-%d %H:%M:%S'),123 INFO epoch $s: loading batch" >&2
  echo "epoch $s done"
  awk -v x="$x" -v i="$i" -v s="$s" 'BEGIN { printf "HYPERFARM {\\"step\\": %d, \\"lr\\": %.9f, \\"loss\\": %.9f, \\"acc\\": %.6f}\\n",
    s, 0.00025 - i * 0.000003, 1 + x * 0.00001 - i * 0.000001, 0.5 + x * 0.4 + i * 0.01 }'
  sleep 0.1
done
sleep "$3"
`, { mode: 0o755 });

const space = { x: { type: 'uniform', min: 0, max: 1 }, opt: { type: 'categorical', values: ['sgd', 'adam'] } };
const multi = {
  name: 'web-layout-multi', description: 'layout test: two objectives',
  objective: [{ metric: 'acc', goal: 'maximize' }, { metric: 'loss', goal: 'minimize' }],
  searcher: { name: 'random', max_trials: 6, max_concurrent_trials: 3, seed: 5 },
  hyperparameters: space, trial: { command: [prog, '1', '8', '0'], max_restarts: 0 },
};
const live = {
  name: 'web-layout-live', objective: { metric: 'loss', goal: 'minimize' },
  searcher: { name: 'random', max_trials: 2, max_concurrent_trials: 1, seed: 6 },
  hyperparameters: space, trial: { command: [prog, '430', '2', '600'], max_restarts: 0 },
};
let multiId, liveId;
const SIZES = [[1280, 800], [1920, 1080]];

let browser;
const problems = [];

/* Runs in the page: the layout problems of main, as strings. */
function layoutProblems() {
  const out = [];
  const main = document.getElementById('main');
  const vis = (el) => { const r = el.getBoundingClientRect(); return r.width > 0 && r.height > 0 && getComputedStyle(el).visibility !== 'hidden'; };
  const name = (el) => {
    let s = el.tagName.toLowerCase() + (el.id ? '#' + el.id : '') + (el.className && typeof el.className === 'string' ? '.' + el.className.trim().split(/\s+/).join('.') : '');
    const p = el.closest('[id]');
    if (p && p !== el) s = '#' + p.id + ' ' + s;
    return s;
  };
  const scrollers = '.table-wrap, .log, .timeline, textarea, .logsearch-results, pre, ul.wf-events, .editor';
  const boxOf = (el) => { const r = el.getBoundingClientRect(); return { l: r.left, r: r.right, t: r.top, b: r.bottom }; };
  // Leaf text boxes: one rect per text node (a Range), with its element.
  const texts = [];
  const walker = document.createTreeWalker(main, NodeFilter.SHOW_TEXT);
  for (let n = walker.nextNode(); n; n = walker.nextNode()) {
    if (!n.nodeValue.trim()) continue;
    const el = n.parentElement;
    if (!el || !vis(el) || el.closest('[hidden], .curve-tip, .u-legend, dialog, option, select, .toast, .chart')) continue;
    if (el.closest(scrollers) && !el.closest('.table-wrap')) continue;
    const rg = document.createRange(); rg.selectNodeContents(n);
    for (const r of rg.getClientRects()) if (r.width > 0.5 && r.height > 0.5) texts.push({ el, text: n.nodeValue.trim(), l: r.left, r: r.right, t: r.top, b: r.bottom });
  }
  // Clipped by a box that hides overflow, or out of its panel.
  for (const tx of texts) {
    for (let a = tx.el; a && a !== main; a = a.parentElement) {
      const cs = getComputedStyle(a);
      const clips = cs.overflowX !== 'visible' || a.classList.contains('panel');
      if (!clips) continue;
      const b = boxOf(a);
      if (a.matches('.table-wrap')) {   // scrolled-out columns are the table check's business
        break;
      }
      if (tx.r > b.r + 1 || tx.l < b.l - 1) { out.push(`text "${tx.text.slice(0, 40)}" overflows ${name(a)} (${Math.round(tx.l)}–${Math.round(tx.r)} outside ${Math.round(b.l)}–${Math.round(b.r)})`); break; }
      if (a.classList.contains('panel')) break;
    }
  }
  // Cells that cut their text (ellipsis or hidden overflow).
  for (const el of main.querySelectorAll('td, th, .btn, .badge, .stat .v, .stat .l, h1, h2, .hint')) {
    if (!vis(el) || el.closest('[hidden]')) continue;
    if (el.scrollWidth > el.clientWidth + 1 && getComputedStyle(el).overflowX !== 'visible') out.push(`text of ${name(el)} "${el.textContent.trim().slice(0, 40)}" is cut (${el.scrollWidth} > ${el.clientWidth}: ${el.innerHTML.slice(0, 80)})`);
  }
  // Tables wider than their card.
  for (const w of main.querySelectorAll('.table-wrap')) {
    if (vis(w) && w.scrollWidth > w.clientWidth + 1) out.push(`${name(w)}: its table is wider than the card (${w.scrollWidth} > ${w.clientWidth}): columns cut at the right edge`);
  }
  // Buttons of one group on one line.
  const groups = new Set([...main.querySelectorAll('.btn')].filter(vis).map((b) => b.parentElement));
  for (const g of groups) {
    const btns = [...g.children].filter((c) => c.matches('.btn') && vis(c));
    const tops = new Set(btns.map((b) => Math.round(b.getBoundingClientRect().top)));
    if (tops.size > 1) out.push(`buttons ${btns.map((b) => '"' + b.textContent.trim() + '"').join(', ')} in ${name(g)} wrap onto ${tops.size} lines`);
  }
  // Overlapping text boxes (2 px tolerance).
  const sorted = texts.slice().sort((a, b) => a.t - b.t);
  for (let i = 0; i < sorted.length; i++) {
    const a = sorted[i];
    for (let j = i + 1; j < sorted.length && sorted[j].t < a.b - 2; j++) {
      const b = sorted[j];
      if (a.el === b.el || a.el.contains(b.el) || b.el.contains(a.el)) continue;
      if (Math.min(a.r, b.r) - Math.max(a.l, b.l) > 2 && Math.min(a.b, b.b) - Math.max(a.t, b.t) > 2) out.push(`"${a.text.slice(0, 30)}" overlaps "${b.text.slice(0, 30)}"`);
    }
  }
  // Charts: uPlot axes.
  const meter = document.createElement('canvas').getContext('2d');
  for (const el of main.querySelectorAll('.chart')) {
    if (!vis(el)) continue;
    const u = el.__uplot;
    const note = el.querySelector(':scope > .chart-empty');
    const noteText = note && vis(note) ? note.textContent.trim() : '';
    let drawn = false;
    if (u) {
      drawn = u.data.slice(1).some((s) => s.some((v) => v != null));
      u.axes.forEach((ax, ai) => {
        if (!ax.show || !ax._values || !ax._splits) return;
        meter.font = Array.isArray(ax.font) ? ax.font[0] : ax.font;
        const dpr = window.devicePixelRatio || 1;
        const vals = ax._values.map((v) => (v == null ? '' : String(v)));
        const widths = vals.map((v) => Math.max(0, ...v.split('\n').map((s) => meter.measureText(s).width / dpr)));
        const shown = vals.filter(Boolean);
        for (let k = 1; k < shown.length; k++) if (shown[k] === shown[k - 1]) { out.push(`${name(el)} axis ${ai}: repeated tick label "${shown[k]}" (${shown.join(' ')})`); break; }
        const vertical = ax.side % 2 === 1;
        if (vertical) {
          const need = Math.max(0, ...widths) + (ax.ticks && ax.ticks.show !== false ? ax.ticks.size : 0) + ax.gap + (ax.label ? ax.labelSize : 0);
          if (need > ax._size + 1) out.push(`${name(el)} y axis ${ai}: labels need ${Math.round(need)} px, the axis has ${Math.round(ax._size)} (clipped: ${shown.join(' ')})`);
        } else {
          const ext = ax._splits.map((v, k) => { const p = u.valToPos(v, ax.scale) + u.bbox.left / dpr; return [p - widths[k] / 2, p + widths[k] / 2, vals[k]]; })
            .filter((e) => e[2]);
          for (let k = 1; k < ext.length; k++) if (ext[k][0] < ext[k - 1][1] - 1) { out.push(`${name(el)} x axis ${ai}: labels "${ext[k - 1][2].replace(/\n/g, ' ')}" and "${ext[k][2].replace(/\n/g, ' ')}" overlap`); break; }
          for (const e of ext) if (e[0] < -1 || e[1] > u.width + 1) out.push(`${name(el)} x axis ${ai}: label "${e[2]}" cut at the edge`);
        }
      });
    }
    const ec = window.echarts && window.echarts.getInstanceByDom(el);
    if (ec) {
      const opt = ec.getOption();
      drawn = drawn || (opt.series || []).some((s) => s.id !== 'extent' && (s.data || []).length > 0);
      if (el.dataset.series && +el.dataset.series > 0) drawn = true;   // the curves' own canvas
      const model = ec.getModel();
      for (const dim of ['xAxis', 'yAxis']) {
        (model.getComponent(dim, 0) ? model.findComponents({ mainType: dim }) : []).forEach((cmp, k) => {
          const axis = cmp.axis;
          if (!axis || axis.type === 'category' || !axis.getViewLabels) return;
          const labels = axis.getViewLabels().map((l) => l.formattedLabel);
          for (let q = 1; q < labels.length; q++) if (labels[q] === labels[q - 1]) { out.push(`${name(el)} ${dim} ${k}: repeated tick label "${labels[q]}" (${labels.join(' ')})`); break; }
        });
      }
      // Text drawn on the canvas inside the chart.
      const W = ec.getWidth(), H = ec.getHeight();
      for (const d of ec.getZr().storage.getDisplayList()) {
        if (!d.style || typeof d.style.text !== 'string' || !d.style.text.trim() || d.invisible || d.ignore) continue;
        const r = d.getBoundingRect().clone();
        if (d.transform) r.applyTransform(d.transform);
        if (r.x < -1 || r.y < -1 || r.x + r.width > W + 1 || r.y + r.height > H + 1) out.push(`${name(el)}: label "${d.style.text}" drawn outside the chart`);
      }
    }
    if ((u || ec) && !drawn && !noteText) out.push(`${name(el)}: a blank chart (nothing drawn, no message)`);
    if (noteText && !drawn && el.getBoundingClientRect().height > 120) out.push(`${name(el)}: "${noteText}" in a ${Math.round(el.getBoundingClientRect().height)} px empty box`);
  }
  return [...new Set(out)];
}

let ctxs = [];
async function pageAt(w, hgt) {
  const ctx = await browser.newContext({ viewport: { width: w, height: hgt } });
  ctxs.push(ctx);
  await ctx.addInitScript((t) => localStorage.setItem('hyperfarm.token', t), TOKEN);
  const page = await ctx.newPage();
  page.on('console', (m) => { if (m.type() === 'error') problems.push(`console: ${m.text()} (${page.url()})`); });
  page.on('pageerror', (e) => problems.push(`pageerror: ${e.message} (${page.url()})`));
  return page;
}

/* Opens hash at each size, waits for ready(page), then checks the layout. */
async function checkPage(hash, shotName, ready) {
  for (const [w, hgt] of SIZES) {
    const page = await pageAt(w, hgt);
    await page.goto(`${URL}/${hash}`);
    await ready(page);
    await new Promise((r) => setTimeout(r, 1200));   // throttled redraws, ResizeObserver
    const found = await page.evaluate(layoutProblems);
    await page.screenshot({ path: path.join(SHOTS, `layout-${shotName}-${w}.png`), fullPage: true });
    await page.close();
    assert.deepEqual(found, [], `${hash} at ${w}×${hgt}`);
  }
}

before(async () => {
  multiId = (await api('POST', '/api/v1/experiments', multi)).id;
  liveId = (await api('POST', '/api/v1/experiments', live)).id;
  browser = await launch();
  await until(`experiment ${multiId} to complete`, async () => (await api('GET', '/api/v1/experiments/' + multiId)).state === 'COMPLETED', 120000, 500);
  await until('the live trial to report step 431', async () => {
    const ts = (await api('GET', `/api/v1/experiments/${liveId}/trials`)).trials;
    return ts.some((t) => t.state === 'RUNNING' && t.latest && t.latest.step === 431);
  }, 60000, 300);
});

after(async () => {
  for (const c of ctxs) await c.close().catch(() => {});
  if (browser) await browser.close();
  for (const e of [multiId, liveId]) if (e) await api('POST', `/api/v1/experiments/${e}/cancel`).catch(() => {});
});

const loaded = (p) => p.waitForSelector('[data-loaded="1"]', { timeout: 20000 });

test('the experiment list reads cleanly', async () => {
  await checkPage('#/experiments', 'experiments', (p) => p.waitForSelector('#experiments-table tbody tr[data-id]'));
});

test('a finished multi-objective experiment reads cleanly', async () => {
  await checkPage(`#/experiments/${multiId}`, 'multi', async (p) => {
    await loaded(p);
    await p.waitForSelector('#trials-table tbody tr[data-id]');
    await p.waitForSelector('#importance-chart[data-params]', { timeout: 20000 });
  });
});

test('a live experiment (steps 430–431, no completed trial) reads cleanly', async () => {
  await checkPage(`#/experiments/${liveId}`, 'live', async (p) => {
    await loaded(p);
    await p.waitForSelector('#trials-table tbody tr[data-id]');
    await p.waitForFunction(() => +(document.getElementById('curves-chart').dataset.points || 0) >= 2, null, { timeout: 20000 });
  });
});

test('the header\'s counts are the table\'s', async () => {
  const page = await pageAt(1280, 800);
  for (const id of [multiId, liveId]) {
    await page.goto(`${URL}/#/experiments/${id}`);
    await loaded(page);
    await page.waitForSelector('#trials-table tbody tr[data-id]');
    await new Promise((r) => setTimeout(r, 800));
    const got = await page.evaluate(() => {
      const stat = {};
      for (const s of document.querySelectorAll('#exp-stats .stat')) stat[s.querySelector('.l').textContent.trim()] = s.querySelector('.v').textContent.trim();
      const n = {};
      for (const b of document.querySelectorAll('#trials-table tbody tr[data-id] .badge')) n[b.textContent] = (n[b.textContent] || 0) + 1;
      return { stat, n };
    });
    const c = (s) => got.n[s] || 0;
    assert.equal(got.stat.done, String(c('COMPLETED') + c('STOPPED')), `experiment ${id}: done`);
    assert.equal(got.stat.running, String(c('RUNNING') + c('ASSIGNED')), `experiment ${id}: running`);
    assert.equal(got.stat.queued, String(c('QUEUED')), `experiment ${id}: queued`);
    assert.equal(got.stat.failed, String(c('FAILED')), `experiment ${id}: failed`);
  }
  await page.close();
});

test('a trial page reads cleanly', async () => {
  const trials = (await api('GET', `/api/v1/experiments/${multiId}/trials`)).trials;
  const tid = trials[0].id;
  await checkPage(`#/trials/${tid}`, 'trial', async (p) => {
    await p.waitForSelector('[data-log-loaded="1"]', { timeout: 20000 });
    await p.waitForFunction(() => +(document.getElementById('metric-charts').dataset.points || 0) > 0, null, { timeout: 20000 });
  });
});

test('stderr is marked, not red, with one timestamp a line', async () => {
  const trials = (await api('GET', `/api/v1/experiments/${multiId}/trials`)).trials;
  const tid = trials[0].id;
  const page = await pageAt(1280, 800);
  await page.goto(`${URL}/#/trials/${tid}`);
  await page.waitForSelector('[data-log-loaded="1"]', { timeout: 20000 });
  await page.waitForSelector('#trial-log [data-stream="stderr"]');
  const lines = await page.evaluate(() => [...document.querySelectorAll('#trial-log > span')].map((s) => {
    const cs = getComputedStyle(s);
    const ts = s.querySelector('.ts');
    const mark = s.querySelector('.stream-mark');
    return { stream: s.dataset.stream, color: cs.color, text: s.textContent,
      ts: ts ? getComputedStyle(ts).display !== 'none' && ts.textContent : '',
      mark: mark ? getComputedStyle(mark).display !== 'none' : false };
  }));
  const err = lines.filter((l) => l.stream === 'stderr'), outl = lines.filter((l) => l.stream === 'stdout');
  assert.ok(err.length >= 8 && outl.length >= 8, 'both streams shown');
  const rgb = (c) => c.match(/\d+/g).map(Number);
  for (const l of err) {
    const [r, g, b] = rgb(l.color);
    assert.ok(!(r > g + 40 && r > b + 40), `stderr text is not red (${l.color}): ${l.text}`);
    assert.ok(l.mark, `stderr line carries a marker: ${l.text}`);
  }
  assert.equal(outl[0].color, err[0].color, 'stderr text in the log\'s colour');
  for (const l of lines) {
    const stamps = l.text.match(/\d\d:\d\d:\d\d/g) || [];
    assert.ok(stamps.length <= 1, `one timestamp on a line: ${l.text}`);
  }
  await page.close();
});

test('compare reads cleanly', async () => {
  const trials = (await api('GET', `/api/v1/experiments/${multiId}/trials`)).trials;
  await checkPage(`#/compare/${trials.slice(0, 3).map((t) => t.id).join(',')}`, 'compare', async (p) => {
    await loaded(p);
    // The final metrics are shown whole, not cut off in a scrolling box.
    const cut = await p.evaluate(() => [...document.querySelectorAll('#main .table-wrap')].filter((w) => w.scrollHeight > w.clientHeight + 1).length);
    assert.equal(cut, 0, 'compare\'s tables are not cut off');
  });
});

test('agents reads cleanly', async () => {
  await checkPage('#/agents', 'agents', (p) => p.waitForSelector('#agents-table tbody tr', { timeout: 10000 }));
});

test('no console errors or uncaught exceptions', () => {
  assert.deepEqual(problems, []);
});
