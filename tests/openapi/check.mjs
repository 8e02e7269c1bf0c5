#!/usr/bin/env node
// tests/openapi/check.mjs — docs/openapi.yaml against standard tools and a
// live scheduler (driven by tests/system/test_eco_openapi.sh).
//
//   node check.mjs validate SPEC OUT.json
//       Validate SPEC with @apidevtools/swagger-parser (OpenAPI 3.0 schema
//       and $ref resolution, as editors and code generators read it) and
//       write it as plain JSON for jq. Exit 1 with the validator's message.
//   node check.mjs responses SPEC MANIFEST.tsv
//       MANIFEST lines: METHOD \t SPEC_PATH \t STATUS \t CONTENT_TYPE \t BODY_FILE.
//       Each recorded answer must be documented for its operation and status
//       with its content type, and a JSON body must validate (Ajv) against
//       the documented schema. A documented JSON response without a schema,
//       or a body where the document promises none, is an error too.
//       Prints one line per problem and exits 1 if there was any.
import fs from 'node:fs';
import SwaggerParser from '@apidevtools/swagger-parser';
import Ajv from 'ajv';

const [cmd, specPath, arg] = process.argv.slice(2);
if (!cmd || !specPath || !arg) {
  console.error('usage: check.mjs validate SPEC OUT.json | responses SPEC MANIFEST.tsv');
  process.exit(2);
}

if (cmd === 'validate') {
  try {
    // validate() dereferences in place: parse a fresh copy for the JSON.
    await SwaggerParser.validate(specPath);
    const api = await SwaggerParser.parse(specPath);
    fs.writeFileSync(arg, JSON.stringify(api));
    console.log(`ok: ${specPath} is a valid OpenAPI ${api.openapi} document (${Object.keys(api.paths).length} paths)`);
  } catch (e) {
    console.error(`${specPath}: not a valid OpenAPI document: ${e.message}`);
    process.exit(1);
  }
  process.exit(0);
}

if (cmd !== 'responses') {
  console.error(`check.mjs: unknown command '${cmd}'`);
  process.exit(2);
}

const api = await SwaggerParser.dereference(specPath);
// OpenAPI 3.0 schema objects are JSON Schema plus a few keywords (nullable,
// example, ...): Ajv knows nullable; strict mode off lets the others pass.
const ajv = new Ajv({ strict: false, allErrors: true });
const cache = new Map();
const problems = [];
let checked = 0, validated = 0;

for (const line of fs.readFileSync(arg, 'utf8').split('\n')) {
  if (!line.trim()) continue;
  const [method, path, status, ctypeRaw, bodyFile] = line.split('\t');
  const where = `${method} ${path} -> ${status}`;
  checked++;
  const op = api.paths?.[path]?.[method.toLowerCase()];
  if (!op) { problems.push(`${where}: no such operation in the document`); continue; }
  const resp = op.responses?.[status];
  if (!resp) { problems.push(`${where}: status not documented`); continue; }
  const body = fs.readFileSync(bodyFile);
  const ctype = (ctypeRaw || '').split(';')[0].trim().toLowerCase();
  if (!resp.content) {
    if (body.length) problems.push(`${where}: answered a ${ctype || 'untyped'} body; the document says it has none`);
    continue;
  }
  const media = resp.content[ctype];
  if (!media) {
    problems.push(`${where}: content type '${ctype}' not documented (documented: ${Object.keys(resp.content).join(', ')})`);
    continue;
  }
  if (ctype !== 'application/json') continue;   // text/csv, text/plain, SSE: type string
  if (!media.schema) { problems.push(`${where}: application/json documented without a schema`); continue; }
  let value;
  try {
    value = JSON.parse(body.toString('utf8'));
  } catch (e) {
    problems.push(`${where}: body is not JSON: ${e.message}`);
    continue;
  }
  const key = `${method} ${path} ${status}`;
  if (!cache.has(key)) {
    try {
      cache.set(key, ajv.compile(media.schema));
    } catch (e) {
      problems.push(`${where}: the documented schema does not compile: ${e.message}`);
      continue;
    }
  }
  const validate = cache.get(key);
  if (!validate(value)) {
    const errs = validate.errors.slice(0, 5).map(e => `${e.instancePath || '/'} ${e.message}`).join('; ');
    problems.push(`${where}: body does not match the schema: ${errs} (body: ${body.toString('utf8').slice(0, 200)})`);
    continue;
  }
  validated++;
}

for (const p of problems) console.log(`FAIL ${p}`);
console.log(`${checked} answers checked, ${validated} JSON bodies validated against their schemas, ${problems.length} problems`);
process.exit(problems.length ? 1 : 0);
