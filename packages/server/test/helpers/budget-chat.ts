import { estimatePromptTokens } from '../../src/http/routes/chat-completions.js';
import type { TestGateway } from './gateway.js';

/** The budget tests' request: a short chat pinned to Scaleway, whose worst case the gateway holds. */
export const messages = [{ role: 'user', content: 'How much is left?' }];
export const MAX_TOKENS = 40;
// Pinned to scaleway (0.80 / 0.95 EUR per 1M): the worst case of one request, as the gateway holds it.
export const worst = (estimatePromptTokens({ messages }) * 0.8 + MAX_TOKENS * 0.95) / 1e6;

/** `extra`: fields added to (or replacing those of) the request's body. */
export function chat(gw: TestGateway, key: string, base: 'A' | 'B' = 'A', extra: Record<string, unknown> = {}, provider = 'scaleway') {
  return chatAt(base === 'A' ? gw.baseA : gw.baseB, key, extra, provider);
}

/** The same request to a variant's base address (`http://…/v1`), as a spawned gateway is reached. */
export function chatAt(base: string, key: string, extra: Record<string, unknown> = {}, provider = 'scaleway') {
  return fetch(`${base}/chat/completions`, {
    method: 'POST',
    headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json', 'x-gateway-provider': provider },
    body: JSON.stringify({ model: 'meta/llama-3.3-70b', messages, max_tokens: MAX_TOKENS, ...extra }),
  });
}
