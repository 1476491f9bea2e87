// The floor under the gateway: the smallest proxy of the same call, with none of the gateway's work
// (no auth, limiter, budget, routing, usage, metrics or logging).
// `node bench/upstream/floor-proxy.mjs <node-http | fastify | tcp> <upstream url>`; prints `listening on <url>`.
// Both parse the request, rename the model, call the upstream with undici's pool (dispatch, as the
// gateway does), parse the answer, put the client's model name back and send it: what any gateway
// written this way costs at the least, on this machine. A streamed call (node-http only) is relayed
// byte for byte as the upstream's reads land, headers included at once: no SSE parsing at all.
// `tcp` parses nothing: each client connection gets its own upstream connection and the bytes are piped
// both ways (the upstream takes the gateway's model ids too), what relaying costs Node with no HTTP at all.
import { createServer } from 'node:http';
import { createRequire } from 'node:module';
import { connect, createServer as createTcpServer } from 'node:net';
import Fastify from 'fastify';

// The gateway's own undici, not whichever version other packages hoisted to the root: undici 7.29
// deferred every request on a reused keep-alive connection behind a setTimeout(0), about 1 ms.
const { Pool } = createRequire(new URL('../../packages/server/package.json', import.meta.url))('undici');

const [kind, upstreamUrl] = process.argv.slice(2);
const pool = new Pool(upstreamUrl, { connections: 4096 });
const UPSTREAM_HEADERS = { 'content-type': 'application/json', authorization: 'Bearer bench-upstream-key' };

/** `bench/fixed-0ms` (the gateway's id) to `fixed-0ms` (the upstream's). */
const upstreamModel = (model) => String(model).replace(/^bench\//, '');

function callUpstream(body) {
  return new Promise((resolve, reject) => {
    const chunks = [];
    pool.dispatch(
      { path: '/v1/chat/completions', method: 'POST', headers: UPSTREAM_HEADERS, body: JSON.stringify(body) },
      {
        onRequestStart() {},
        onResponseStart() {},
        onResponseData(_controller, chunk) {
          chunks.push(chunk);
        },
        onResponseEnd() {
          resolve(JSON.parse(Buffer.concat(chunks).toString('utf8')));
        },
        onResponseError(_controller, err) {
          reject(err);
        },
      },
    );
  });
}

/** Pipes the upstream's streamed answer to the client as its reads arrive. */
function relayStream(body, res) {
  pool.dispatch(
    { path: '/v1/chat/completions', method: 'POST', headers: UPSTREAM_HEADERS, body: JSON.stringify({ ...body, model: upstreamModel(body.model) }) },
    {
      onRequestStart() {},
      onResponseStart(_controller, statusCode) {
        res.writeHead(statusCode, { 'content-type': 'text/event-stream', 'cache-control': 'no-cache' });
      },
      onResponseData(_controller, chunk) {
        res.write(chunk);
      },
      onResponseEnd() {
        res.end();
      },
      onResponseError() {
        if (res.headersSent) res.destroy();
        else res.writeHead(502).end();
      },
    },
  );
}

async function answer(body) {
  const out = await callUpstream({ ...body, model: upstreamModel(body.model) });
  out.model = body.model;
  return out;
}

function listening(port) {
  process.stdout.write(`listening on http://127.0.0.1:${port}\n`);
}

if (kind === 'fastify') {
  const app = Fastify({ logger: false });
  app.post('/v1/chat/completions', (request) => answer(request.body));
  await app.listen({ port: 0, host: '127.0.0.1' });
  listening(app.server.address().port);
} else if (kind === 'node-http') {
  const server = createServer((req, res) => {
    const chunks = [];
    req.on('data', (c) => chunks.push(c));
    req.on('end', () => {
      const body = JSON.parse(Buffer.concat(chunks).toString('utf8'));
      if (body.stream) return relayStream(body, res);
      answer(body).then(
        (out) => {
          const text = JSON.stringify(out);
          res.writeHead(200, { 'content-type': 'application/json; charset=utf-8', 'content-length': Buffer.byteLength(text) });
          res.end(text);
        },
        () => {
          res.writeHead(502).end();
        },
      );
    });
  });
  server.keepAliveTimeout = 72_000;
  server.listen(0, '127.0.0.1', () => listening(server.address().port));
} else if (kind === 'tcp') {
  const { hostname, port } = new URL(upstreamUrl);
  const server = createTcpServer({ noDelay: true }, (client) => {
    const upstream = connect({ host: hostname, port: Number(port), noDelay: true });
    client.pipe(upstream).pipe(client);
    client.on('error', () => upstream.destroy());
    upstream.on('error', () => client.destroy());
  });
  server.listen(0, '127.0.0.1', () => listening(server.address().port));
} else {
  throw new Error(`unknown floor proxy '${kind}': node-http, fastify or tcp`);
}
process.on('SIGTERM', () => process.exit(0));
