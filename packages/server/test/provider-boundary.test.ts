import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import type { IncomingHttpHeaders, IncomingMessage, Server, ServerResponse } from 'node:http';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { ModelConfig } from '@gw/schema';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { wav } from './helpers/audio.js';
import { ADMIN_TOKEN } from './helpers/gateway.js';
import { type GatewayProcess, spawnGateway } from './helpers/process.js';
import { answerModelList, startRawUpstream } from './helpers/raw-upstream.js';

/**
 * What crosses the gateway between a client and a provider: the headers each side sent (never passed to the
 * other), a provider's redirect (never followed), and what a provider's error says of the gateway's own account
 * there (its organisation, its limits), which is the operator's to read in the log, not the client's.
 */
const PROVIDER_KEY = 'host-provider-key-6b1f0c9e2d7a';
const ORG = 'org-Q7w8E9r0T1y2U3i4O5p6A7s8';
const PROJECT = 'proj_Z1x2C3v4B5n6M7q8W9e0R1t2';

/** Headers a provider's answers carry about its account and its servers, none of the client's business. */
const PROVIDER_HEADERS = {
  'set-cookie': '__cf_bm=provider-session-cookie; path=/; HttpOnly',
  'openai-organization': ORG,
  'openai-project': PROJECT,
  'apim-request-id': '5e0c1d2b-aaaa-bbbb-cccc-0123456789ab',
  'x-ratelimit-limit-requests': '30000',
  'x-ratelimit-remaining-tokens': '149984',
  server: 'nginx/1.25.3',
  via: '1.1 provider-edge-7',
  'x-powered-by': 'Express',
};

type Answer = (req: IncomingMessage, res: ServerResponse, body: string) => void;

/** The answer to the next chat request the host receives (a plain completion when unset), and the headers it saw. */
let next: Answer | null = null;
let seen: IncomingHttpHeaders[] = [];
/** A second host, which a redirect points to: it must never be called. */
let elsewhere: IncomingHttpHeaders[] = [];

function completion(res: ServerResponse, stream: boolean): void {
  if (stream) {
    res.writeHead(200, { 'content-type': 'text/event-stream', ...PROVIDER_HEADERS });
    const chunk = (delta: unknown, finish: string | null) =>
      `data: ${JSON.stringify({ id: 'c1', object: 'chat.completion.chunk', created: 1, model: 'm', choices: [{ index: 0, delta, finish_reason: finish }] })}\n\n`;
    res.end(`${chunk({ role: 'assistant', content: 'Bonjour' }, null)}${chunk({}, 'stop')}data: [DONE]\n\n`);
    return;
  }
  res.writeHead(200, { 'content-type': 'application/json', ...PROVIDER_HEADERS });
  res.end(
    JSON.stringify({
      id: 'c1',
      object: 'chat.completion',
      created: 1,
      model: 'm',
      choices: [{ index: 0, message: { role: 'assistant', content: 'Bonjour' }, finish_reason: 'stop' }],
      usage: { prompt_tokens: 3, completion_tokens: 1, total_tokens: 4 },
    }),
  );
}

function host(req: IncomingMessage, res: ServerResponse, body: string): void {
  if (req.method === 'GET') {
    answerModelList(res, ['m', 'w', 'r']);
    return;
  }
  seen.push(req.headers);
  const answer = next;
  next = null;
  if (answer) answer(req, res, body);
  else completion(res, (JSON.parse(body) as { stream?: boolean }).stream === true);
}

/** A provider error in OpenAI's envelope, with the account headers. */
function providerError(status: number, message: string, headers: Record<string, string> = {}): Answer {
  return (_req, res) => {
    res.writeHead(status, { 'content-type': 'application/json', ...PROVIDER_HEADERS, ...headers });
    res.end(JSON.stringify({ error: { message, type: 'requests', code: status === 429 ? 'rate_limit_exceeded' : null, param: null } }));
  };
}

