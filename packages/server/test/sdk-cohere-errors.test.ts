import { Cohere, CohereClient, CohereClientV2, CohereError } from 'cohere-ai';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startGateway, type TestGateway } from './helpers/gateway.js';

// Cohere's own SDK (v1 and v2 clients) against the gateway's rerank: each failure lands on the SDK's error class for
// its status, with the gateway's envelope as its body, in both variants.
const MODEL = 'cohere/rerank-v3.5';
const documents = ['Paris is the capital of France.', 'Berlin is in Germany.'];

let gw: TestGateway;
let key: string;

beforeAll(async () => {
  gw = await startGateway();
  key = (await gw.createKey({ rateLimitRpm: 10_000 })).key;
}, 60_000);
afterAll(async () => {
  await gw?.close();
});

type Client = typeof CohereClient | typeof CohereClientV2;
const clients: [string, Client][] = [
  ['CohereClient', CohereClient],
  ['CohereClientV2', CohereClientV2],
];

async function refusal(run: () => Promise<unknown>): Promise<CohereError> {
  const err = await run().then(
    () => null,
    (e: unknown) => e,
  );
  if (!(err instanceof CohereError)) throw new Error(`expected the SDK's error, got ${String(err)}`);
  return err;
}

describe.each([
  ['A', '', { rate: ['rate_limit_exceeded', 'rate_limit_exceeded'], auth: 'unauthorized', bad: 'validation_error' }],
  ['B', '/alt', { rate: ['rate_limit_error', 'rate_limited'], auth: 'invalid_api_key', bad: 'invalid_request' }],
] as const)('variant %s through cohere-ai', (_v, path, codes) => {
  const environment = () => `${gw.url}${path}`;

  it.each(clients)('%s: a key over its limit is TooManyRequestsError with Retry-After', async (_name, Client) => {
    const { key: limited } = await gw.createKey({ rateLimitRpm: 1 });
    const client = new Client({ token: limited, environment: environment(), maxRetries: 0 });
    const first = await client.rerank({ model: MODEL, query: 'capital of France', documents });
    expect(first.results[0]?.index).toBe(0);
    const err = await refusal(() => client.rerank({ model: MODEL, query: 'capital of France', documents }));
    expect(err).toBeInstanceOf(Cohere.TooManyRequestsError);
    expect(err.statusCode).toBe(429);
    expect(err.body).toEqual({ error: { message: 'Rate limit exceeded (1 RPM)', type: codes.rate[0], code: codes.rate[1], param: null } });
    const retryAfter = Number(err.rawResponse?.headers.get('retry-after'));
    expect(retryAfter).toBeGreaterThanOrEqual(1);
    expect(retryAfter).toBeLessThanOrEqual(60);
  });

  it.each(clients)('%s: a key the gateway does not know is UnauthorizedError', async (_name, Client) => {
    for (const token of ['not-a-gateway-key', `${key.slice(0, -1)}${key.endsWith('x') ? 'y' : 'x'}`]) {
      const client = new Client({ token, environment: environment(), maxRetries: 0 });
      const err = await refusal(() => client.rerank({ model: MODEL, query: 'q', documents }));
      expect(err, token).toBeInstanceOf(Cohere.UnauthorizedError);
      expect(err.statusCode).toBe(401);
      expect((err.body as { error: { code: string } }).error.code).toBe(codes.auth);
    }
  });

  it.each(clients)('%s: a field out of range is BadRequestError naming the field', async (_name, Client) => {
    const client = new Client({ token: key, environment: environment(), maxRetries: 0 });
    for (const [ask, param] of [
      [{ model: MODEL, query: 'q', documents, topN: 0 }, 'top_n'],
      [{ model: MODEL, query: '', documents }, 'query'],
    ] as const) {
      const err = await refusal(() => client.rerank(ask));
      expect(err, param).toBeInstanceOf(Cohere.BadRequestError);
      expect(err.statusCode).toBe(400);
      const { error } = err.body as { error: { code: string; param: string; message: string } };
      expect({ code: error.code, param: error.param }).toEqual({ code: codes.bad, param });
      expect(error.message).toContain(`'${param}'`);
    }
  });
});
