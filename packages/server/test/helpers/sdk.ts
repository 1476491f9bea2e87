import OpenAI from 'openai';
import { afterAll, beforeAll } from 'vitest';
import { startGateway, type TestGateway } from './gateway.js';

/** The official SDK pointed at both variants of `gw` with `apiKey`, retries off (a test counts every request). */
export function openAiClients(gw: Pick<TestGateway, 'baseA' | 'baseB'>, apiKey: string): { a: OpenAI; b: OpenAI } {
  return { a: new OpenAI({ apiKey, baseURL: gw.baseA, maxRetries: 0 }), b: new OpenAI({ apiKey, baseURL: gw.baseB, maxRetries: 0 }) };
}

/**
 * For a test file: a demo gateway started before its tests and closed after them, with a key of 10,000 requests a
 * minute and the SDK pointed at both variants (the fields are there once the file's tests run).
 */
export function sdkGatewayPerFile(): { gw: TestGateway; clients: { a: OpenAI; b: OpenAI } } {
  const ctx = {} as { gw: TestGateway; clients: { a: OpenAI; b: OpenAI } };
  beforeAll(async () => {
    ctx.gw = await startGateway();
    ctx.clients = openAiClients(ctx.gw, (await ctx.gw.createKey({ rateLimitRpm: 10_000 })).key);
  }, 60_000);
  afterAll(async () => {
    await ctx.gw?.close();
  });
  return ctx;
}

/**
 * For a test file of the Vercel AI SDK: a demo gateway started before its tests (with a key of 10,000 requests a
 * minute, and the SDK's warnings off) and closed after them; `use` receives both once started.
 */
export function aiSdkGatewayPerFile(use: (started: { gw: TestGateway; key: string }) => void): void {
  let gw: TestGateway | undefined;
  beforeAll(async () => {
    gw = await startGateway();
    use({ gw, key: (await gw.createKey({ rateLimitRpm: 10_000 })).key });
    (globalThis as { AI_SDK_LOG_WARNINGS?: boolean }).AI_SDK_LOG_WARNINGS = false;
  }, 60_000);
  afterAll(async () => {
    await gw?.close();
  });
}
