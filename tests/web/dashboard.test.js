// tests/web/dashboard.test.js — the dashboard in headless Chromium against a
// real scheduler and agent (started by tests/web/run.sh, which exports
// HF_URL, HF_USER_TOKEN, HF_FAKE_TRIAL, HF_SHOTS).
//
// The tests run in order and share one browser page, as a user would: log
// in, submit (first a bad file, then a good one), watch a trial appear and
// its curve grow without a reload, sort the table, brush the parallel
// coordinates, open a trial and kill it, pause and resume the experiment,
// look at the agents. Every page is screenshotted into HF_SHOTS. Console
// errors and uncaught exceptions fail the suite, except the 400/401
// responses the login and validation tests provoke on purpose.
'use strict';
const { test, before, after } = require('node:test');
const assert = require('node:assert/strict');

const URL = process.env.HF_URL;
const TOKEN = process.env.HF_USER_TOKEN;
const FAKE = process.env.HF_FAKE_TRIAL;
const SHOTS = process.env.HF_SHOTS || '/tmp';
if (!URL || !TOKEN || !FAKE) throw new Error('run through tests/web/run.sh (HF_URL, HF_USER_TOKEN, HF_FAKE_TRIAL)');

let browser, page;
const problems = [];          // console errors and page errors
let allowHttpErrors = false;  // while provoking 400/401 on purpose

const { apiClient, until, launch, screenshot } = require('./helpers');
const api = apiClient(URL, TOKEN);
const shot = (name) => screenshot(page, SHOTS, `dashboard-${name}.png`);

const asha = {
  name: 'web-asha', objective: { metric: 'val_acc', goal: 'maximize' },
  searcher: { name: 'asha', max_trials: 9, max_concurrent_trials: 2, max_epochs: 9, reduction_factor: 3,
    sampler: 'tpe', n_startup_trials: 3 },
  // "arch" is ignored by fake_trial; its long value exercises the truncated
  // category labels of the parallel coordinates.
  hyperparameters: { x: { type: 'uniform', min: -1, max: 1 }, lr: { type: 'log', min: 0.01, max: 1 },
    arch: { type: 'categorical', values: ['small', 'residual-wide-512x4-dropout'] } },
  trial: { command: [FAKE, '--sleep-ms', '60'] },
  // The long value is drawn for certain (not only when the random draws
  // and TPE happen to pick it: once in a run they did not).
  warm_start: { enqueue: [{ x: 0.5, lr: 0.1, arch: 'residual-wide-512x4-dropout' }] },
};
const sweep = {
  name: 'web-random', objective: { metric: 'val_acc', goal: 'maximize' },
  searcher: { name: 'random', max_trials: 6, max_concurrent_trials: 2 },
  hyperparameters: { x: { type: 'uniform', min: -1, max: 1 }, lr: { type: 'log', min: 0.01, max: 1 },
    opt: { type: 'categorical', values: ['sgd', 'adam'] } },
  trial: { command: [FAKE, '--epochs', '80', '--sleep-ms', '250'], max_restarts: 0 },
};
let ashaId, sweepId;

before(async () => {
  // A finished ASHA sweep gives the experiment page rungs and promotions.
  ashaId = (await api('POST', '/api/v1/experiments', asha)).id;
  browser = await launch();
  const ctx = await browser.newContext({ viewport: { width: 1400, height: 900 } });
  page = await ctx.newPage();
  page.on('console', (m) => {
    if (m.type() !== 'error') return;
    if (allowHttpErrors && /status of 40[01]/.test(m.text())) return;
    problems.push(`console: ${m.text()} (${page.url()})`);
  });
  page.on('pageerror', (e) => problems.push(`pageerror: ${e.message} (${page.url()})`));
  page.on('dialog', (d) => d.accept());   // confirm() of kill/cancel
});

after(async () => {
  if (browser) await browser.close();
  for (const e of [sweepId, ashaId]) if (e) await api('POST', `/api/v1/experiments/${e}/cancel`).catch(() => {});
});