const MODEL: ModelConfig = {
  id: 'edge/m',
  kind: 'chat',
  owned_by: 'test',
  context_window: 8000,
  capabilities: ['streaming'],
  offers: [{ provider: 'host', upstreamModel: 'm', pricing: { prompt_per_1m: 1, completion_per_1m: 2, currency: 'EUR' } }],
};

const AUDIO_MODEL: ModelConfig = {
  id: 'edge/whisper',
  kind: 'audio',
  owned_by: 'test',
  offers: [{ provider: 'host', upstreamModel: 'w', pricing: { prompt_per_1m: 0, completion_per_1m: 0, per_unit: 0.0001, currency: 'EUR' } }],
};

const RERANK_MODEL: ModelConfig = {
  id: 'edge/rerank',
  kind: 'rerank',
  owned_by: 'test',
  offers: [{ provider: 'host', upstreamModel: 'r', pricing: { prompt_per_1m: 0, completion_per_1m: 0, per_unit: 0.001, currency: 'EUR' } }],
};

let upstream: Server;
let other: Server;
let otherUrl: string;
let proc: GatewayProcess;
let dir: string;
let key: string;

beforeAll(async () => {
  const started = await startRawUpstream(host);
  upstream = started.server;
  const second = await startRawUpstream((req, res) => {
    elsewhere.push(req.headers);
    completion(res, false);
  });
  other = second.server;
  otherUrl = second.baseUrl;
  dir = mkdtempSync(join(tmpdir(), 'gw-provider-boundary-'));
  writeFileSync(
    join(dir, 'gw.json'),
    JSON.stringify({
      providers: [{ id: 'host', type: 'openai', baseUrl: started.baseUrl, region: 'fr-par', apiKey: PROVIDER_KEY }],
      models: [MODEL, AUDIO_MODEL, RERANK_MODEL],
    }),
  );
  // No circuit: each test's failure is its own.
  proc = await spawnGateway({ GW_CONFIG: join(dir, 'gw.json'), GW_DATA_DIR: join(dir, 'data'), GW_ADMIN_TOKEN: ADMIN_TOKEN, GW_CIRCUIT_FAILURES: '1000' });
  const made = await fetch(`${proc.url}/admin/v1/keys`, {
    method: 'POST',
    headers: { authorization: `Bearer ${ADMIN_TOKEN}`, 'content-type': 'application/json' },
    body: JSON.stringify({ rateLimitRpm: 10_000 }),
  });
  key = ((await made.json()) as { key: string }).key;
}, 60_000);

afterAll(async () => {
  if (proc && proc.child.exitCode === null) proc.child.kill('SIGKILL');
  upstream?.close();
  other?.close();
  if (dir) rmSync(dir, { recursive: true, force: true });
});

beforeEach(() => {
  next = null;
  seen = [];
  elsewhere = [];
});

function chat(base: string, body: Record<string, unknown> = {}, headers: Record<string, string> = {}): Promise<Response> {
  return fetch(`${proc.url}${base}/chat/completions`, {
    method: 'POST',
    headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json', ...headers },
    body: JSON.stringify({ model: 'edge/m', messages: [{ role: 'user', content: 'hi' }], ...body }),
  });
}

/** The rate-limit headers of the key's own window, the only ones an answer carries. */
const KEY_LIMITS = ['x-ratelimit-limit', 'x-ratelimit-remaining', 'x-ratelimit-reset', 'x-ratelimit-enforced'];

/** Every header name of an answer, lower-cased. */
const names = (res: Response) => [...res.headers.keys()];

