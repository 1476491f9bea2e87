import OpenAI from 'openai';
import type { TestGateway } from './gateway.js';

/** The official SDK pointed at both variants of `gw` with `apiKey`, retries off (a test counts every request). */
export function openAiClients(gw: Pick<TestGateway, 'baseA' | 'baseB'>, apiKey: string): { a: OpenAI; b: OpenAI } {
  return { a: new OpenAI({ apiKey, baseURL: gw.baseA, maxRetries: 0 }), b: new OpenAI({ apiKey, baseURL: gw.baseB, maxRetries: 0 }) };
}