test('a token is asked for, a wrong one refused, the right one kept', async () => {
  allowHttpErrors = true;
  await page.goto(URL + '/');
  await page.waitForSelector('dialog#login[open]', { timeout: 10000 });
  await page.fill('#login-token', 'wrong-token');
  await page.click('#login-submit');
  // Refused: the prompt comes back and says so.
  await until('prompt to reopen with an error', () => page.evaluate(() =>
    document.querySelector('dialog#login').open && !document.getElementById('login-error').hidden));
  await page.fill('#login-token', TOKEN);
  await page.click('#login-submit');
  await page.waitForSelector('#experiments-table tbody tr[data-id]', { timeout: 10000 });
  assert.equal(await page.evaluate(() => localStorage.getItem('hyperfarm.token')), TOKEN);
  await until('live stream connected', () => page.evaluate(() => document.getElementById('live').classList.contains('on')));
  // A reload keeps the token: no prompt.
  await page.reload();
  await page.waitForSelector('#experiments-table tbody tr[data-id]');
  assert.equal(await page.evaluate(() => document.querySelector('dialog#login').open), false);
  allowHttpErrors = false;
});

test('a bad experiment file shows the error next to the offending field', async () => {
  allowHttpErrors = true;
  await page.click('#new-exp');
  const bad = JSON.parse(JSON.stringify(sweep));
  bad.searcher.max_trials = 0;
  const text = JSON.stringify(bad, null, 2);
  await page.fill('#exp-json', text);
  await page.click('#submit-exp');
  await page.waitForSelector('#submit-error:not([hidden])');
  const err = await page.textContent('#submit-error');
  assert.match(err, /searcher\.max_trials/);
  const wantLine = text.split('\n').findIndex((l) => l.includes('"max_trials"')) + 1;
  const marked = await page.textContent('.editor .gutter .err');
  assert.equal(+marked, wantLine, 'the gutter marks the max_trials line');
  assert.ok(await page.isVisible('.editor .inline-error'), 'inline message beside the field');
  assert.equal(await page.evaluate(() => { const t = document.getElementById('exp-json'); return t.value.slice(t.selectionStart, t.selectionEnd); }), '"max_trials"');
  await shot('submit-error');
  // Broken JSON is caught before it is sent, with its line.
  await page.fill('#exp-json', '{\n  "name": "x",\n  "searcher": {\n}');
  await page.click('#submit-exp');
  await until('syntax error shown', async () => /not valid JSON/.test(await page.textContent('#submit-error')));
  allowHttpErrors = false;
});

test('a submitted sweep runs: a trial appears and its curve grows live', async () => {
  await page.fill('#exp-json', JSON.stringify(sweep, null, 2));
  await page.click('#submit-exp');
  await page.waitForSelector('#submit-panel .ok-msg a');
  const href = await page.getAttribute('#submit-panel .ok-msg a', 'href');
  sweepId = +href.split('/').pop();
  assert.ok(sweepId > 0);
  await page.click('#submit-panel .ok-msg a');
  await page.waitForSelector('.page[data-page="experiment"][data-loaded]');
  await page.evaluate(() => { window.__noReload = 1; });
  await until('a trial row', () => page.$('#trials-table tbody tr[data-id]'));
  const p1 = await until('curve points', async () => +(await page.getAttribute('#curves-chart', 'data-points')) || 0);
  const p2 = await until('the curve to grow', async () => {
    const n = +(await page.getAttribute('#curves-chart', 'data-points')) || 0;
    return n >= p1 + 3 ? n : 0;
  }, 20000);
  assert.ok(p2 > p1);
  assert.equal(await page.evaluate(() => window.__noReload), 1, 'updates arrived without a reload');
  // A running trial shows up as RUNNING in the table (from SSE).
  await until('RUNNING badge', () => page.$('#trials-table .badge.RUNNING'));
  // Hovering a curve highlights it (and names the trial).
  const box = await page.locator('#curves-chart').boundingBox();
  const hit = await until('hover to hit a curve', async () => {
    for (let y = 30; y < box.height - 45; y += 3) {
      await page.mouse.move(box.x + box.width * 0.25, box.y + y);
      const h = await page.getAttribute('#curves-chart', 'data-hover');
      if (h) return h;
    }
    return null;
  }, 15000, 0);
  assert.ok(+hit > 0);
  assert.ok(await page.isVisible('#curves-chart .curve-tip'));
  await page.mouse.move(5, 5);
  await page.check('#log-scale');
  await page.waitForTimeout(300);
  await page.uncheck('#log-scale');
  await page.waitForTimeout(2600);   // throttled scatter/parallel redraws
  await shot('experiment-live');
});