describe('headers between a client and a provider', () => {
  it("none of a client's headers reaches the provider: not its key, cookies, forwarding, routing or hop-by-hop headers", async () => {
    const res = await chat(
      '/v1',
      {},
      {
        cookie: 'session=client-session-cookie',
        'x-forwarded-for': '203.0.113.7',
        'x-forwarded-host': 'client.example',
        forwarded: 'for=203.0.113.7',
        'x-real-ip': '203.0.113.7',
        'x-gateway-strategy': 'default',
        'x-gateway-max-hops': '1',
        'x-request-id': 'client-chosen-id',
        'proxy-authorization': 'Basic Y2xpZW50OnNlY3JldA==',
        'x-api-key': 'client-side-other-key',
        'openai-organization': 'org-client',
        'x-custom-tenant': 'tenant-42',
        'user-agent': 'client-agent/1.0',
      },
    );
    expect(res.status).toBe(200);
    await res.text();
    const got = seen[0] as IncomingHttpHeaders;
    expect(got.authorization).toBe(`Bearer ${PROVIDER_KEY}`);
    expect(JSON.stringify(got)).not.toContain(key.slice(8));
    expect(Object.keys(got).sort()).toEqual([
      'accept',
      'accept-encoding',
      'authorization',
      'connection',
      'content-length',
      'content-type',
      'host',
      'x-request-id',
    ]);
    // The gateway's own request id, the one the client was given, not the client's.
    expect(got['x-request-id']).toBe(res.headers.get('x-request-id'));
    expect(got['x-request-id']).not.toBe('client-chosen-id');
  });

  it("none of a provider's answer headers reaches the client: its cookies, account and organisation ids, its account's rate limits, its servers", async () => {
    const answers: Response[] = [];
    for (const base of ['/v1', '/alt/v1']) {
      answers.push(await chat(base));
      answers.push(await chat(base, { stream: true }));
      next = providerError(400, 'messages[0].content is not valid');
      answers.push(await chat(base));
      next = providerError(500, 'internal failure');
      answers.push(await chat(base, { stream: true }));
    }
    expect(answers.map((r) => r.status)).toEqual([200, 200, 400, 502, 200, 200, 400, 502]);
    for (const res of answers) {
      await res.text();
      for (const name of Object.keys(PROVIDER_HEADERS)) expect(names(res), name).not.toContain(name);
      // The key's own limits are the only ones a client sees.
      const limits = names(res).filter((n) => n.startsWith('x-ratelimit-'));
      expect(limits).toContain('x-ratelimit-enforced');
      expect(limits.filter((n) => !KEY_LIMITS.includes(n))).toEqual([]);
    }
  });

  it('a redirect from a provider is not followed: the gateway never sends its provider key to the host it names', async () => {
    for (const status of [301, 302, 307, 308]) {
      next = (_req, res) => {
        res.writeHead(status, { location: `${otherUrl}/chat/completions`, ...PROVIDER_HEADERS });
        res.end();
      };
      const res = await chat('/v1');
      const body = (await res.json()) as { error: { code: string; message: string } };
      expect([res.status, body.error.code]).toEqual([502, 'provider_down']);
      expect(body.error.message).toContain(`host answered ${status}`);
      expect(names(res)).not.toContain('location');
      expect(JSON.stringify(body)).not.toContain(otherUrl);
    }
    expect(elsewhere).toEqual([]);
  });
});

