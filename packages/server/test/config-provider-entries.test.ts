import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { startSimulator } from '@gw/simulator';
import { describe, expect, it } from 'vitest';
import { parseConfigText } from '../src/config/index.js';
import { entryWarnings } from '../src/config/provider-entry.js';
import { runGatewayToExit, spawnGateway } from './helpers/process.js';

/** One provider entry and one model of a kind its type serves. */
/** `${KEY}` as the file writes it. */
const KEY_REF = ['$', '{KEY}'].join('');

function catalogue(type: string, baseUrl: string, extra = '', apiKey = KEY_REF): string {
  const kind = type === 'cohere' ? 'rerank' : 'chat';
  return `
providers:
  - id: alpha
    type: ${type}
    baseUrl: ${baseUrl}
    apiKey: ${apiKey}
    region: eu${extra}
models:
  - id: test/model
    kind: ${kind}
    owned_by: test
    offers:
      - provider: alpha
        upstreamModel: some-model
        pricing: { prompt_per_1m: 0.20, completion_per_1m: 0.60, currency: EUR, per_unit: 0.001 }
`.replace(kind === 'chat' ? ', per_unit: 0.001' : '\0', '');
}

const KEY = 'sk-S3cret-0123456789';
const parse = (text: string, key = KEY) => parseConfigText(text, 'gw.yaml', { KEY: key });