test('the trial table sorts by any column', async () => {
  await until('two trials', async () => (await page.$$('#trials-table tbody tr[data-id]')).length >= 2);
  const ids = () => page.$$eval('#trials-table tbody tr[data-id]', (rs) => rs.map((r) => +r.dataset.id));
  await page.click('#trials-table th[data-key="id"]');   // was ascending: now descending
  let got = await ids();
  assert.deepEqual(got, [...got].sort((a, b) => b - a), 'ID descending');
  await page.click('#trials-table th[data-key="id"]');
  got = await ids();
  assert.deepEqual(got, [...got].sort((a, b) => a - b), 'ID ascending');
  await page.click('#trials-table th[data-key="hp:x"]');
  const col = await page.$$eval('#trials-table th', (ths) => ths.findIndex((t) => t.dataset.key === 'hp:x'));
  const xs = await page.$$eval('#trials-table tbody tr[data-id]', (rs, c) => rs.map((r) => +r.children[c].textContent), col);
  assert.deepEqual(xs, [...xs].sort((a, b) => a - b), 'x ascending');
  assert.match(await page.textContent('#trials-table th[data-key="hp:x"]'), /▲/);
  await page.fill('#trial-filter', 'x<0');
  await page.waitForTimeout(400);
  const xs2 = await page.$$eval('#trials-table tbody tr[data-id]', (rs, c) => rs.map((r) => +r.children[c].textContent), col);
  assert.ok(xs2.every((x) => x < 0), 'filter x<0');
  await page.fill('#trial-filter', '');
});

test('the trial page shows metrics, a live log tail, and kill works', async () => {
  const running = await until('a RUNNING trial', async () => {
    const r = await api('GET', `/api/v1/experiments/${sweepId}/trials`);
    return r.trials.find((t) => t.state === 'RUNNING');
  });
  await page.click(`#trials-table tr[data-id="${running.id}"] a[href="#/trials/${running.id}"]`);
  await page.waitForSelector('.page[data-page="trial"][data-loaded]');
  await until('metric charts', async () => (await page.$$('#metric-charts [data-metric]')).length >= 2);
  const names = await page.$$eval('#metric-charts [data-metric]', (b) => b.map((x) => x.dataset.metric));
  assert.ok(names.includes('val_acc') && names.includes('train_loss'), names.join(','));
  const l1 = await until('log lines', async () => (await page.$$('#trial-log > span')).length);
  await until('more log lines (follow)', async () => (await page.$$('#trial-log > span')).length > l1, 15000);
  const n1 = +(await page.getAttribute('#metric-charts', 'data-points')) || 0;
  await until('metric points to grow', async () => (+(await page.getAttribute('#metric-charts', 'data-points')) || 0) > n1, 15000);
  assert.ok(await page.$('#trial-events li .badge.RUNNING'), 'RUNNING event listed');
  await shot('trial');
  await page.click('#kill-trial');
  await until('CANCELED badge', () => page.$('.page-head .badge.CANCELED'), 20000);
  const t = await api('GET', `/api/v1/trials/${running.id}`);
  assert.equal(t.state, 'CANCELED');
  assert.ok(await page.isDisabled('#kill-trial'));
});