describe("a provider that echoes the gateway's request into a success answer", () => {
  /** A 200 that says back the `Authorization` the gateway sent, as an echo service or a debugging proxy does. */
  const echo: Answer = (req, res, body) => {
    const said = `you sent ${req.headers.authorization}`;
    if ((JSON.parse(body) as { stream?: boolean }).stream === true) {
      res.writeHead(200, { 'content-type': 'text/event-stream' });
      const chunk = (delta: unknown, finish: string | null) =>
        `data: ${JSON.stringify({ id: `c-${PROVIDER_KEY}`, object: 'chat.completion.chunk', created: 1, model: 'm', choices: [{ index: 0, delta, finish_reason: finish }] })}\n\n`;
      res.end(`${chunk({ role: 'assistant', content: said }, null)}${chunk({}, 'stop')}data: [DONE]\n\n`);
      return;
    }
    res.writeHead(200, { 'content-type': 'application/json' });
    res.end(
      JSON.stringify({
        id: 'c1',
        object: 'chat.completion',
        created: 1,
        model: 'm',
        system_fingerprint: PROVIDER_KEY,
        choices: [{ index: 0, message: { role: 'assistant', content: said }, finish_reason: 'stop' }],
        usage: { prompt_tokens: 3, completion_tokens: 4, total_tokens: 7 },
      }),
    );
  };

  it("the provider's key in a completion, streamed or not, is taken out before the client gets it", async () => {
    for (const base of ['/v1', '/alt/v1']) {
      for (const stream of [false, true]) {
        next = echo;
        const res = await chat(base, { stream });
        const text = await res.text();
        expect(res.status).toBe(200);
        expect(text, `${base} stream ${stream}`).not.toContain(PROVIDER_KEY);
        expect(text).toContain('you sent Bearer [redacted]');
      }
    }
  });

  it("the provider's key written with \\u escapes, streamed or not, is taken out before the client gets it", async () => {
    const escaped = (text: string) => [...text].map((c) => `\\u${c.charCodeAt(0).toString(16).padStart(4, '0')}`).join('');
    for (const base of ['/v1', '/alt/v1']) {
      for (const stream of [false, true]) {
        next = (req, res, body) => {
          const said = `you sent ${escaped(String(req.headers.authorization))}`;
          if ((JSON.parse(body) as { stream?: boolean }).stream === true) {
            res.writeHead(200, { 'content-type': 'text/event-stream' });
            const chunk = (delta: string, finish: string | null) =>
              `data: {"id":"c1","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":${delta},"finish_reason":${finish}}]}\n\n`;
            res.end(`${chunk(`{"role":"assistant","content":"${said}"}`, 'null')}${chunk('{}', '"stop"')}data: [DONE]\n\n`);
            return;
          }
          res.writeHead(200, { 'content-type': 'application/json' });
          res.end(
            `{"id":"c1","object":"chat.completion","created":1,"model":"m","choices":[{"index":0,"message":{"role":"assistant","content":"${said}"},"finish_reason":"stop"}],"usage":{"prompt_tokens":3,"completion_tokens":4,"total_tokens":7}}`,
          );
        };
        const res = await chat(base, { stream });
        const text = await res.text();
        expect(res.status).toBe(200);
        // What the client's parser reads: the escapes undone.
        const read = text.replace(/\\u([0-9a-f]{4})/g, (_, hex: string) => String.fromCharCode(Number.parseInt(hex, 16)));
        expect(read, `${base} stream ${stream}`).not.toContain(PROVIDER_KEY);
        expect(read).toContain('you sent Bearer [redacted]');
      }
    }
  });

  it("the provider's key in a rerank answer's id is taken out before the client gets it", async () => {
    next = (req, res) => {
      res.writeHead(200, { 'content-type': 'application/json' });
      res.end(JSON.stringify({ id: `you sent ${req.headers.authorization}`, results: [{ index: 0, relevance_score: 0.5 }], usage: { total_tokens: 3 } }));
    };
    const res = await fetch(`${proc.url}/v1/rerank`, {
      method: 'POST',
      headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' },
      body: JSON.stringify({ model: 'edge/rerank', query: 'q', documents: ['a'] }),
    });
    const text = await res.text();
    expect(res.status, text).toBe(200);
    expect(text).not.toContain(PROVIDER_KEY);
    expect((JSON.parse(text) as { id: string }).id).toBe('you sent Bearer [redacted]');
  });

  it("the provider's key in a transcript, in every format, is taken out before the client gets it", async () => {
    for (const format of ['json', 'text', 'verbose_json', 'srt']) {
      next = (req, res) => {
        res.writeHead(200, { 'content-type': 'application/json' });
        const text = `you sent ${req.headers.authorization}`;
        res.end(JSON.stringify({ task: 'transcribe', language: 'english', duration: 1, text, segments: [{ id: 0, start: 0, end: 1, text }] }));
      };
      const form = new FormData();
      form.append('model', 'edge/whisper');
      form.append('response_format', format);
      form.append('file', new Blob([new Uint8Array(wav(1))], { type: 'audio/wav' }), 'a.wav');
      const res = await fetch(`${proc.url}/v1/audio/transcriptions`, { method: 'POST', headers: { authorization: `Bearer ${key}` }, body: form });
      const text = await res.text();
      expect(res.status, text).toBe(200);
      expect(text, format).not.toContain(PROVIDER_KEY);
      expect(text).toContain('you sent Bearer [redacted]');
    }
  });
});

