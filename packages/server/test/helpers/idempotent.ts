import type { TestGateway } from './gateway.js';

export interface Answer {
  status: number;
  headers: Headers;
  text: string;
}

export const chatBody = (content = 'Charge me once') => ({ model: 'meta/llama-3.3-70b', messages: [{ role: 'user', content }], max_tokens: 20 });

/** A raw POST /chat/completions (body as given, so its exact bytes and field order are the test's). */
export async function post(base: string, key: string, body: unknown, headers: Record<string, string> = {}): Promise<Answer> {
  const res = await fetch(`${base}/chat/completions`, {
    method: 'POST',
    headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json', ...headers },
    body: typeof body === 'string' ? body : JSON.stringify(body),
  });
  return { status: res.status, headers: res.headers, text: await res.text() };
}

export async function usageOf(gws: TestGateway[], keyId: string) {
  await Promise.all(gws.map((g) => g.gateway.services.usage.flush()));
  return (gws[0] as TestGateway).gateway.services.store.usage.list({ keyId });
}

/** Every answer is either the first one's (same status and body) or a 409 with Retry-After. */
export function classify(answers: Answer[]): { fresh: Answer[]; replays: Answer[]; conflicts: Answer[]; other: Answer[] } {
  const fresh = answers.filter((a) => a.status === 200 && a.headers.get('idempotent-replayed') === null);
  const replays = answers.filter((a) => a.headers.get('idempotent-replayed') === 'true');
  const conflicts = answers.filter((a) => a.status === 409 && Number(a.headers.get('retry-after')) >= 1 && JSON.parse(a.text).error.code === 'conflict');
  const other = answers.filter((a) => !fresh.includes(a) && !replays.includes(a) && !conflicts.includes(a));
  return { fresh, replays, conflicts, other };
}