test('pause and resume from the experiments page', async () => {
  await page.click('nav a[data-nav="experiments"]');
  const row = `#experiments-table tr[data-id="${sweepId}"]`;
  await page.waitForSelector(`${row} .badge.ACTIVE`);
  await page.click(`${row} button[data-action="pause"]`);
  await page.waitForSelector(`${row} .badge.PAUSED`, { timeout: 10000 });
  assert.equal((await api('GET', `/api/v1/experiments/${sweepId}`)).state, 'PAUSED');
  await shot('experiments');
  await page.click(`${row} button[data-action="resume"]`);
  await page.waitForSelector(`${row} .badge.ACTIVE`, { timeout: 10000 });
  assert.equal((await api('GET', `/api/v1/experiments/${sweepId}`)).state, 'ACTIVE');
});

test('the ASHA experiment shows rungs, parallel coordinates and brushing', async () => {
  await until('ASHA sweep to finish', async () => (await api('GET', `/api/v1/experiments/${ashaId}`)).state === 'COMPLETED', 60000, 500);
  await page.goto(`${URL}/#/experiments/${ashaId}`);
  await page.waitForSelector('.page[data-page="experiment"][data-curves-loaded]');
  await page.waitForSelector('#rungs-table tbody tr');
  const rungs = await page.$$eval('#rungs-table tbody tr', (r) => r.length);
  assert.ok(rungs >= 2, 'at least two rungs');
  assert.ok(await page.$('#rungs-table .chip.promoted'), 'a promoted trial is marked');
  assert.match(await page.textContent('#rungs-panel .hint'), /new trials from TPE over \d+ rung results/);
  await until('parallel lines', async () => +(await page.getAttribute('#parallel-chart', 'data-lines')) >= 9);
  assert.equal((await page.$$('#scatter-grid .chart-box')).length, 3, 'one scatter per hyperparameter');
  await shot('experiment');
  await checkCategoryLabels();
  await checkTableOverflow();
  // checkTableOverflow narrowed the window and widened it again: the chart
  // re-lays itself out on the next frame after the resize, and a drag made
  // before that lands on the old axes. Brush once it has (as a user would).
  await until('parallel chart laid out at the restored width', () => page.$eval('#parallel-chart', (el) => {
    const c = window.echarts && echarts.getInstanceByDom(el);
    return !!c && Math.abs(c.getWidth() - el.clientWidth) <= 1;
  }), 5000);
  await page.waitForTimeout(300);
  // Brush the objective axis (rightmost) over its upper half.
  const box = await page.locator('#parallel-chart').boundingBox();
  const x = box.x + box.width - 90;
  // Start above the axis top (36 px; the brush area reaches ~27 px past the
  // ends), so a trial right at the top of the axis is inside the brush.
  await page.mouse.move(x, box.y + 26);
  await page.mouse.down();
  await page.mouse.move(x, box.y + box.height * 0.45, { steps: 8 });
  await page.mouse.up();
  await until('brush selection', async () => /brushed/.test(await page.textContent('#selection-note')), 5000);
  await page.waitForTimeout(600);   // the drag may report several intervals
  const brushed = +(await page.textContent('#selection-note')).match(/(\d+) trial/)[1];
  assert.ok(brushed > 0 && brushed < 9, `brushed ${brushed} of 9`);
  await until('the table to follow the brush', async () =>
    (await page.$$eval('#trials-table tbody tr[data-id]', (r) => r.length)) === brushed, 5000);
  // Every row left is inside the brushed objective range: the best ones.
  const objs = (await api('GET', `/api/v1/experiments/${ashaId}/trials`)).trials.map((t) => t.objective).sort((a, b) => b - a);
  const ids = await page.$$eval('#trials-table tbody tr[data-id]', (r) => r.map((x) => +x.dataset.id));
  const all = (await api('GET', `/api/v1/experiments/${ashaId}/trials`)).trials;
  const shownObjs = ids.map((i) => all.find((t) => t.id === i).objective).sort((a, b) => b - a);
  assert.deepEqual(shownObjs, objs.slice(0, brushed), 'the brushed rows are the top of the objective axis');
  await shot('experiment-brushed');
  await page.click('#clear-selection');
  await until('selection cleared', async () => (await page.$$('#trials-table tbody tr[data-id]')).length === 9, 5000);
  await checkTimelineScroll((await api('GET', `/api/v1/experiments/${ashaId}`)).best.trial_id);
});

