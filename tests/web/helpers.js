// tests/web/helpers.js — what the browser suites (tests/web/*.test.js)
// share: a JSON client of the scheduler's API with one token, polling
// until a condition holds, headless Chromium, and full-page screenshots.
'use strict';
const path = require('node:path');
const { chromium } = require('playwright-core');

/* api(method, path, body) against url with token; throws on non-2xx (the
 * Error carries .status). */
function apiClient(url, token) {
  return async function api(method, p, body) {
    const res = await fetch(url + p, {
      method, headers: { Authorization: 'Bearer ' + token, 'Content-Type': 'application/json' },
      body: body === undefined ? undefined : JSON.stringify(body),
    });
    const json = await res.json().catch(() => null);
    if (!res.ok) throw Object.assign(new Error(`${method} ${p}: ${res.status} ${JSON.stringify(json)}`), { status: res.status });
    return json;
  };
}

/* The same with run.sh's user token (HF_URL, HF_USER_TOKEN); the thrown
 * Error carries .status. */
const api = (method, p, body) => apiClient(process.env.HF_URL, process.env.HF_USER_TOKEN)(method, p, body);

/* Poll fn until it returns something truthy (returned); throws after timeoutMs. */
async function until(what, fn, timeoutMs = 20000, everyMs = 200) {
  const t0 = Date.now();
  let last;
  for (;;) {
    try { last = await fn(); if (last) return last; } catch (e) { last = e; }
    if (Date.now() - t0 > timeoutMs) throw new Error(`timed out after ${timeoutMs} ms waiting for ${what} (last: ${last})`);
    await new Promise((r) => setTimeout(r, everyMs));
  }
}

/* Debian's chromium, headless, never a downloaded browser. */
function launch() {
  return chromium.launch({
    executablePath: process.env.CHROMIUM || '/usr/bin/chromium',
    args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run',
      '--disable-background-networking', '--disable-component-update', '--disable-sync'],
  });
}

/* A full-page screenshot dir/PREFIX-NAME.png, with the toast hidden. */
async function screenshot(page, dir, file) {
  await page.evaluate(() => { document.getElementById('toast').hidden = true; });
  await page.screenshot({ path: path.join(dir, file), fullPage: true });
}

module.exports = { api, apiClient, until, launch, screenshot };
