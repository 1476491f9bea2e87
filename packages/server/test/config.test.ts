import { existsSync, mkdtempSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { type AddressInfo, createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { KINDS_BY_PROVIDER_TYPE, type ModelKind, PROVIDER_TYPES } from '@gw/schema';
import { startSimulator } from '@gw/simulator';
import { startRedis } from '@gw/testkit';
import { describe, expect, it } from 'vitest';
import { ConfigError, loadConfig, parseConfigText } from '../src/config/index.js';
import { createAdapter } from '../src/providers/index.js';
import { runGatewayToExit, spawnGateway } from './helpers/process.js';

const good = `
providers:
  - id: alpha
    type: openai
    baseUrl: http://127.0.0.1:9101/v1
    apiKey: \${ALPHA_API_KEY}
    region: fr-par
    timeoutMs: 30000
models:
  - id: mistral/small
    kind: chat
    owned_by: mistral
    context_window: 32000
    capabilities: [streaming, tools, json]
    offers:
      - provider: alpha
        upstreamModel: mistral-small-latest
        pricing: { prompt_per_1m: 0.20, completion_per_1m: 0.60, currency: EUR }
`;

describe('config file', () => {
  it('reads the INTERFACES.md example and substitutes $' + '{ENV} references', () => {
    const c = parseConfigText(good, 'gw.yaml', { ALPHA_API_KEY: 'sk-alpha' });
    expect(c.providers[0]?.apiKey).toBe('sk-alpha');
    expect(c.models[0]?.offers[0]?.pricing.prompt_per_1m).toBe(0.2);
  });

  it('takes the provider an openai-type entry is where its host does not say, and its rules follow', () => {
    const c = parseConfigText(good.replace('region: fr-par', 'region: fr-par\n    vendor: scaleway'), 'gw.yaml', { ALPHA_API_KEY: 'k' });
    const provider = c.providers[0];
    if (!provider) throw new Error('no provider');
    expect(provider.vendor).toBe('scaleway');
    expect(createAdapter(provider).vendor).toBe('scaleway');
    expect(createAdapter({ ...provider, vendor: undefined } as typeof provider).vendor).toBe('generic');
    expect(() => parseConfigText(good.replace('region: fr-par', 'region: fr-par\n    vendor: aws'), 'gw.yaml', { ALPHA_API_KEY: 'k' })).toThrowError(
      /\/providers\/0\/vendor: expected one of "scaleway", "ovhcloud"/,
    );
  });

  it('refuses a vendor on an entry that is not of the openai type, where it would be ignored', () => {
    const mistral = good.replace('type: openai', 'type: mistral').replace('region: fr-par', 'region: fr-par\n    vendor: scaleway');
    expect(() => parseConfigText(mistral, 'gw.yaml', { ALPHA_API_KEY: 'k' })).toThrowError(
      /gw\.yaml at \/providers\/0\/vendor: expected no vendor on a mistral provider/,
    );
  });

  it('refuses an apiVersion on an entry that is not of the azure type, where it would be ignored', () => {
    const openai = good.replace('region: fr-par', 'region: fr-par\n    apiVersion: 2024-10-21');
    expect(() => parseConfigText(openai, 'gw.yaml', { ALPHA_API_KEY: 'k' })).toThrowError(
      /gw\.yaml at \/providers\/0\/apiVersion: expected no apiVersion on a provider of type openai/,
    );
    const azure = openai.replace('type: openai', 'type: azure');
    expect(parseConfigText(azure, 'gw.yaml', { ALPHA_API_KEY: 'k' }).providers[0]?.apiVersion).toBe('2024-10-21');
  });

  it('refuses a provider key or admin token that a header cannot carry, without showing it', () => {
    // A secret read from a file (a mounted Kubernetes secret, `echo k > file`) ends with a line break: the key would
    // fail every upstream call as 'cannot reach', the token refuse every admin call.
    expect(() => parseConfigText(good, 'gw.yaml', { ALPHA_API_KEY: 'sk-alpha-0123456789\n' })).toThrowError(
      /\/providers\/0\/apiKey: expected a key a request header can carry, without a line break/,
    );
    expect(() => parseConfigText(good, 'gw.yaml', { ALPHA_API_KEY: 'sk alpha' })).toThrowError(/apiKey: expected .* without whitespace/);
    expect(() => loadConfig({ GW_ADMIN_TOKEN: 'admin-token-0123456789\n' })).toThrowError(
      /GW_ADMIN_TOKEN: expected a token an Authorization header can carry, without a line break/,
    );
    expect(() => loadConfig({ GW_ADMIN_TOKEN: 'admin-tökén-0123456789' })).toThrowError(/GW_ADMIN_TOKEN: .*outside printable ASCII/);
    expect(loadConfig({ GW_ADMIN_TOKEN: 'admin-token-0123456789' }).adminToken).toBe('admin-token-0123456789');
    try {
      loadConfig({ GW_ADMIN_TOKEN: 'admin-token-0123456789\n' });
    } catch (err) {
      expect(String(err)).not.toContain('admin-token-0123456789');
    }
  });

  it('refuses a ${ that names no variable (a shell default, no closing brace) rather than send it as the key', () => {
    const env = { ALPHA_API_KEY: 'sk-alpha-Secret' };
    expect(() => parseConfigText(good.replace(`\${ALPHA_API_KEY}`, `\${ALPHA_API_KEY:-}`), 'gw.yaml', env)).toThrowError(
      /gw\.yaml at \/providers\/0\/apiKey: expected \$\{NAME\} to name an environment variable \(letters, digits and _; no default value\), not \$\{ALPHA_API_KEY:-\}$/,
    );
    expect(() => parseConfigText(good.replace(`\${ALPHA_API_KEY}`, `\${ALPHA_API_KEY`), 'gw.yaml', env)).toThrowError(
      /\/providers\/0\/apiKey: expected .* not a \$\{ with no closing \}$/,
    );
    // A reference written with spaces is shown as written, not as an unclosed one.
    expect(() => parseConfigText(good.replace(`\${ALPHA_API_KEY}`, `\${ ALPHA_API_KEY }`), 'gw.yaml', env)).toThrowError(/not \$\{ ALPHA_API_KEY \}$/);
    // What a variable holds is not read as a reference.
    expect(parseConfigText(good, 'gw.yaml', { ALPHA_API_KEY: `a\${b` }).providers[0]?.apiKey).toBe(`a\${b`);
  });

  it('reads $${ as a literal ${, as compose files escape it, beside references in the same string', () => {
    const escaped = good.replace(`\${ALPHA_API_KEY}`, () => `pre-$\${LITERAL}-\${ALPHA_API_KEY}-$$`);
    const config = parseConfigText(escaped, 'gw.yaml', { ALPHA_API_KEY: 'k', LITERAL: 'not-read' });
    expect(config.providers[0]?.apiKey).toBe(`pre-\${LITERAL}-k-$$`);
  });

  it('reads a variable in a number or boolean field as the number or boolean it holds, and still refuses one that is not', () => {
    const withVars = good.replace('timeoutMs: 30000', `timeoutMs: \${TIMEOUT_MS}`).replace('owned_by: mistral', `owned_by: mistral\n    beta: \${BETA}`);
    const config = parseConfigText(withVars, 'gw.yaml', { ALPHA_API_KEY: 'k', TIMEOUT_MS: '12000', BETA: 'true' });
    expect([config.providers[0]?.timeoutMs, config.models[0]?.beta]).toEqual([12000, true]);
    expect(() => parseConfigText(withVars, 'gw.yaml', { ALPHA_API_KEY: 'k', TIMEOUT_MS: '12s', BETA: 'true' })).toThrowError(
      /\/providers\/0\/timeoutMs: expected/,
    );
  });

  it('takes an empty key (from a variable set but empty) as no key: a local upstream needs none', () => {
    expect(parseConfigText(good, 'gw.yaml', { ALPHA_API_KEY: '' }).providers[0]?.apiKey).toBe('');
    expect(parseConfigText(good.replace(`apiKey: \${ALPHA_API_KEY}`, "apiKey: ''"), 'gw.yaml', {}).providers[0]?.apiKey).toBe('');
  });

  it('names the file, the field path and what was expected', () => {
    const cases: [string, Record<string, string>, RegExp][] = [
      [
        good.replace('type: openai', 'type: grpc'),
        { ALPHA_API_KEY: 'k' },
        /gw\.yaml at \/providers\/0\/type: expected one of "openai", "mistral", "azure", "cohere"/,
      ],
      [good, {}, /gw\.yaml at \/providers\/0\/apiKey: expected environment variable ALPHA_API_KEY to be set/],
      [good.replace('kind: chat', 'kind: video'), { ALPHA_API_KEY: 'k' }, /\/models\/0\/kind/],
      [
        good.replace('provider: alpha', 'provider: beta'),
        { ALPHA_API_KEY: 'k' },
        /\/models\/0\/offers\/0\/provider: expected one of the providers' ids \(alpha\), not beta/,
      ],
      [good.replace('prompt_per_1m: 0.20', 'prompt_per_1m: cheap'), { ALPHA_API_KEY: 'k' }, /\/models\/0\/offers\/0\/pricing\/prompt_per_1m: expected number/],
      ['providers: [', {}, /gw\.yaml at \/: expected valid YAML/],
      // Matches ^https?:// yet is no URL: named here, not an "Invalid URL" from deep in the start.
      [
        good.replace('http://127.0.0.1:9101/v1', 'http://127.0.0.1:99999/v1'),
        { ALPHA_API_KEY: 'k' },
        /\/providers\/0\/baseUrl: expected an http\(s\) URL that parses/,
      ],
      // A chat model offered by a rerank/embeddings provider would be a 400 on every request, blaming the client.
      [
        good.replace('type: openai', 'type: cohere'),
        { ALPHA_API_KEY: 'k' },
        /\/models\/0\/offers\/0\/provider: expected a provider that serves chat models \(alpha is of type cohere/,
      ],
      // Budgets add costs up in EUR.
      [good.replace('currency: EUR', 'currency: USD'), { ALPHA_API_KEY: 'k' }, /\/models\/0\/offers\/0\/pricing\/currency/],
      // A misspelt field is told the one it meant; an unknown one, the fields allowed there.
      [good.replace('baseUrl:', 'baseURL:'), { ALPHA_API_KEY: 'k' }, /\/providers\/0\/baseURL: expected no such property \(did you mean 'baseUrl'\?\)/],
      [
        good.replace('upstreamModel:', 'upstream_model:'),
        { ALPHA_API_KEY: 'k' },
        /upstream_model: expected no such property \(did you mean 'upstreamModel'\?\)/,
      ],
      [good.replace('region:', 'zone:'), { ALPHA_API_KEY: 'k' }, /\/providers\/0\/zone: expected no such property \(allowed here: id, type, baseUrl/],
      // A field given with the wrong type is named, not another one the file lacks.
      ['providers: 5\n', {}, /gw\.yaml at \/providers: expected array/],
      ['{}\n', {}, /gw\.yaml at \/(providers|models): expected (required property|array)/],
      // A field the file lacks says so, rather than reading as a value of the wrong type.
      [good.replace('    owned_by: mistral\n', ''), { ALPHA_API_KEY: 'k' }, /gw\.yaml at \/models\/0\/owned_by: expected string \(the field is missing\)/],
      // A request's model is at most 200 characters: a longer id was listed, and every chat request naming it refused.
      [
        good.replace('id: mistral/small', `id: mistral/${'s'.repeat(193)}`),
        { ALPHA_API_KEY: 'k' },
        /gw\.yaml at \/models\/0\/id: expected a string of at most 200 characters/,
      ],
    ];
    for (const [text, env, message] of cases) {
      expect(() => parseConfigText(text, 'gw.yaml', env)).toThrowError(message);
    }
  });

  it('requires the fields README calls required, naming the one left out, and reads the example without the optional ones', () => {
    const required: [string, string][] = [
      ['id: alpha\n    ', '/providers/0/id'],
      ['    type: openai\n', '/providers/0/type'],
      ['    baseUrl: http://127.0.0.1:9101/v1\n', '/providers/0/baseUrl'],
      ['    region: fr-par\n', '/providers/0/region'],
      ['    kind: chat\n', '/models/0/kind'],
      ['    owned_by: mistral\n', '/models/0/owned_by'],
      ['        upstreamModel: mistral-small-latest\n', '/models/0/offers/0/upstreamModel'],
    ];
    for (const [line, path] of required) {
      expect(good).toContain(line);
      expect(() => parseConfigText(good.replace(line, ''), 'gw.yaml', { ALPHA_API_KEY: 'k' })).toThrowError(`gw.yaml at ${path}: expected`);
    }
    for (const field of ['prompt_per_1m: 0.20, ', 'completion_per_1m: 0.60, ', ', currency: EUR'])
      expect(() => parseConfigText(good.replace(field, ''), 'gw.yaml', { ALPHA_API_KEY: 'k' })).toThrowError('/models/0/offers/0/pricing/');
    const optional = good
      .replace(`    apiKey: \${ALPHA_API_KEY}\n`, '')
      .replace('    timeoutMs: 30000\n', '')
      .replace('    context_window: 32000\n', '')
      .replace('    capabilities: [streaming, tools, json]\n', '');
    const c = parseConfigText(optional, 'gw.yaml', {});
    expect(c.providers[0]?.apiKey).toBeUndefined();
    expect(c.models[0]?.context_window).toBeUndefined();
  });

  it('knows what each provider type serves as its adapter does', async () => {
    for (const type of PROVIDER_TYPES) {
      const adapter = createAdapter({ id: `p_${type}`, type, baseUrl: 'http://127.0.0.1:9/v1', region: 'x' });
      const serves = {
        embedding: typeof adapter.embeddings === 'function',
        rerank: typeof adapter.rerank === 'function',
        audio: typeof adapter.transcribe === 'function',
      };
      for (const [kind, has] of Object.entries(serves))
        expect([type, kind, KINDS_BY_PROVIDER_TYPE[type].includes(kind as ModelKind)]).toEqual([type, kind, has]);
      await adapter.close();
    }
  });

  it("refuses a rerank or audio offer on Cohere's OpenAI compatibility API, which no request could use, and takes its chat and embeddings", () => {
    // An openai-type entry at Cohere's compatibility API (by its host, or vendor: cohere behind a proxy). Cohere's
    // native model list names its rerank and transcription models, so such an offer was listed and then failed
    // every request: transcriptions as Cohere's 400 (it answers json only and requires a language; the adapter asks
    // verbose_json), reranks at a path the API does not have.
    const catalogue = (baseUrl: string, kind: string, extra = '') => `
providers:
  - id: cohere-compat
    type: openai
    baseUrl: ${baseUrl}
    apiKey: \${ALPHA_API_KEY}
    region: eu${extra}
  - id: voxtral
    type: mistral
    baseUrl: https://api.mistral.ai/v1
    apiKey: \${ALPHA_API_KEY}
    region: eu
models:
  - id: test/model
    kind: ${kind}
    owned_by: cohere
    offers:
      - provider: cohere-compat
        upstreamModel: some-model
        pricing: { prompt_per_1m: 0.20, completion_per_1m: 0.60, currency: EUR }
`;
    const env = { ALPHA_API_KEY: 'k' };
    for (const host of ['https://api.cohere.ai/compatibility/v1', 'https://api.cohere.com/compatibility/v1']) {
      expect(() => parseConfigText(catalogue(host, 'audio'), 'gw.yaml', env)).toThrowError(
        /^Invalid configuration in gw\.yaml at \/models\/0\/offers\/0\/provider: expected a provider that serves audio models \(cohere-compat is Cohere's OpenAI compatibility API \(told by the host of its baseUrl\), whose transcriptions answer response_format json only, .* require a language, which a request may leave out; these do: voxtral\)$/,
      );
      expect(() => parseConfigText(catalogue(host, 'rerank'), 'gw.yaml', env)).toThrowError(
        /at \/models\/0\/offers\/0\/provider: expected a provider that serves rerank models \(cohere-compat is Cohere's OpenAI compatibility API \(told by the host of its baseUrl\), which has no rerank call \(Cohere's rerank is its native API: a provider of type cohere at https:\/\/api\.cohere\.com\)\)$/,
      );
      for (const kind of ['chat', 'embedding']) expect(parseConfigText(catalogue(host, kind), 'gw.yaml', env).models[0]?.kind).toBe(kind);
    }
    // Behind a proxy the entry's vendor says which API it is.
    const proxy = 'http://127.0.0.1:9/cohere';
    expect(() => parseConfigText(catalogue(proxy, 'audio', '\n    vendor: cohere'), 'gw.yaml', env)).toThrowError(
      /serves audio models \(cohere-compat is Cohere's OpenAI compatibility API \(vendor: cohere\), whose transcriptions/,
    );
    expect(() => parseConfigText(catalogue(proxy, 'rerank', '\n    vendor: cohere'), 'gw.yaml', env)).toThrowError(
      /\(vendor: cohere\), which has no rerank call/,
    );
    // The same offers on any other OpenAI-compatible host (Scaleway's rerank and transcriptions, a vLLM server) start.
    for (const [url, extra] of [
      [proxy, ''],
      ['https://api.scaleway.ai/v1', ''],
      [proxy, '\n    vendor: scaleway'],
    ] as const) {
      for (const kind of ['rerank', 'audio']) expect(parseConfigText(catalogue(url, kind, extra), 'gw.yaml', env).models[0]?.kind).toBe(kind);
    }
  });

  it("an audio offer on Cohere's OpenAI compatibility API stops the start with exit code 2, naming the offer and why, where every transcription was a 400 blamed on the client", async () => {
    const dir = mkdtempSync(join(tmpdir(), 'gw-unservable-'));
    try {
      const file = join(dir, 'gw.yaml');
      const config = good
        .replace('http://127.0.0.1:9101/v1', 'https://api.cohere.ai/compatibility/v1')
        .replace('kind: chat', 'kind: audio')
        .replace('currency: EUR }', 'currency: EUR, per_unit: 0.0001 }');
      writeFileSync(file, config);
      const { code, output } = await runGatewayToExit({ GW_CONFIG: file, GW_DATA_DIR: join(dir, 'data'), ALPHA_API_KEY: 'sk-alpha-S3cretKey' });
      expect(code).toBe(2);
      expect(output).toContain(
        `Invalid configuration in ${file} at /models/0/offers/0/provider: expected a provider that serves audio models (alpha is Cohere's OpenAI compatibility API (told by the host of its baseUrl), whose transcriptions answer response_format json only`,
      );
      expect(output).not.toContain('S3cretKey');
      expect(output).not.toContain('listening on');
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  }, 60_000);

  it('reads a JSON file saved with a byte order mark', () => {
    const json = JSON.stringify(parseConfigText(good, 'gw.yaml', { ALPHA_API_KEY: 'k' }));
    expect(parseConfigText(`\uFEFF${json}`, 'gw.json', {}).models[0]?.id).toBe('mistral/small');
  });

  it('validates the environment', () => {
    expect(() => loadConfig({ PORT: 'eighty' })).toThrowError(ConfigError);
    expect(() => loadConfig({ DATABASE_URL: 'mysql://x' })).toThrowError(/DATABASE_URL: expected a postgres:\/\/ URL/);
    // URLs that fail only when used are named at start.
    expect(() => loadConfig({ DATABASE_URL: 'postgres://u:p@[bad/db' })).toThrowError(/DATABASE_URL: expected a postgres:\/\/ URL that parses/);
    expect(() => loadConfig({ REDIS_URL: 'redis://[bad:6379' })).toThrowError(/REDIS_URL: expected a redis:\/\/ URL that parses/);
    // libpq's socket form with a user and no host: told the two forms a URL can carry, both of which start.
    expect(() => loadConfig({ DATABASE_URL: 'postgres://gw@/gw?host=/run/postgresql' })).toThrowError(
      /for a Unix socket, give its directory percent-encoded as the host \(postgres:\/\/user@%2Frun%2Fpostgresql\/db\) or leave the host and user out/,
    );
    expect(loadConfig({ DATABASE_URL: 'postgres://gw@%2Frun%2Fpostgresql/gw' }).databaseUrl).toBe('postgres://gw@%2Frun%2Fpostgresql/gw');
    expect(loadConfig({ DATABASE_URL: 'postgres:///gw?host=/run/postgresql&user=gw' }).databaseUrl).toBe('postgres:///gw?host=/run/postgresql&user=gw');
    expect(() => loadConfig({ GW_SECRET: 'x' })).toThrowError(/GW_SECRET: expected at least 32 characters/);
    // Set but empty (an unset variable in a deploy script) is not a request for demo mode.
    expect(() => loadConfig({ GW_CONFIG: '' })).toThrowError(/GW_CONFIG: expected a config file path/);
    expect(() => loadConfig({ GW_LOG_LEVEL: 'verbose' })).toThrowError(
      /GW_LOG_LEVEL: expected one of fatal, error, warn, info, debug, trace, silent, not "verbose"/,
    );
    expect(loadConfig({ GW_LOG_LEVEL: 'warn' }).logLevel).toBe('warn');
    expect(loadConfig({}).port).toBe(8080);
    expect(loadConfig({}).registryIntervalS).toBe(21_600);
    // Longer than a Node timer can wait, it would fire every millisecond.
    expect(loadConfig({ GW_REGISTRY_INTERVAL_S: '2147483' }).registryIntervalS).toBe(2_147_483);
    expect(() => loadConfig({ GW_REGISTRY_INTERVAL_S: '2147484' })).toThrowError(/GW_REGISTRY_INTERVAL_S: expected an integer from 1 to 2147483/);
  });

  it('takes an integer variable only as plain decimal digits, trimmed', () => {
    expect(loadConfig({ PORT: '80' }).port).toBe(80);
    expect(loadConfig({ PORT: ' 80\n' }).port).toBe(80);
    expect(loadConfig({ PORT: '0080' }).port).toBe(80);
    // Each of these is a number to Number(), and was taken as one.
    for (const raw of ['0x50', '1e3', '80.0', '80.5', '+80', '-0', '0b1010000', '0o120', '8_0', 'Infinity']) {
      expect(() => loadConfig({ PORT: raw }), raw).toThrowError(`PORT: expected an integer from 0 to 65535, not ${JSON.stringify(raw)}`);
    }
    // Empty or blank is unset, alike: the default.
    for (const raw of ['', ' ', '\n'])
      expect(loadConfig({ PORT: raw, GW_SHUTDOWN_TIMEOUT_MS: raw }), JSON.stringify(raw)).toMatchObject({ port: 8080, shutdownTimeoutMs: 30_000 });
    expect(() => loadConfig({ GW_BODY_LIMIT_BYTES: '4e6' })).toThrowError(/GW_BODY_LIMIT_BYTES: expected an integer from 1024/);
  });

  it('a port given in hex stops the start with exit code 2, naming PORT', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'gw-port-'));
    try {
      const { code, output } = await runGatewayToExit({ PORT: '0x50', GW_DATA_DIR: join(dir, 'data') });
      expect(code).toBe(2);
      expect(output).toContain('PORT: expected an integer from 0 to 65535, not "0x50"');
      expect(output).not.toContain('listening on');
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  }, 60_000);

  it('a DATABASE_URL or REDIS_URL set but empty stops the start with exit code 2, rather than run embedded or in-process', async () => {
    // `DATABASE_URL=\${DATABASE_URL}` in a deploy file whose variable is missing: taken as unset, the gateway started on
    // a PGlite store in GW_DATA_DIR (keys and usage apart from the database meant) or an unshared in-process limiter.
    const dir = mkdtempSync(join(tmpdir(), 'gw-empty-url-'));
    try {
      for (const [name, expected] of [
        ['DATABASE_URL', 'DATABASE_URL: expected a postgres:// URL (it is set but empty; unset it for the embedded store in GW_DATA_DIR)'],
        ['REDIS_URL', 'REDIS_URL: expected a redis:// URL (it is set but empty; unset it for the in-process limiter of a single instance)'],
      ] as const) {
        const { code, output } = await runGatewayToExit({ [name]: '', GW_DATA_DIR: join(dir, 'data') });
        expect(code, name).toBe(2);
        expect(output.trim()).toBe(`gw: Invalid configuration in environment at ${expected}`);
        expect(() => loadConfig({ [name]: ' \n' })).toThrowError(expected);
      }
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  }, 60_000);

  it('a GW_ADMIN_TOKEN or GW_SECRET set but empty (or only whitespace) stops the start with exit code 2, rather than leave the admin API off without a word', async () => {
    // `GW_ADMIN_TOKEN=` in a unit file: taken as unset, every admin call answered 404 and nothing said why.
    const dir = mkdtempSync(join(tmpdir(), 'gw-empty-admin-'));
    const expected = 'GW_ADMIN_TOKEN: expected a token of at least 16 characters (it is set but empty; unset it to leave the admin API off)';
    try {
      for (const value of ['', '   ']) {
        const { code, output } = await runGatewayToExit({ GW_ADMIN_TOKEN: value, GW_DATA_DIR: join(dir, 'data') });
        expect(code, JSON.stringify(value)).toBe(2);
        expect(output.trim()).toBe(`gw: Invalid configuration in environment at ${expected}`);
      }
      expect(() => loadConfig({ GW_ADMIN_TOKEN: ' \n' })).toThrowError(expected);
      // GW_SECRET likewise: taken as unset, a generated secret signed what the operator's own could not check.
      expect(() => loadConfig({ GW_SECRET: '' })).toThrowError(
        'GW_SECRET: expected at least 32 characters (it is set but empty; unset it to have one generated and kept in the store)',
      );
      expect(() => loadConfig({ GW_SECRET: '  ' })).toThrowError('GW_SECRET: expected at least 32 characters (it is set but empty');
      // Unset, the API is off, as before; too short, the start stops too.
      expect(loadConfig({}).adminToken).toBeNull();
      expect(() => loadConfig({ GW_ADMIN_TOKEN: 'short-token' })).toThrowError('GW_ADMIN_TOKEN: expected at least 16 characters');
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  }, 60_000);

  it('a REDIS_URL whose path is no database number stops the start with exit code 2, naming REDIS_URL, not with a stack trace', async () => {
    // Redis reads the path as the database: `/cache` was sent as SELECT NaN, whose refusal crashed the process.
    const [dir, server] = [mkdtempSync(join(tmpdir(), 'gw-redis-path-')), await startRedis()];
    try {
      const { code, output } = await runGatewayToExit({ REDIS_URL: `${server.url}/cache`, GW_DATA_DIR: join(dir, 'data') });
      expect(code).toBe(2);
      expect(output.trim()).toBe(
        'gw: Invalid configuration in environment at REDIS_URL: expected a redis:// URL whose path, if any, is a database number (/0, /1, …)',
      );
      for (const path of ['', '/', '/0', '/15']) expect(loadConfig({ REDIS_URL: `${server.url}${path}` }).redisUrl).toBe(`${server.url}${path}`);
    } finally {
      await server.stop();
      rmSync(dir, { recursive: true, force: true });
    }
  }, 60_000);

  it('a REDIS_URL naming a database this Redis does not have stops the start with exit code 2, rather than using database 0', async () => {
    // Redis refuses SELECT 16 (16 databases by default); its client went on in database 0 without a word.
    const [dir, server] = [mkdtempSync(join(tmpdir(), 'gw-redis-db-')), await startRedis()];
    try {
      const { code, output } = await runGatewayToExit({ REDIS_URL: `${server.url}/16`, GW_DATA_DIR: join(dir, 'data') });
      expect(code).toBe(2);
      expect(output.trim()).toMatch(
        /^gw: Invalid configuration in environment at REDIS_URL: expected a database this Redis has; it refused the one the path names \(ERR .*out of range\)$/,
      );
      expect(output).not.toContain('listening on');
    } finally {
      await server.stop();
      rmSync(dir, { recursive: true, force: true });
    }
  }, 60_000);

  it('a HOST that is no address (a URL, a port, brackets) stops the start with exit code 2, naming HOST', async () => {
    // It failed only at listen, with exit code 1, once the store was opened.
    const dir = mkdtempSync(join(tmpdir(), 'gw-host-'));
    try {
      const { code, output } = await runGatewayToExit({ HOST: '127.0.0.1:8080', GW_DATA_DIR: join(dir, 'data') });
      expect(code).toBe(2);
      expect(output.trim()).toBe(
        'gw: Invalid configuration in environment at HOST: expected an IP address or host name to listen on (no scheme, port or brackets), not "127.0.0.1:8080"',
      );
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
    for (const raw of ['http://0.0.0.0', '[::1]', 'not..a..host', '0.0.0.0/0']) {
      expect(() => loadConfig({ HOST: raw }), raw).toThrowError(
        `HOST: expected an IP address or host name to listen on (no scheme, port or brackets), not ${JSON.stringify(raw)}`,
      );
    }
    // Trimmed, as a number is; every form of address a listener takes is still taken.
    expect(loadConfig({ HOST: ' 127.0.0.1\n' }).host).toBe('127.0.0.1');
    for (const ok of ['0.0.0.0', '::', '::1', 'localhost', 'gw-1.internal.example.net', 'my_service']) expect(loadConfig({ HOST: ok }).host).toBe(ok);
    expect(loadConfig({}).host).toBe('127.0.0.1');
    for (const blank of ['', ' ']) expect(loadConfig({ HOST: blank, GW_LOG_LEVEL: blank })).toMatchObject({ host: '127.0.0.1', logLevel: 'info' });
  }, 60_000);

  it('a GW_DATA_DIR or GW_UPLOAD_DIR set but empty stops the start with exit code 2, rather than keep the store in ./data of wherever it ran', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'gw-empty-dir-'));
    try {
      const { code, output } = await runGatewayToExit({ GW_DATA_DIR: '' }, dir);
      expect(code).toBe(2);
      expect(output).toContain('GW_DATA_DIR: expected a directory the gateway can create and write to (it is set but empty; unset it for ./data)');
      expect(existsSync(join(dir, 'data'))).toBe(false);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
    expect(() => loadConfig({ GW_UPLOAD_DIR: ' ' })).toThrowError(
      'GW_UPLOAD_DIR: expected a directory the gateway can create and write to (it is set but empty; unset it for the OS temp dir)',
    );
    expect(() => loadConfig({ GW_DATA_DIR: '', DATABASE_URL: 'postgres://127.0.0.1/gw' })).toThrowError(
      'GW_DATA_DIR: expected a directory (it is set but empty',
    );
  }, 60_000);

  it('makes GW_UPLOAD_DIR at start, and stops the start if it cannot', () => {
    const base = mkdtempSync(join(tmpdir(), 'gw-upload-dir-'));
    const dir = join(base, 'spool', 'uploads');
    expect(loadConfig({ GW_UPLOAD_DIR: dir }).uploadDir).toBe(dir);
    expect(existsSync(dir)).toBe(true);
    writeFileSync(join(base, 'a-file'), '');
    expect(() => loadConfig({ GW_UPLOAD_DIR: join(base, 'a-file', 'below') })).toThrowError(
      /GW_UPLOAD_DIR: expected a directory the gateway can create and write to/,
    );
    // Embedded, the data directory is checked the same way.
    expect(() => loadConfig({ GW_DATA_DIR: join(base, 'a-file', 'data') })).toThrowError(
      /GW_DATA_DIR: expected a directory the gateway can create and write to/,
    );
    rmSync(base, { recursive: true, force: true });
  });

  it('a GW_DATA_DIR or GW_UPLOAD_DIR under /proc, where no directory can be made, stops the start at once with exit code 2 (it hung)', async () => {
    // Node's recursive mkdir never ends there: /proc exists, yet refuses a child with ENOENT.
    const dir = mkdtempSync(join(tmpdir(), 'gw-proc-dir-'));
    try {
      for (const [name, env] of [
        ['GW_DATA_DIR', { GW_DATA_DIR: '/proc/gw-data/pglite' }],
        ['GW_UPLOAD_DIR', { GW_UPLOAD_DIR: '/proc/gw-uploads', GW_DATA_DIR: join(dir, 'data') }],
      ] as const) {
        const started = Date.now();
        const { code, output } = await runGatewayToExit(env);
        expect(code).toBe(2);
        expect(output.trim()).toBe(
          `gw: Invalid configuration in environment at ${name}: expected a directory the gateway can create and write to, not "${env[name]}" (ENOENT)`,
        );
        expect(Date.now() - started).toBeLessThan(15_000);
      }
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  }, 60_000);

  it('an admin token with a line break stops the start with exit code 2, as any bad variable does', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'gw-token-'));
    try {
      const { code, output } = await runGatewayToExit({ GW_ADMIN_TOKEN: 'admin-token-S3cret-0123\n', GW_DATA_DIR: join(dir, 'data') });
      expect(code).toBe(2);
      expect(output).toContain('GW_ADMIN_TOKEN: expected a token an Authorization header can carry, without a line break');
      expect(output).not.toContain('S3cret');
      expect(output).not.toContain('listening on');
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  }, 60_000);

  it('a bad config stops the process with a clear message, a non-zero exit and no secret', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'gw-cfg-'));
    const file = join(dir, 'gw.yaml');
    writeFileSync(file, good.replace('region: fr-par', 'region: 42'));
    const { code, output } = await runGatewayToExit({ GW_CONFIG: file, GW_DATA_DIR: join(dir, 'data'), ALPHA_API_KEY: 'sk-secret-value-123' });
    expect(code).toBe(2);
    expect(output).toContain(file);
    expect(output).toContain('/providers/0/region');
    expect(output).toContain('expected string');
    expect(output).not.toContain('sk-secret-value-123');
  });

  it('a GW_CONFIG path with no file, a directory, or a file in its path stops the start naming GW_CONFIG and why, in words', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'gw-cfg-path-'));
    try {
      writeFileSync(join(dir, 'a-file'), '');
      for (const [path, why] of [
        [join(dir, 'missing.yaml'), 'ENOENT: there is no such file'],
        [dir, 'EISDIR: it is a directory'],
        [join(dir, 'a-file', 'gw.yaml'), 'ENOTDIR: a part of the path is a file, not a directory'],
      ] as const) {
        const { code, output } = await runGatewayToExit({ GW_CONFIG: path, GW_DATA_DIR: join(dir, 'data') });
        expect(code).toBe(2);
        expect(output.trim()).toBe(`gw: Invalid configuration in ${path} at /: expected a readable file, the one GW_CONFIG names (${why})`);
      }
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  }, 60_000);

  it('a GW_CONFIG that never ends (/dev/zero) stops the start at a size bound, where it was read until memory ran out', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'gw-cfg-endless-'));
    try {
      const { code, output } = await runGatewayToExit({ GW_CONFIG: '/dev/zero', GW_DATA_DIR: join(dir, 'data') });
      expect(code).toBe(2);
      expect(output.trim()).toBe(
        'gw: Invalid configuration in /dev/zero at /: expected a file of at most 16 MiB; this one goes on past it (a device such as /dev/zero?)',
      );
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  }, 60_000);

  it('a shell default in a reference stops the start without showing the default, which is most often the key itself', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'gw-cfg-default-'));
    try {
      const file = join(dir, 'gw.yaml');
      writeFileSync(file, good.replace(`\${ALPHA_API_KEY}`, `\${ALPHA_API_KEY:-3kTq9ZsPr0viderKey77}`));
      const { code, output } = await runGatewayToExit({ GW_CONFIG: file, GW_DATA_DIR: join(dir, 'data') });
      expect(code).toBe(2);
      expect(output).toContain(`/providers/0/apiKey: expected \${NAME} to name an environment variable`);
      expect(output).toContain(`not \${ALPHA_API_KEY:-…}`);
      expect(output).not.toContain('3kTq9Z');
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it('a baseUrl with a user and password, a query string or a fragment stops the start, the password never shown', async () => {
    // The adapters call the URL's origin and path: these parts were dropped without a word (Basic credentials for a
    // proxy never sent, an Azure ?api-version= never used).
    const dir = mkdtempSync(join(tmpdir(), 'gw-cfg-url-'));
    try {
      const file = join(dir, 'gw.yaml');
      writeFileSync(file, good.replace('http://127.0.0.1:9101/v1', 'http://proxy:hunter2-Pa55word@127.0.0.1:9101/v1'));
      const { code, output } = await runGatewayToExit({ GW_CONFIG: file, GW_DATA_DIR: join(dir, 'data'), ALPHA_API_KEY: 'k' });
      expect(code).toBe(2);
      expect(output.trim()).toBe(
        `gw: Invalid configuration in ${file} at /providers/0/baseUrl: expected a URL without a user or password (they are never sent; the provider's key goes in apiKey), not "http://***@127.0.0.1:9101/v1"`,
      );
      // One that does not parse either is shown with its password masked.
      const unparsable = good.replace('http://127.0.0.1:9101/v1', 'https://proxy:hunter2-Pa55word@127.0.0.1:99999/v1');
      expect(() => parseConfigText(unparsable, 'gw.yaml', { ALPHA_API_KEY: 'k' })).toThrowError(
        /\/providers\/0\/baseUrl: expected an http\(s\) URL that parses, not "https:\/\/\*\*\*@127\.0\.0\.1:99999\/v1"$/,
      );
      const azure = good.replace('type: openai', 'type: azure').replace('http://127.0.0.1:9101/v1', 'https://res.openai.azure.com?api-version=2024-10-21');
      expect(() => parseConfigText(azure, 'gw.yaml', { ALPHA_API_KEY: 'k' })).toThrowError(
        /\/providers\/0\/baseUrl: expected a URL without a query string \(it is never sent; Azure's api-version goes in apiVersion\)/,
      );
      expect(() => parseConfigText(good.replace('/v1', '/v1#chat'), 'gw.yaml', { ALPHA_API_KEY: 'k' })).toThrowError(
        /\/providers\/0\/baseUrl: expected a URL without a fragment/,
      );
      // A trailing slash is no mistake: the path is taken without it.
      expect(parseConfigText(good.replace('/v1', '/v1/'), 'gw.yaml', { ALPHA_API_KEY: 'k' }).providers[0]?.baseUrl).toBe('http://127.0.0.1:9101/v1/');
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it('a baseUrl refused for its query string or for not parsing never shows a key it holds', async () => {
    // Proxies and cloud functions take their key in the URL (`?code=`, `?key=`), often from a variable: the message
    // printed it. A password with an unencoded `/` or `#` makes the URL unparsable, and was printed whole.
    const dir = mkdtempSync(join(tmpdir(), 'gw-cfg-url-secret-'));
    try {
      const file = join(dir, 'gw.yaml');
      writeFileSync(file, good.replace('http://127.0.0.1:9101/v1', `https://fn.example.net/api/v1?code=\${FUNCTION_KEY}`));
      const { code, output } = await runGatewayToExit({
        GW_CONFIG: file,
        GW_DATA_DIR: join(dir, 'data'),
        ALPHA_API_KEY: 'k',
        FUNCTION_KEY: 'fn-key-S3cret-0123',
      });
      expect(code).toBe(2);
      expect(output.trim()).toBe(
        `gw: Invalid configuration in ${file} at /providers/0/baseUrl: expected a URL without a query string (it is never sent; Azure's api-version goes in apiVersion), not "https://fn.example.net/api/v1?***"`,
      );
      for (const password of ['ab/cd-S3cret', 'ab#cd-S3cret', 'ab?cd-S3cret']) {
        const unparsable = good.replace('http://127.0.0.1:9101/v1', `http://proxy:${password}@127.0.0.1:9101/v1`);
        expect(() => parseConfigText(unparsable, 'gw.yaml', { ALPHA_API_KEY: 'k' })).toThrowError(
          /baseUrl: expected .*, not "http:\/\/\*\*\*@127\.0\.0\.1:9101\/v1"$/,
        );
        expect(() => parseConfigText(unparsable, 'gw.yaml', { ALPHA_API_KEY: 'k' })).not.toThrowError(/S3cret/);
      }
      expect(() => parseConfigText(good.replace('/v1', '/v1#key=S3cret'), 'gw.yaml', { ALPHA_API_KEY: 'k' })).toThrowError(
        /expected a URL without a fragment \(#…\), not "http:\/\/127\.0\.0\.1:9101\/v1#\*\*\*"$/,
      );
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it('a region a response header cannot carry stops the start, where every variant B answer was a 500 after the provider was called', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'gw-cfg-region-'));
    try {
      const file = join(dir, 'gw.yaml');
      // An en dash, as a region name pasted from a document comes.
      writeFileSync(file, good.replace('region: fr-par', 'region: fr\u2013par'));
      const { code, output } = await runGatewayToExit({ GW_CONFIG: file, GW_DATA_DIR: join(dir, 'data'), ALPHA_API_KEY: 'k' });
      expect(code).toBe(2);
      expect(output.trim()).toBe(
        `gw: Invalid configuration in ${file} at /providers/0/region: expected a region an X-Gateway-Region header can carry (printable ASCII), not "fr\u2013par"`,
      );
      for (const region of ['île-de-france', ' fr-par', 'fr-par\t']) {
        expect(() => parseConfigText(good.replace('region: fr-par', `region: ${JSON.stringify(region)}`), 'gw.yaml', { ALPHA_API_KEY: 'k' })).toThrowError(
          /\/providers\/0\/region: expected a region an X-Gateway-Region header can carry/,
        );
      }
      for (const region of ['eu-west-1', 'westeurope', 'Paris 1']) {
        expect(parseConfigText(good.replace('region: fr-par', `region: ${region}`), 'gw.yaml', { ALPHA_API_KEY: 'k' }).providers[0]?.region).toBe(region);
      }
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it('refuses one offer given twice in a model, which fail-over would try twice and whose price would be unclear', () => {
    const offer = `      - provider: alpha
        upstreamModel: mistral-small-latest
        pricing: { prompt_per_1m: 0.10, completion_per_1m: 0.30, currency: EUR }
`;
    expect(() => parseConfigText(`${good}${offer}`, 'gw.yaml', { ALPHA_API_KEY: 'k' })).toThrowError(
      /gw\.yaml at \/models\/0\/offers\/1: expected an offer not given twice \(alpha with upstreamModel mistral-small-latest is \/models\/0\/offers\/0 too\)$/,
    );
    // The same provider under another upstream name is another offer.
    const other = offer.replace('upstreamModel: mistral-small-latest', 'upstreamModel: mistral-small-2506');
    expect(parseConfigText(`${good}${other}`, 'gw.yaml', { ALPHA_API_KEY: 'k' }).models[0]?.offers).toHaveLength(2);
  });

  it('a JSON config with a provider key written without its quotes stops the start naming where, not quoting the key', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'gw-cfg-json-'));
    try {
      const file = join(dir, 'gw.json');
      writeFileSync(file, '{\n  "providers": [\n    {"id": "alpha", "type": "openai", "apiKey": sk-live-Unquoted5ecret}\n  ]\n}\n');
      const { code, output } = await runGatewayToExit({ GW_CONFIG: file, GW_DATA_DIR: join(dir, 'data') });
      expect(code).toBe(2);
      expect(output.trim()).toBe(`gw: Invalid configuration in ${file} at /: expected valid JSON (Unexpected token in JSON at line 3 column 49)`);
      // The same for a token that V8 quotes with the whole (short) text around it.
      expect(() => parseConfigText('[1,]', 'gw.json', {})).toThrowError(/expected valid JSON \(Unexpected token in JSON at line 1 column 4\)$/);
      expect(() => parseConfigText('undefined', 'gw.json', {})).toThrowError(/expected valid JSON \(Unexpected token in JSON at line 1 column 1\)$/);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it('a key written twice in a JSON config stops the start, where the last one silently won', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'gw-cfg-dup-'));
    try {
      const file = join(dir, 'gw.json');
      const config = parseConfigText(good, 'gw.yaml', { ALPHA_API_KEY: 'k' });
      // A second "models" (one list per team, pasted together) dropped the first list whole.
      const text = JSON.stringify({ providers: config.providers, models: config.models }, null, 2).replace(/\n}$/, ',\n  "models": []\n}');
      writeFileSync(file, text);
      const { code, output } = await runGatewayToExit({ GW_CONFIG: file, GW_DATA_DIR: join(dir, 'data') });
      expect(code).toBe(2);
      expect(output.trim()).toBe(
        `gw: Invalid configuration in ${file} at /: expected valid JSON (Map keys must be unique at line ${text.split('\n').length - 1}, column 3)`,
      );
      expect(() => parseConfigText('{"providers": [{"id": "a", "id": "b"}]}', 'gw.json', {})).toThrowError(/expected valid JSON \(Map keys must be unique/);
      // The same key in two objects is no repeat.
      expect(() => parseConfigText('{"providers": [{"id": "a"}, {"id": "b"}]}', 'gw.json', {})).toThrowError(/\/providers\/0\/type/);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it('an empty file, a file that is no mapping or an empty list stops the start in plain words, not the validator’s', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'gw-cfg-empty-'));
    try {
      const cases = [
        ['empty.yaml', '', '/', 'providers and models (the config file is empty)'],
        ['comments.yaml', '# to fill in\n', '/', 'providers and models (the config file is empty)'],
        ['empty.json', '\n', '/', 'providers and models (the config file is empty)'],
        ['list.yaml', '- alpha\n', '/', 'a mapping with providers and models at the top of the file'],
        ['no-providers.yaml', good.replace(/providers:[\s\S]*?models:/, 'providers: []\nmodels:'), '/providers', 'at least one provider (the list is empty)'],
        ['no-offers.yaml', good.replace(/offers:[\s\S]*$/, 'offers: []\n'), '/models/0/offers', 'at least one offer (the list is empty)'],
      ] as const;
      for (const [name, text, path, expected] of cases) {
        const file = join(dir, name);
        writeFileSync(file, text);
        const { code, output } = await runGatewayToExit({ GW_CONFIG: file, GW_DATA_DIR: join(dir, 'data'), ALPHA_API_KEY: 'k' });
        expect([name, code, output.trim()]).toEqual([name, 2, `gw: Invalid configuration in ${file} at ${path}: expected ${expected}`]);
      }
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it('a YAML tag the gateway does not know (!env, !secret) stops the start, without quoting the line that holds it', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'gw-cfg-tag-'));
    try {
      const file = join(dir, 'gw.yaml');
      writeFileSync(file, good.replace(`apiKey: \${ALPHA_API_KEY}`, 'apiKey: !secret sk-live-Tagged5ecret'));
      const { code, output } = await runGatewayToExit({ GW_CONFIG: file, GW_DATA_DIR: join(dir, 'data') });
      expect(code).toBe(2);
      expect(output.trim()).toBe(`gw: Invalid configuration in ${file} at /: expected valid YAML (Unresolved tag: !secret at line 6, column 13:)`);
      // Read as a plain string, `!env NAME` sent the variable's name as the key.
      expect(() => parseConfigText(good.replace(`\${ALPHA_API_KEY}`, '!env ALPHA_API_KEY'), 'gw.yaml', { ALPHA_API_KEY: 'k' })).toThrowError(
        /expected valid YAML \(Unresolved tag: !env/,
      );
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it('a database that cannot be reached stops the start naming DATABASE_URL, its password hidden', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'gw-db-down-'));
    try {
      const { code, output } = await runGatewayToExit({ DATABASE_URL: 'postgres://u:hunter2secret@127.0.0.1:9/gw', GW_DATA_DIR: join(dir, 'data') });
      expect(code).toBe(1);
      expect(output).toMatch(/cannot open the database at DATABASE_URL \(postgres:\/\/u:\*\*\*@127\.0\.0\.1:9\/gw\): .*ECONNREFUSED/);
      expect(output).not.toContain('hunter2secret');
      // The password as a query parameter, which pg reads too.
      const query = await runGatewayToExit({
        DATABASE_URL: 'postgres://u@127.0.0.1:9/gw?sslmode=disable&password=QueryPwS3cret',
        GW_DATA_DIR: join(dir, 'data'),
      });
      expect(query.output).toContain('postgres://u@127.0.0.1:9/gw?sslmode=disable&password=***');
      expect(query.output).not.toContain('QueryPwS3cret');
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  }, 60_000);

  it('a per_unit price on a chat or embedding offer, which nothing would bill, stops the start with exit code 2, naming the field', async () => {
    // It was accepted and ignored: the operator's price per unit never billed, the token prices billed instead.
    const dir = mkdtempSync(join(tmpdir(), 'gw-per-unit-'));
    try {
      writeFileSync(join(dir, 'gw.yaml'), good.replace('currency: EUR }', 'currency: EUR, per_unit: 0.001 }'));
      const { code, output } = await runGatewayToExit({ GW_CONFIG: join(dir, 'gw.yaml'), GW_DATA_DIR: join(dir, 'data'), ALPHA_API_KEY: 'sk-alpha-S3cretKey' });
      expect(code).toBe(2);
      expect(output).toContain(
        `Invalid configuration in ${join(dir, 'gw.yaml')} at /models/0/offers/0/pricing/per_unit: expected no per_unit here (mistral/small is of kind chat, billed by prompt_per_1m and completion_per_1m`,
      );
      expect(output).not.toContain('S3cretKey');
      expect(output).not.toContain('listening on');
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
    const embedding = good.replace('kind: chat', 'kind: embedding').replace('currency: EUR }', 'currency: EUR, per_unit: 0.001 }');
    expect(() => parseConfigText(embedding, 'gw.yaml', { ALPHA_API_KEY: 'k' })).toThrowError(
      /gw\.yaml at \/models\/0\/offers\/0\/pricing\/per_unit: expected no per_unit here \(mistral\/small is of kind embedding,/,
    );
  }, 60_000);

  it('a rerank or audio offer priced as INTERFACES.md shows (tokens, no per_unit) starts, with one warning each saying how it is billed', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'gw-token-priced-'));
    const offer = (upstream: string, perUnit = '') =>
      `    offers:\n      - provider: alpha\n        upstreamModel: ${upstream}\n        pricing: { prompt_per_1m: 0.20, completion_per_1m: 0.60, currency: EUR${perUnit} }\n`;
    const config = `${good}  - id: baai/rerank\n    kind: rerank\n    owned_by: baai\n${offer('bge-reranker')}  - id: openai/whisper\n    kind: audio\n    owned_by: openai\n${offer('whisper-large-v3')}  - id: cohere/rerank\n    kind: rerank\n    owned_by: cohere\n${offer('rerank-v3.5', ', per_unit: 0.002')}`;
    writeFileSync(join(dir, 'gw.yaml'), config.replace('http://127.0.0.1:9101/v1', 'http://127.0.0.1:9/v1'));
    const gw = await spawnGateway({ GW_CONFIG: join(dir, 'gw.yaml'), GW_DATA_DIR: join(dir, 'data'), ALPHA_API_KEY: 'sk-alpha-S3cretKey' });
    try {
      const warnings = gw
        .output()
        .split('\n')
        .filter((l) => l.includes('has no pricing.per_unit'));
      expect(warnings).toHaveLength(2);
      expect(warnings[0]).toMatch(/"level":40.*baai\/rerank's offer from alpha .*billed by tokens at prompt_per_1m \(0\.2 EUR a million tokens\)/);
      expect(warnings[1]).toMatch(
        /"level":40.*openai\/whisper's offer from alpha .*12\.5 tokens per audio second .*completion_per_1m \(0\.6 EUR a million tokens\)/,
      );
      expect(gw.output()).not.toContain('S3cretKey');
    } finally {
      gw.child.kill('SIGTERM');
      await gw.exited;
      rmSync(dir, { recursive: true, force: true });
    }
  }, 60_000);

  it('a GW_* variable the gateway does not read is warned of at start, named with the one meant, never its value', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'gw-env-typo-'));
    // A variable the config file names is no typo, GW_ prefix or not.
    writeFileSync(join(dir, 'gw.yaml'), good.replace(`\${ALPHA_API_KEY}`, `\${GW_ALPHA_KEY}`));
    const gw = await spawnGateway({
      GW_CONFIG: join(dir, 'gw.yaml'),
      GW_DATA_DIR: join(dir, 'data'),
      GW_ALPHA_KEY: 'sk-alpha-Value-1',
      GW_ADMIN_TOKNE: 'admin-S3cret-Value-2',
      GW_UPLOAD_LIMIT: '99999-Value-3',
      GW_STREAM: 'Value-4',
      GW_NOTHING_ALIKE: 'Value-5',
    });
    try {
      const warnings = gw
        .output()
        .split('\n')
        .filter((l) => l.includes('reads no such variable'))
        .map((l) => JSON.parse(l) as { level: number; variable: string; msg: string });
      expect(warnings.map((w) => [w.level, w.variable, w.msg])).toEqual([
        [40, 'GW_ADMIN_TOKNE', 'GW_ADMIN_TOKNE is set, but the gateway reads no such variable: it is ignored; did you mean GW_ADMIN_TOKEN?'],
        [40, 'GW_NOTHING_ALIKE', 'GW_NOTHING_ALIKE is set, but the gateway reads no such variable: it is ignored (README lists the variables it reads)'],
        [
          40,
          'GW_STREAM',
          'GW_STREAM is set, but the gateway reads no such variable: it is ignored; did you mean GW_STREAM_GRACE_S, GW_STREAM_MEMORY_MB or GW_STREAM_HEARTBEAT_MS?',
        ],
        [40, 'GW_UPLOAD_LIMIT', 'GW_UPLOAD_LIMIT is set, but the gateway reads no such variable: it is ignored; did you mean GW_UPLOAD_LIMIT_BYTES?'],
      ]);
      expect(gw.output()).not.toMatch(/Value-\d/);
      // Not an error: it serves.
      expect((await fetch(`${gw.url}/healthz`)).status).toBe(200);
    } finally {
      gw.child.kill('SIGTERM');
      await gw.exited;
      rmSync(dir, { recursive: true, force: true });
    }
  }, 60_000);

  it('the first start’s example request names a model this gateway serves (none yet: the model list)', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'gw-banner-'));
    // Its only provider does not answer: no model is served yet.
    writeFileSync(join(dir, 'gw.yaml'), good.replace('http://127.0.0.1:9101/v1', 'http://127.0.0.1:9/v1'));
    const gw = await spawnGateway({ GW_CONFIG: join(dir, 'gw.yaml'), GW_DATA_DIR: join(dir, 'data'), ALPHA_API_KEY: 'k' });
    try {
      expect(gw.output()).toMatch(/Try: curl http:\/\/127\.0\.0\.1:\d+\/v1\/models -H "Authorization: Bearer gw_live_/);
      expect(gw.output()).not.toContain('"model":"mistral/small"');
    } finally {
      gw.child.kill('SIGTERM');
      await gw.exited;
      rmSync(dir, { recursive: true, force: true });
    }
  }, 60_000);

  it('the start counts one model as one model, not "1 models" (the README example config)', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'gw-banner-'));
    const sim = await startSimulator({ latencyScale: 0 });
    writeFileSync(
      join(dir, 'gw.yaml'),
      good.replace('http://127.0.0.1:9101/v1', sim.providers.scaleway.baseUrl).replace('mistral-small-latest', 'mistral-small-3.2-24b-instruct-2506'),
    );
    const gw = await spawnGateway({ GW_CONFIG: join(dir, 'gw.yaml'), GW_DATA_DIR: join(dir, 'data'), ALPHA_API_KEY: sim.providers.scaleway.apiKey });
    try {
      expect(gw.output()).toContain(`providers from ${join(dir, 'gw.yaml')}: 1 model\n`);
    } finally {
      gw.child.kill('SIGTERM');
      await gw.exited;
      await sim.close();
      rmSync(dir, { recursive: true, force: true });
    }
  }, 60_000);

  it('a YAML config whose provider is written from another’s anchor with a merge key (<<: *alpha) starts and routes to it', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'gw-merge-'));
    const sim = await startSimulator({ latencyScale: 0 });
    const yaml = `
providers:
  - &alpha
    id: alpha
    type: openai
    baseUrl: ${sim.providers.scaleway.baseUrl}
    apiKey: \${ALPHA_API_KEY}
    region: fr-par
  - <<: *alpha
    id: beta
    region: fr-par-2
models:
  - id: mistral/small
    kind: chat
    owned_by: mistral
    offers:
      - provider: alpha
        upstreamModel: mistral-small-3.2-24b-instruct-2506
        pricing: &price { prompt_per_1m: 0.20, completion_per_1m: 0.60, currency: EUR }
      - { provider: beta, upstreamModel: mistral-small-3.2-24b-instruct-2506, pricing: *price }
`;
    writeFileSync(join(dir, 'gw.yaml'), yaml);
    const gw = await spawnGateway({ GW_CONFIG: join(dir, 'gw.yaml'), GW_DATA_DIR: join(dir, 'data'), ALPHA_API_KEY: sim.providers.scaleway.apiKey });
    try {
      const key = /shown once, keep it\): (gw_live_\S+)/.exec(gw.output())?.[1];
      const res = await fetch(`${gw.url}/alt/v1/chat/completions`, {
        method: 'POST',
        headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json', 'x-gateway-provider': 'beta' },
        body: JSON.stringify({ model: 'mistral/small', messages: [{ role: 'user', content: 'hi' }], max_tokens: 4 }),
      });
      expect([res.status, res.headers.get('x-gateway-provider'), res.headers.get('x-gateway-region')]).toEqual([200, 'beta', 'fr-par-2']);
      // The merged key, substituted as the anchor's own: the simulator refuses a wrong one.
      expect(sim.providers.scaleway.stats().last?.headers.authorization).toBe(`Bearer ${sim.providers.scaleway.apiKey}`);
    } finally {
      gw.child.kill('SIGTERM');
      await gw.exited;
      await sim.close();
      rmSync(dir, { recursive: true, force: true });
    }
  }, 60_000);

  it('SIGHUP stops the gateway cleanly, as SIGTERM does (Node would exit at once, dropping what is in flight)', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'gw-hup-'));
    const gw = await spawnGateway({ GW_DATA_DIR: join(dir, 'data') });
    try {
      gw.child.kill('SIGHUP');
      expect(await gw.exited).toBe(0);
      expect(gw.output()).toMatch(/"signal":"SIGHUP".*draining/);
    } finally {
      if (gw.child.exitCode === null) gw.child.kill('SIGKILL');
      rmSync(dir, { recursive: true, force: true });
    }
  }, 60_000);

  it('a shutdown timeout too short for the drain itself stops the start; the shortest allowed stops an idle gateway cleanly', async () => {
    // GW_SHUTDOWN_TIMEOUT_MS=0 was taken, and every SIGTERM, even of an idle instance, then exited 1 with "shutdown timed
    // out" before the last usage records were written.
    const dir = mkdtempSync(join(tmpdir(), 'gw-shutdown-timeout-'));
    try {
      const refused = await runGatewayToExit({ GW_SHUTDOWN_TIMEOUT_MS: '0', GW_DATA_DIR: join(dir, 'data') });
      expect(refused.code).toBe(2);
      expect(refused.output.trim()).toBe(
        'gw: Invalid configuration in environment at GW_SHUTDOWN_TIMEOUT_MS: expected an integer from 1000 to 600000, not "0"',
      );
      const gw = await spawnGateway({ GW_SHUTDOWN_TIMEOUT_MS: '1000', GW_DATA_DIR: join(dir, 'data') });
      try {
        gw.child.kill('SIGTERM');
        expect(await gw.exited).toBe(0);
        expect(gw.output()).not.toContain('shutdown timed out');
      } finally {
        if (gw.child.exitCode === null) gw.child.kill('SIGKILL');
      }
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  }, 60_000);

  it('a port already taken, a HOST not of this machine or one that does not resolve stop the start before the store is opened', async () => {
    // They were found only once the embedded store had been created and opened: seconds (13 s on a loaded machine)
    // before the operator learnt of a typo. The store's files in the data directory are the witness.
    const dir = mkdtempSync(join(tmpdir(), 'gw-listen-early-'));
    const busy = createServer();
    await new Promise<void>((r) => busy.listen(0, '127.0.0.1', () => r()));
    const port = String((busy.address() as AddressInfo).port);
    try {
      const cases: [Record<string, string>, RegExp][] = [
        [{ PORT: port }, new RegExp(`^gw: failed to start: cannot listen on 127\\.0\\.0\\.1:${port} \\(HOST, PORT\\): listen EADDRINUSE`)],
        // TEST-NET-1 (RFC 5737): never an address of a machine.
        [{ HOST: '192.0.2.1', PORT: '8080' }, /^gw: failed to start: cannot listen on 192\.0\.2\.1:8080 \(HOST, PORT\): listen EADDRNOTAVAIL/],
        [
          { HOST: 'gw-host.invalid', PORT: '8080' },
          /^gw: failed to start: cannot listen on gw-host\.invalid:8080 \(HOST, PORT\): getaddrinfo (ENOTFOUND|EAI_AGAIN)/,
        ],
      ];
      for (const [env, message] of cases) {
        const dataDir = join(dir, 'data');
        const failed = await runGatewayToExit({ ...env, GW_DATA_DIR: dataDir });
        expect(failed.code).toBe(1);
        expect(failed.output).toMatch(message);
        // Made by the configuration's check, empty: no store was created in it.
        expect(readdirSync(dataDir)).toEqual([]);
        rmSync(dataDir, { recursive: true, force: true });
      }
    } finally {
      busy.close();
      rmSync(dir, { recursive: true, force: true });
    }
  }, 60_000);

  it('a start that cannot listen says which address, and leaves no first key behind that no later start would print', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'gw-listen-'));
    const busy = createServer();
    await new Promise<void>((r) => busy.listen(0, '127.0.0.1', () => r()));
    const port = String((busy.address() as AddressInfo).port);
    try {
      const failed = await runGatewayToExit({ PORT: port, GW_DATA_DIR: join(dir, 'data') });
      expect(failed.code).toBe(1);
      expect(failed.output).toMatch(new RegExp(`cannot listen on 127\\.0\\.0\\.1:${port} \\(HOST, PORT\\): .*EADDRINUSE`));
      expect(failed.output).not.toContain('first API key');
      const next = await spawnGateway({ GW_DATA_DIR: join(dir, 'data') });
      try {
        expect(next.output()).toMatch(/Created the first API key \(shown once, keep it\): gw_live_/);
      } finally {
        next.child.kill('SIGTERM');
        await next.exited;
      }
    } finally {
      busy.close();
      rmSync(dir, { recursive: true, force: true });
    }
  }, 60_000);
});