/* Category labels of the parallel coordinates: drawn above the lines, long
 * ones truncated, and the full value (with its trial count) on hover. */
async function checkCategoryLabels() {
  await page.locator('#parallel-chart').scrollIntoViewIfNeeded();
  const label = await page.evaluate(() => {
    const c = echarts.getInstanceByDom(document.querySelector('#parallel-chart'));
    const lineZ = Math.max(...c.getZr().storage.getDisplayList().filter((e) => e.type === 'polyline').map((e) => e.z));
    const el = c.getZr().storage.getDisplayList().find((e) => e.type === 'tspan' && /^residual/.test(e.style.text || ''));
    if (!el) return null;
    const r = el.getBoundingRect().clone(); r.applyTransform(el.transform);
    const host = document.querySelector('#parallel-chart').getBoundingClientRect();
    return { text: el.style.text, z: el.z, lineZ, x: host.x + r.x + r.width / 2, y: host.y + r.y + r.height / 2 };
  });
  assert.ok(label, 'the long category label is drawn');
  assert.ok(label.text.endsWith('…') && label.text.length <= 14, `truncated: ${label.text}`);
  assert.ok(label.z > label.lineZ, 'category labels above the lines');
  await page.mouse.move(label.x, label.y);
  await until('category label tooltip', async () => /arch = residual-wide-512x4-dropout · \d+ trials?/.test(
    await page.$eval('#parallel-tip', (t) => (t.hidden ? '' : t.textContent))), 3000).catch((e) => {
    throw new Error(`${e.message}; label ${JSON.stringify(label)}`);
  });
  await page.mouse.move(5, 5);
}

/* The trial table fits its card at 1400 px; narrower, it scrolls inside the
 * card and the right edge says so until it is scrolled to the end. */
async function checkTableOverflow() {
  const wrap = '.table-card .table-wrap';
  const fits = await page.$eval(wrap, (w) => w.scrollWidth <= w.clientWidth);
  assert.ok(fits, 'the trial table fits at 1400 px');
  assert.equal(await page.$eval('.table-card', (c) => c.classList.contains('more-right')), false);
  await page.setViewportSize({ width: 760, height: 900 });
  await until('"scroll" mark on a clipped table', () => page.$eval('.table-card', (c) => c.classList.contains('more-right')), 3000);
  await page.$eval(wrap, (w) => { w.scrollLeft = w.scrollWidth; });
  await until('mark gone at the right end', async () => !(await page.$eval('.table-card', (c) => c.classList.contains('more-right'))), 3000);
  await page.setViewportSize({ width: 1400, height: 900 });
}

/* Life of a trial: when the events overflow the box (forced small here), it
 * scrolls pinned to the newest, so the last event is in view. */
async function checkTimelineScroll(trialId) {
  const style = await page.addStyleTag({ content: '.timeline { max-height: 100px !important; }' });
  await page.goto(`${URL}/#/trials/${trialId}`);
  await page.waitForSelector('.page[data-page="trial"][data-loaded]');
  await until('timeline pinned to the newest event', () => page.$eval('#trial-events', (ul) => {
    const last = ul.lastElementChild.getBoundingClientRect(), box = ul.getBoundingClientRect();
    return ul.children.length > 4 && ul.scrollTop > 0 && last.bottom <= box.bottom + 1 && last.top >= box.top;
  }), 5000);
  assert.match(await page.textContent('#trial-events-note'), /scroll up for earlier/);
  await style.evaluate((el) => el.remove());
}

test('the agents page lists the agent with its slots and heartbeat', async () => {
  await page.click('nav a[data-nav="agents"]');
  await page.waitForSelector('#agents-table tbody tr[data-id]');
  const row = await page.textContent('#agents-table tbody tr[data-id]');
  assert.match(row, /web-a1/);
  assert.match(row, /ALIVE/);
  assert.match(row, /\/ 4/);
  assert.match(row, /ago|just now/);
  await shot('agents');
});

test('no console errors or uncaught exceptions on any page', () => {
  assert.deepEqual(problems, []);
});