describe('provider entries an operator commonly gets wrong', () => {
  it('stops the start on a base URL no call could work with, naming the field and the URL it should be', () => {
    const refused: [type: string, baseUrl: string, message: RegExp][] = [
      // Cohere's OpenAI compatibility API as a native entry: every rerank went to /compatibility/v1/v2/rerank.
      [
        'cohere',
        'https://api.cohere.com/compatibility/v1',
        /at \/providers\/0\/baseUrl: expected Cohere's native API at its root \(https:\/\/api\.cohere\.com: the adapter adds \/v2\/rerank, \/v2\/embed\); \/compatibility\/v1 is its OpenAI compatibility API, a provider of type openai, not "https:\/\/api\.cohere\.com\/compatibility\/v1"$/,
      ],
      ['cohere', 'http://127.0.0.1:9/compatibility/v1/', /baseUrl: expected Cohere's native API at its root/],
      [
        'cohere',
        'https://api.cohere.com/v2',
        /baseUrl: expected Cohere's root \(https:\/\/api\.cohere\.com: the adapter adds \/v2\/rerank, \/v2\/embed and \/v1\/models\), not "https:\/\/api\.cohere\.com\/v2"$/,
      ],
      ['cohere', 'http://127.0.0.1:9/cohere/v2/rerank', /baseUrl: expected the API's root, without an operation's path/],
      // And the reverse: an openai entry at Cohere's native root called /chat/completions there.
      [
        'openai',
        'https://api.cohere.com',
        /baseUrl: expected Cohere's OpenAI compatibility API at https:\/\/api\.cohere\.com\/compatibility\/v1 \(Cohere's native API, for rerank, is a provider of type cohere at https:\/\/api\.cohere\.com\), not "https:\/\/api\.cohere\.com\/"$/,
      ],
      ['openai', 'https://api.cohere.ai/v1', /baseUrl: expected Cohere's OpenAI compatibility API at https:\/\/api\.cohere\.ai\/compatibility\/v1/],
      // Azure AI Foundry's serverless and model inference endpoints have none of the deployment paths.
      [
        'azure',
        'https://my-mistral.swedencentral.inference.ai.azure.com',
        /baseUrl: expected an Azure OpenAI resource \(https:\/\/\{resource\}\.openai\.azure\.com\): a serverless Azure AI Foundry endpoint has none of its deployment paths; it is OpenAI-compatible, a provider of type openai at its \/v1, not/,
      ],
      [
        'azure',
        'https://res.services.ai.azure.com/models',
        /baseUrl: expected the resource's origin \(https:\/\/res\.services\.ai\.azure\.com: .*\); \/models is the Azure AI model inference API, not Azure OpenAI, not "https:\/\/res\.services\.ai\.azure\.com\/models"$/,
      ],
      // Azure's v1 base as the OpenAI SDK takes it, or a whole deployment URL: /openai/v1/openai/v1/chat/completions.
      [
        'azure',
        'https://res.openai.azure.com/openai/v1/',
        /baseUrl: expected the resource's origin \(https:\/\/res\.openai\.azure\.com: the adapter adds \/openai\/v1\/… without apiVersion/,
      ],
      ['azure', 'https://res.openai.azure.com/openai/deployments/gpt-4o/chat/completions', /baseUrl: expected the resource's origin/],
      ['azure', 'http://127.0.0.1:9/openai/deployments/gpt-4o', /baseUrl: expected the resource's origin, without an operation's or deployment's path/],
      // An operation's path pasted with the base.
      [
        'openai',
        'http://127.0.0.1:9/v1/chat/completions',
        /baseUrl: expected the API's base, without an operation's path \(http:\/\/127\.0\.0\.1:9\/v1: the adapter adds/,
      ],
      ['openai', 'http://127.0.0.1:9/v1/embeddings', /without an operation's path \(http:\/\/127\.0\.0\.1:9\/v1:/],
      ['openai', 'http://127.0.0.1:9/v1/models/', /without an operation's path \(http:\/\/127\.0\.0\.1:9\/v1:/],
      ['mistral', 'http://127.0.0.1:9/v1/audio/transcriptions', /without an operation's path \(http:\/\/127\.0\.0\.1:9\/v1:/],
      // A host whose API is under /v1, given without it.
      [
        'mistral',
        'https://api.mistral.ai',
        /baseUrl: expected https:\/\/api\.mistral\.ai\/v1 \(the adapter adds \/chat\/completions, \/embeddings and \/models to it\), not "https:\/\/api\.mistral\.ai\/"$/,
      ],
      ['mistral', 'https://api.mistral.ai/v1/chat/completions', /baseUrl: expected https:\/\/api\.mistral\.ai\/v1 /],
      ['openai', 'https://api.scaleway.ai', /baseUrl: expected the API's base, which ends in \/v1 on this host/],
      ['openai', 'https://api.tokenfactory.nebius.com/', /ends in \/v1 on this host/],
    ];
    for (const [type, url, message] of refused) expect(() => parse(catalogue(type, url)), `${type} ${url}`).toThrowError(message);
    // What works today still starts: a trailing slash, a project-scoped path, a proxy's own path, a resource's origin.
    const taken: [string, string, string?][] = [
      ['mistral', 'https://api.mistral.ai/v1/'],
      ['openai', 'https://api.scaleway.ai/0f9d6c1e-project/v1'],
      ['openai', 'https://api.cohere.ai/compatibility/v1/'],
      ['openai', 'https://europe-west4-aiplatform.googleapis.com/v1/projects/p/locations/europe-west4/endpoints/openapi'],
      ['openai', 'https://my-mistral.swedencentral.inference.ai.azure.com/v1'],
      ['openai', 'http://127.0.0.1:9/cohere', '\n    vendor: cohere'],
      ['cohere', 'https://api.cohere.com/'],
      ['cohere', 'http://127.0.0.1:9/cohere'],
      ['azure', 'https://res.openai.azure.com/', '\n    apiVersion: 2025-04-01-preview'],
      ['azure', 'https://res.services.ai.azure.com'],
      ['azure', 'http://127.0.0.1:9/azure-proxy'],
    ];
    for (const [type, url, extra] of taken) expect(parse(catalogue(type, url, extra)).providers[0]?.baseUrl, `${type} ${url}`).toBe(url);
  });

  it('stops the start on a key as a copied header, an env file or an unexpanded variable left it, never showing it', () => {
    const refused: [key: string, message: RegExp][] = [
      [
        `Bearer ${KEY}`,
        /at \/providers\/0\/apiKey: expected the key alone, without the scheme "Bearer" \(the gateway adds the header each provider's API takes\)$/,
      ],
      [`bearer  ${KEY}`, /without the scheme "bearer"/],
      [
        `"${KEY}"`,
        /at \/providers\/0\/apiKey: expected the key without the quotes around it \(an env file read by docker or systemd keeps them as part of the value\)$/,
      ],
      [`'${KEY}'`, /without the quotes around it/],
      [
        ['$', '{MISTRAL_API_KEY}'].join(''),
        /at \/providers\/0\/apiKey: expected a key, not a reference left unexpanded \(\$NAME, \$\{NAME\} or \$\(NAME\) as written:/,
      ],
      ['$MISTRAL_API_KEY', /not a reference left unexpanded/],
      ['$(MISTRAL_API_KEY)', /not a reference left unexpanded/],
    ];
    for (const [key, message] of refused) {
      // From the variable, and written in the file (`$${` is a literal `${`).
      expect(() => parse(catalogue('openai', 'http://127.0.0.1:9/v1'), key), key).toThrowError(message);
      expect(() => parse(catalogue('openai', 'http://127.0.0.1:9/v1', '', JSON.stringify(key.replace('$' + '{', () => '$$' + '{')))), key).toThrowError(
        message,
      );
      try {
        parse(catalogue('openai', 'http://127.0.0.1:9/v1'), key);
      } catch (err) {
        expect((err as Error).message).not.toContain(KEY);
      }
    }
    // A key holding a $ or a quote inside, and no key for a local server or OVHcloud's anonymous calls, are taken.
    for (const key of ['sk-$abc-"x"', 'a$b', '']) expect(parse(catalogue('openai', 'http://127.0.0.1:9/v1'), key).providers[0]?.apiKey).toBe(key);
    expect(parse(catalogue('openai', 'https://oai.endpoints.kepler.ai.cloud.ovh.net/v1'), '').providers[0]?.apiKey).toBe('');
  });

  it("stops the start on a provider's own host without a key, and on an Azure api-version no dated call takes", () => {
    for (const [type, url] of [
      ['azure', 'https://res.openai.azure.com'],
      ['mistral', 'https://api.mistral.ai/v1'],
      ['cohere', 'https://api.cohere.com'],
      ['openai', 'https://api.scaleway.ai/v1'],
    ] as const) {
      const host = new URL(url).hostname.replace(/\./g, '\\.');
      const message = new RegExp(
        `at /providers/0/apiKey: expected a key \\(${host} refuses every call without one; it is missing or empty, or its variable is set but empty\\)$`,
      );
      expect(() => parse(catalogue(type, url), ''), url).toThrowError(message);
      expect(() => parse(catalogue(type, url).replace(`    apiKey: ${KEY_REF}\n`, ''), ''), url).toThrowError(message);
    }
    for (const version of ['v1', 'latest', 'preview', '2024-10']) {
      expect(() => parse(catalogue('azure', 'https://res.openai.azure.com', `\n    apiVersion: ${version}`)), version).toThrowError(
        new RegExp(
          `at /providers/0/apiVersion: expected a dated api-version such as 2024-10-21 or 2025-04-01-preview \\(the dated API's; leave apiVersion out for the v1 API\\), not "${version}"$`,
        ),
      );
    }
  });

  it('warns of an entry that may be right behind a proxy but most likely is not', () => {
    const warned = (type: string, url: string) => entryWarnings(parse(catalogue(type, url))).map((w) => w.message);
    expect(warned('cohere', 'http://127.0.0.1:9/v1')).toEqual([
      "provider alpha's baseUrl http://127.0.0.1:9/v1 ends in /v1, and the adapter adds /v2/rerank, /v2/embed and /v1/models to it (http://127.0.0.1:9/v1/v2/rerank): Cohere's API is at its root. Check it if the provider's model list cannot be read.",
    ]);
    expect(warned('azure', 'http://127.0.0.1:9/openai/v1/')).toEqual([
      "provider alpha's baseUrl http://127.0.0.1:9/openai/v1/ ends in /openai/v1, and the adapter adds /openai/… to it (http://127.0.0.1:9/openai/v1/openai/v1/chat/completions): an Azure resource is given by its origin. Check it if the provider's model list cannot be read.",
    ]);
    expect(warned('openai', 'http://127.0.0.1:8000')).toEqual([
      "provider alpha's baseUrl http://127.0.0.1:8000/ has no path, so calls go to http://127.0.0.1:8000/chat/completions: most OpenAI-compatible servers (vLLM, Mistral's API, most hosts) serve theirs under /v1. Check it if the provider's model list cannot be read.",
    ]);
    for (const [type, url] of [
      ['openai', 'http://127.0.0.1:8000/v1/'],
      ['mistral', 'http://127.0.0.1:9/v1'],
      ['cohere', 'http://127.0.0.1:9'],
      ['azure', 'http://127.0.0.1:9'],
    ] as const)
      expect(warned(type, url), url).toEqual([]);
  });

  it('a Cohere entry at its OpenAI compatibility path or a quoted key stops the start with exit code 2, the key never shown', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'gw-entry-refused-'));
    try {
      const file = join(dir, 'gw.yaml');
      writeFileSync(file, catalogue('cohere', 'https://api.cohere.com/compatibility/v1'));
      const cohere = await runGatewayToExit({ GW_CONFIG: file, GW_DATA_DIR: join(dir, 'data'), KEY });
      expect(cohere.code).toBe(2);
      expect(cohere.output.trim()).toBe(
        `gw: Invalid configuration in ${file} at /providers/0/baseUrl: expected Cohere's native API at its root (https://api.cohere.com: the adapter adds /v2/rerank, /v2/embed); /compatibility/v1 is its OpenAI compatibility API, a provider of type openai, not "https://api.cohere.com/compatibility/v1"`,
      );
      writeFileSync(file, catalogue('mistral', 'https://api.mistral.ai/v1'));
      const quoted = await runGatewayToExit({ GW_CONFIG: file, GW_DATA_DIR: join(dir, 'data'), KEY: `"${KEY}"` });
      expect(quoted.code).toBe(2);
      expect(quoted.output.trim()).toBe(
        `gw: Invalid configuration in ${file} at /providers/0/apiKey: expected the key without the quotes around it (an env file read by docker or systemd keeps them as part of the value)`,
      );
      expect(quoted.output).not.toContain('S3cret');
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  }, 60_000);

  it('an entry most likely wrong starts with a warning naming it, where it showed only as the provider failing', async () => {
    const sim = await startSimulator({ latencyScale: 0 });
    const dir = mkdtempSync(join(tmpdir(), 'gw-entry-warned-'));
    try {
      const cohere = sim.providers.cohere;
      if (!cohere) throw new Error('no cohere');
      // Cohere's /v1 kept from its model list's URL: every rerank went to /v1/v2/rerank.
      writeFileSync(join(dir, 'gw.yaml'), catalogue('cohere', `${cohere.url}/v1`).replace('some-model', 'rerank-v3.5'));
      const gw = await spawnGateway({ GW_CONFIG: join(dir, 'gw.yaml'), GW_DATA_DIR: join(dir, 'data'), KEY: cohere.apiKey });
      try {
        const warnings = gw
          .output()
          .split('\n')
          .filter((l) => l.includes('the adapter adds /v2/rerank'))
          .map((l) => JSON.parse(l) as { level: number; provider: string; msg: string });
        expect(warnings.map((w) => [w.level, w.provider, w.msg])).toEqual([
          [
            40,
            'alpha',
            `provider alpha's baseUrl ${cohere.url}/v1 ends in /v1, and the adapter adds /v2/rerank, /v2/embed and /v1/models to it (${cohere.url}/v1/v2/rerank): Cohere's API is at its root. Check it if the provider's model list cannot be read.`,
          ],
        ]);
        expect(gw.output()).not.toContain(cohere.apiKey);
        expect((await fetch(`${gw.url}/healthz`)).status).toBe(200);
      } finally {
        gw.child.kill('SIGTERM');
        await gw.exited;
      }
    } finally {
      rmSync(dir, { recursive: true, force: true });
      await sim.close();
    }
  }, 60_000);
});
