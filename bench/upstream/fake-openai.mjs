import { createServer } from 'node:http';
import { UPSTREAM_MODELS, UPSTREAM_PROFILES } from './profiles.mjs';

const CREATED = 1_700_000_000;
const USAGE = { prompt_tokens: 12, completion_tokens: 20, total_tokens: 32 };
const ANSWER = 'The quick brown fox jumps over the lazy dog, and then it does that again, slowly.';

const modelList = Buffer.from(
  JSON.stringify({ object: 'list', data: UPSTREAM_MODELS.map((id) => ({ id, object: 'model', created: CREATED, owned_by: 'bench' })) }),
);

/** Non-streamed answers, serialised once per model: the upstream should cost as little as possible. */
const completions = new Map(
  UPSTREAM_MODELS.map((model) => [
    model,
    Buffer.from(
      JSON.stringify({
        id: 'chatcmpl-bench',
        object: 'chat.completion',
        created: CREATED,
        model,
        choices: [{ index: 0, message: { role: 'assistant', content: ANSWER }, finish_reason: 'stop' }],
        usage: USAGE,
      }),
    ),
  ]),
);

function chunkFrame(model, delta, finishReason, usage) {
  const choices = delta === null ? [] : [{ index: 0, delta, finish_reason: finishReason }];
  return `data: ${JSON.stringify({ id: 'chatcmpl-bench', object: 'chat.completion.chunk', created: CREATED, model, choices, usage })}\n\n`;
}

function sendJson(res, status, buffer) {
  res.writeHead(status, { 'content-type': 'application/json', 'content-length': buffer.length });
  res.end(buffer);
}

function sendError(res, status, message) {
  sendJson(res, status, Buffer.from(JSON.stringify({ error: { message, type: 'invalid_request_error', code: null } })));
}

/** Headers at once (as vLLM does), the first content chunk after ttftMs, the rest gapMs apart, then usage and [DONE]. */
function streamAnswer(req, res, model, profile, includeUsage) {
  res.writeHead(200, { 'content-type': 'text/event-stream', 'cache-control': 'no-cache' });
  res.flushHeaders();
  let sent = 0;
  let timer = null;
  req.socket.once('close', () => clearTimeout(timer));
  const next = () => {
    if (res.destroyed) return;
    const delta = sent === 0 ? { role: 'assistant', content: 'tok0 ' } : { content: `tok${sent} ` };
    sent++;
    if (sent < profile.chunks) {
      res.write(chunkFrame(model, delta, null, includeUsage ? null : undefined));
      timer = setTimeout(next, profile.gapMs);
      return;
    }
    let tail = chunkFrame(model, delta, null, includeUsage ? null : undefined) + chunkFrame(model, {}, 'stop', includeUsage ? null : undefined);
    if (includeUsage) tail += chunkFrame(model, null, null, USAGE);
    res.end(`${tail}data: [DONE]\n\n`);
  };
  timer = setTimeout(next, profile.ttftMs);
}

function onChat(req, res, text) {
  let body;
  try {
    body = JSON.parse(text);
  } catch {
    return sendError(res, 400, 'body is not JSON');
  }
  // The gateway's id (`bench/…`) too, for proxies that pass the body through unchanged (bench/compiled-floor.mjs).
  const model = typeof body.model === 'string' && body.model.startsWith('bench/') ? body.model.slice(6) : body.model;
  const profile = UPSTREAM_PROFILES[model];
  if (!profile) return sendError(res, 404, `unknown model ${String(body.model)}`);
  if (body.stream === true) return streamAnswer(req, res, model, profile, body.stream_options?.include_usage === true);
  const answer = completions.get(model);
  if (profile.latencyMs === 0) return sendJson(res, 200, answer);
  setTimeout(() => sendJson(res, 200, answer), profile.latencyMs);
}

/** A fast OpenAI-compatible upstream on node:http: GET /v1/models and POST /v1/chat/completions. */
export function createFakeOpenAI() {
  return createServer({ keepAliveTimeout: 60_000 }, (req, res) => {
    if (req.method === 'GET' && req.url === '/v1/models') return sendJson(res, 200, modelList);
    if (req.method !== 'POST' || req.url !== '/v1/chat/completions') return sendError(res, 404, `no route ${req.method} ${req.url}`);
    const parts = [];
    req.on('data', (part) => parts.push(part));
    req.on('end', () => onChat(req, res, Buffer.concat(parts).toString('utf8')));
  });
}