describe("what a provider's error says of the gateway's account there", () => {
  it("a provider's 429 (its limits on the gateway's account, its organisation) is not passed on: the client is told to wait, the log keeps it", async () => {
    const limited = `Rate limit reached for m in organization ${ORG} on tokens per min (TPM): Limit 30000, Used 29990, Requested 120. Please try again in 2s.`;
    const quota = 'You exceeded your current quota, please check your plan and billing details.';
    for (const base of ['/v1', '/alt/v1']) {
      for (const [message, stream] of [
        [limited, false],
        [quota, true],
      ] as const) {
        // A wait of 0: the offer is not kept out of the next request's plan.
        next = providerError(429, message, { 'retry-after': '0' });
        const res = await chat(base, { stream });
        const text = await res.text();
        expect(res.status).toBe(502);
        expect(res.headers.get('retry-after')).toBe('0');
        expect(text).toContain('host answered 429');
        for (const leak of [ORG, '30000', '29990', 'quota', 'billing']) expect(text, leak).not.toContain(leak);
      }
    }
    // The same refusal as an error event in a stream the provider began with a 200 (vLLM's way).
    for (const base of ['/v1', '/alt/v1']) {
      next = (_req, res) => {
        res.writeHead(200, { 'content-type': 'text/event-stream' });
        res.end(`data: ${JSON.stringify({ error: { message: limited, type: 'requests', code: 429 } })}\n\n`);
      };
      const res = await chat(base, { stream: true });
      const text = await res.text();
      expect(text).toContain("it is limiting the gateway's requests");
      for (const leak of [ORG, '30000', '29990']) expect(text, leak).not.toContain(leak);
    }
    // The operator reads what the provider said.
    expect(proc.output()).toContain('Limit 30000, Used 29990');
    expect(proc.output()).toContain('please check your plan and billing details');
  });

  it("a 402 (the gateway's account cannot pay there) is the provider failing, its words not passed on", async () => {
    next = providerError(402, 'Insufficient credits on account acct_77fe91: balance -3.20 EUR');
    const res = await chat('/v1');
    const text = await res.text();
    expect(res.status).toBe(502);
    expect(text).toContain('host answered 402');
    expect(text).not.toContain('acct_77fe91');
    expect(text).not.toContain('balance');
  });

  it("organisation and project ids in a provider's other messages are taken out, the rest kept", async () => {
    next = providerError(500, `upstream failure for ${ORG} in ${PROJECT}, see the dashboard`);
    const res = await chat('/v1');
    const text = await res.text();
    expect(res.status).toBe(502);
    expect(text).toContain('upstream failure for [redacted] in [redacted], see the dashboard');
  });

  it("Azure's subscription id and resource paths in a provider's messages are taken out, passed on or logged; its request ids stay", async () => {
    const subscription = '3f2a9c41-7d0e-4b8a-9e61-2c5d8f0a7b13';
    const path = `/subscriptions/${subscription}/resourceGroups/rg-gateway-prod/providers/Microsoft.CognitiveServices/accounts/gw-aoai-swc/deployments/gpt-4o-eu`;
    const requestId = '5e0c1d2b-aaaa-bbbb-cccc-0123456789ab';
    const said = [
      `The deployment ${path} does not support this request. Please include the request ID ${requestId}.`,
      `Operation failed in subscription '${subscription}' (SubscriptionId: ${subscription.toUpperCase()}, "subscriptionId":"${subscription}"), request id ${requestId}`,
    ];
    const relayed: string[] = [];
    for (const base of ['/v1', '/alt/v1']) {
      for (const [status, message] of [
        [400, said[0]],
        [400, said[1]],
        [500, said[0]],
      ] as const) {
        next = providerError(status, message as string);
        const res = await chat(base);
        expect(res.status).toBe(status === 400 ? 400 : 502);
        relayed.push(await res.text());
      }
    }
    for (const text of relayed) {
      for (const leak of [subscription, subscription.toUpperCase(), 'rg-gateway-prod', 'gw-aoai-swc', 'gpt-4o-eu']) expect(text, leak).not.toContain(leak);
      expect(text).toContain(requestId);
    }
    expect(relayed[0]).toContain('The deployment [redacted] does not support this request.');
    expect(relayed[1]).toContain(`in subscription '[redacted]' (SubscriptionId: [redacted], \\"subscriptionId\\":\\"[redacted]\\"), request id ${requestId}`);
    // The log too, as with OpenAI's organisation ids.
    expect(proc.output()).toContain('does not support this request');
    expect(proc.output()).not.toContain(subscription);
    expect(proc.output()).not.toContain('rg-gateway-prod');
  });

  it("Azure's subscription id is taken out however Azure words it (with id, ID:, identifier, value provided), its request id kept", async () => {
    const subscription = '8c41d2e7-0b9f-4a63-b5d1-7e2f9a0c6d38';
    const requestId = '1a2b3c4d-0000-4111-8222-333344445555';
    // As Azure Resource Manager and Cognitive Services word it, each followed by the request id a client quotes to support.
    const said = [
      `The subscription with id ${subscription} is disabled. Please include the request ID ${requestId}.`,
      `Not found subscription ID: ${subscription.toUpperCase()} (request id ${requestId})`,
      `The provided registration was not found: Subscription identifier (value provided: ${subscription}); request id ${requestId}`,
      `Quota exceeded for subscriptionId '${subscription}' with ID ${requestId}`,
    ];
    for (const base of ['/v1', '/alt/v1']) {
      for (const message of said) {
        next = providerError(400, message);
        const res = await chat(base);
        const text = await res.text();
        expect(res.status).toBe(400);
        expect(text, message).not.toContain(subscription);
        expect(text, message).not.toContain(subscription.toUpperCase());
        expect(text, message).toContain(requestId);
      }
    }
    next = providerError(400, said[0] as string);
    expect(await (await chat('/v1')).text()).toContain(`The subscription with id [redacted] is disabled. Please include the request ID ${requestId}.`);
    expect(proc.output()).not.toContain(subscription);
  });

  it("Azure's tenant and the gateway's identity there (client, object, application, principal ids) are taken out; trace and correlation ids stay", async () => {
    const tenant = '5d7e9f10-2a3b-4c5d-8e6f-708192a3b4c5';
    const client = '0a1b2c3d-4e5f-4a6b-9c7d-8e9f0a1b2c3d';
    const object = '9f8e7d6c-5b4a-4c3d-8e1f-0a9b8c7d6e5f';
    const trace = '2b4d6f80-1357-4a9c-8e0d-abcdefabcdef';
    const correlation = '7c6b5a49-3827-4615-9504-fedcbafedcba';
    // As Entra ID and Azure's role checks word them (AADSTS90002, AADSTS700016, AuthorizationFailed, a data action refused).
    const said = [
      `AADSTS90002: Tenant '${tenant}' not found. Check to make sure you have the correct tenant ID. Trace ID: ${trace} Correlation ID: ${correlation}`,
      `AADSTS700016: Application with identifier '${client}' was not found in the directory '${tenant}'. Trace ID: ${trace} Correlation ID: ${correlation}`,
      `The client '${client}' with object id '${object}' does not have authorization to perform action 'Microsoft.CognitiveServices/accounts/OpenAI/deployments/chat/completions/action'. Trace ID: ${trace}`,
      `The principal \`${object}\` lacks the required data action. Correlation ID: ${correlation}`,
      `{"tenantId":"${tenant}","appId":"${client}","objectId":"${object}","correlationId":"${correlation}"}`,
    ];
    for (const base of ['/v1', '/alt/v1']) {
      for (const message of said) {
        next = providerError(400, message);
        const text = await (await chat(base)).text();
        for (const leak of [tenant, client, object]) expect(text, message).not.toContain(leak);
        expect(text.includes(trace) || text.includes(correlation), message).toBe(true);
      }
    }
    expect(proc.output()).not.toContain(tenant);
    expect(proc.output()).not.toContain(object);
    expect(proc.output()).not.toContain(client);
  });
});
