import { connect } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { MAX_PIPELINED } from '../src/http/pipeline-limit.js';
import { ADMIN_TOKEN, eventually, startGateway, type TestGateway } from './helpers/gateway.js';
import { exchange, uploadFromOwnProcess } from './helpers/raw-http.js';

let gw: TestGateway;
let key: string;
let keyId: string;
let port: number;

beforeAll(async () => {
  gw = await startGateway({ env: { GW_REQUEST_TIMEOUT_MS: '1000' } });
  ({ key, id: keyId } = await gw.createKey({ rateLimitRpm: 1000 }));
  port = Number(new URL(gw.url).port);
});
afterAll(() => gw?.close());

interface Envelope {
  error: { message: string; type: string; code: string; param: string | null };
}

/** Writes `text` on a fresh connection (then `more` every `dripMs`, if given) and reads until the gateway closes it. */
function raw(text: string, drip?: { more: string; everyMs: number }): Promise<{ head: string; body: string; ms: number }> {
  return new Promise((resolve, reject) => {
    const socket = connect(port, '127.0.0.1');
    const started = Date.now();
    let out = '';
    const timer = drip ? setInterval(() => socket.writable && socket.write(drip.more), drip.everyMs) : null;
    socket.on('data', (d) => {
      out += String(d);
    });
    socket.on('error', () => {});
    socket.on('close', () => {
      if (timer) clearInterval(timer);
      const at = out.indexOf('\r\n\r\n');
      if (at === -1) reject(new Error(`closed with no answer: ${JSON.stringify(out)}`));
      resolve({ head: out.slice(0, at), body: out.slice(at + 4), ms: Date.now() - started });
    });
    socket.write(text);
    // Without a drip the client is done sending; the gateway answers and closes.
    if (!drip) setTimeout(() => socket.end(), 300);
  });
}

function envelopeOf(body: string): Envelope['error'] {
  return (JSON.parse(body) as Envelope).error;
}

describe('what Node or Fastify refuses before a route runs, in the envelope', () => {
  it('a smuggling-shaped request (Content-Length and Transfer-Encoding) is 400 in the envelope, and the connection is closed', async () => {
    const r = await raw('GET /v1/models HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n');
    expect(r.head).toMatch(/^HTTP\/1\.1 400 /);
    expect(r.head).toMatch(/\r\nx-request-id: req_/i);
    expect(envelopeOf(r.body)).toMatchObject({ code: 'validation_error', type: 'validation_error' });
  });

  it('a key with its trailing newline (curl -H "Authorization: Bearer $(cat keyfile)") is told about the line break, without the key', async () => {
    // curl sends the value's LF as it is, before the line's CRLF: Node refuses the head before any route runs.
    const r = await raw(`GET /v1/models HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ${key}\n\r\nConnection: close\r\n\r\n`);
    expect(r.head).toMatch(/^HTTP\/1\.1 400 /);
    const error = envelopeOf(r.body);
    expect(error).toMatchObject({ code: 'validation_error', message: expect.stringContaining('line break') });
    expect(error.message).toContain('trailing newline');
    expect(r.body).not.toContain(key.slice(8));
    // Other framing Node refuses says what, in Node's words: here a control character in a value.
    const control = await raw(`GET /v1/models HTTP/1.1\r\nHost: x\r\nX-Note: a\x01b\r\n\r\n`);
    expect(envelopeOf(control.body).message).toBe('The request is not valid HTTP/1.1: Invalid header value char.');
  });

  it('two Authorization headers are a 401, whichever of them is the good key', async () => {
    for (const [first, second] of [
      [key, 'gw_live_wrong'],
      ['gw_live_wrong', key],
    ]) {
      const r = await raw(
        `GET /v1/models HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ${first}\r\nAuthorization: Bearer ${second}\r\nConnection: close\r\n\r\n`,
      );
      expect(r.head).toMatch(/^HTTP\/1\.1 401 /);
      expect(envelopeOf(r.body)).toMatchObject({ code: 'unauthorized', message: expect.stringContaining('exactly one Authorization') });
    }
    const one = await raw(`GET /v1/models HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ${key}\r\nConnection: close\r\n\r\n`);
    expect(one.head).toMatch(/^HTTP\/1\.1 200 /);
  });

  it('so are two Authorization headers on the admin API, even when both carry the admin token', async () => {
    for (const [first, second] of [
      [ADMIN_TOKEN, 'wrong-admin-token-0123456789'],
      [ADMIN_TOKEN, ADMIN_TOKEN],
    ]) {
      const r = await raw(
        `GET /admin/v1/keys/${keyId} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ${first}\r\nAuthorization: Bearer ${second}\r\nConnection: close\r\n\r\n`,
      );
      expect(r.head).toMatch(/^HTTP\/1\.1 401 /);
      expect(envelopeOf(r.body)).toMatchObject({ code: 'unauthorized', message: expect.stringContaining('exactly one Authorization') });
    }
    const one = await raw(`GET /admin/v1/keys/${keyId} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ${ADMIN_TOKEN}\r\nConnection: close\r\n\r\n`);
    expect(one.head).toMatch(/^HTTP\/1\.1 200 /);
  });

  it('Expect: 100-continue: a wrong key or a declared size over the limit is refused before the body is asked for; a good request gets 100 first', async () => {
    const body = JSON.stringify({ model: 'meta/llama-3.3-70b', messages: [{ role: 'user', content: 'hi' }] });
    const head = (auth: string, length: number, path = '/v1/chat/completions') =>
      `POST ${path} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ${auth}\r\nContent-Type: application/json\r\nContent-Length: ${length}\r\nExpect: 100-continue\r\n\r\n`;
    // Only the headers are sent: the refusal must come without the body.
    const wrong = await raw(head('gw_live_wrong', Buffer.byteLength(body), '/alt/v1/chat/completions'));
    expect(wrong.head).toMatch(/^HTTP\/1\.1 401 /);
    expect(envelopeOf(wrong.body)).toMatchObject({ code: 'invalid_api_key' });
    // Like every answer: its request id and the gateway's time.
    expect(wrong.head).toMatch(/\r\nx-request-id: \S+/i);
    expect(wrong.head).toMatch(/\r\nserver-timing: gw;desc="gateway";dur=\d+\.\d\d, upstream;dur=0\.00, total;dur=\d+\.\d\d(\r\n|$)/im);
    const huge = await raw(head(key, 30 * 1024 * 1024, '/v1/audio/transcriptions').replace('application/json', 'multipart/form-data; boundary=b'));
    expect(huge.head).toMatch(/^HTTP\/1\.1 413 /);
    expect(envelopeOf(huge.body)).toMatchObject({ code: 'payload_too_large', param: 'file' });
    // A file just under the upload limit, with its form fields around it, is told to go on, as it is answered without Expect.
    const nearLimit = await new Promise<string>((resolve) => {
      const socket = connect(port, '127.0.0.1');
      socket.on('data', (d) => {
        resolve(String(d));
        socket.destroy();
      });
      socket.write(head(key, 25 * 1024 * 1024 + 2_000, '/v1/audio/transcriptions').replace('application/json', 'multipart/form-data; boundary=b'));
    });
    expect(nearLimit).toMatch(/^HTTP\/1\.1 100 Continue/);
    // An upload to a route still to come is told so (after the key), not that it is over the JSON body limit.
    const file = await raw(head(key, 5 * 1024 * 1024, '/v1/files').replace('application/json', 'multipart/form-data; boundary=b'));
    expect([file.head.slice(0, 12), envelopeOf(file.body).code]).toEqual(['HTTP/1.1 501', 'not_implemented']);
    const anonymous = await raw(head('gw_live_wrong', 5 * 1024 * 1024, '/alt/v1/files'));
    expect([anonymous.head.slice(0, 12), envelopeOf(anonymous.body).code]).toEqual(['HTTP/1.1 401', 'invalid_api_key']);
    // A good one is told to go on, then answered.
    const answer = await new Promise<string>((resolve) => {
      const socket = connect(port, '127.0.0.1');
      let out = '';
      socket.on('data', (d) => {
        out += String(d);
        if (out.startsWith('HTTP/1.1 100') && !out.includes('\r\n\r\nHTTP/1.1') && out.endsWith('\r\n\r\n')) socket.write(body);
      });
      socket.on('close', () => resolve(out));
      socket.write(head(key, Buffer.byteLength(body)).replace('Expect:', 'Connection: close\r\nExpect:'));
    });
    expect(answer).toMatch(/^HTTP\/1\.1 100 Continue\r\n\r\nHTTP\/1\.1 200 /);
  });

  it('Expect: 100-continue of a key whose window is full: an upload is refused before the 100, and a 429 carries the rate-limit headers', async () => {
    const limited = await gw.createKey({ rateLimitRpm: 1 });
    const counted = await fetch(`${gw.baseA}/chat/completions`, {
      method: 'POST',
      headers: { authorization: `Bearer ${limited.key}`, 'content-type': 'application/json' },
      body: JSON.stringify({ model: 'meta/llama-3.3-70b', messages: [{ role: 'user', content: 'hi' }], max_tokens: 5 }),
    });
    expect(counted.status).toBe(200);
    const head = (path: string, type: string) =>
      `POST ${path} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ${limited.key}\r\nContent-Type: ${type}\r\nContent-Length: 5000000\r\nExpect: 100-continue\r\n\r\n`;
    // Told to send 5 MB only to be refused once it began: the 429 comes instead of the 100, as it does without Expect.
    const upload = await raw(head('/alt/v1/audio/transcriptions', 'multipart/form-data; boundary=b'));
    expect(upload.head).toMatch(/^HTTP\/1\.1 429 /);
    expect(envelopeOf(upload.body)).toMatchObject({ code: 'rate_limited' });
    // A refusal counted before the body is asked for (413 over the body limit) loses to the limiter's 429.
    const json = await raw(head('/v1/chat/completions', 'application/json'));
    expect(json.head).toMatch(/^HTTP\/1\.1 429 /);
    for (const r of [upload, json]) {
      expect(r.head).toMatch(/\r\nx-ratelimit-limit: 1(\r\n|$)/i);
      expect(r.head).toMatch(/\r\nx-ratelimit-remaining: 0(\r\n|$)/i);
      expect(r.head).toMatch(/\r\nx-ratelimit-enforced: true(\r\n|$)/i);
      expect(r.head).toMatch(/\r\nretry-after: \d+(\r\n|$)/i);
    }
  });

  it('Expect: 100-continue with a body the route refuses as labelled (media type, malformed or a form without its boundary, compression, charset) is refused before the 100, as it is answered without Expect', async () => {
    const length = 5000;
    const head = (path: string, type: string | null, extra: string, expectContinue: boolean) =>
      `POST ${path} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ${key}\r\n${type === null ? '' : `Content-Type: ${type}\r\n`}${extra}Content-Length: ${length}\r\n${expectContinue ? 'Expect: 100-continue\r\n' : ''}\r\n`;
    // The header names an answer carries, but its date and keep-alive: a body read whole may keep its connection.
    const names = (h: string) =>
      h
        .split('\r\n')
        .slice(1)
        .map((l) => l.slice(0, l.indexOf(':')).toLowerCase())
        .filter((n) => n !== 'date' && n !== 'keep-alive')
        .sort();
    const cases: [string, string | null, string, string][] = [
      ['/v1/chat/completions', 'text/plain', '', 'send application/json'],
      ['/alt/v1/embeddings', 'text/plain; charset=utf-8', '', 'send application/json'],
      ['/v2/rerank', 'application/x-www-form-urlencoded', '', 'send application/json'],
      ['/alt/v1/audio/transcriptions', 'application/json', '', 'send multipart/form-data'],
      ['/v1/audio/transcriptions', null, '', 'send multipart/form-data'],
      // A Content-Type Fastify cannot parse, or a form without its boundary: the route's own words, not JSON's.
      ['/v1/audio/transcriptions', 'foo', '', "'foo': send multipart/form-data with its boundary"],
      ['/alt/v1/audio/transcriptions', 'a b/c', '', 'send multipart/form-data with its boundary'],
      ['/alt/v1/audio/transcriptions', 'multipart/form-data', '', "'multipart/form-data': send multipart/form-data with its boundary"],
      ['/v1/audio/transcriptions', 'multipart/form-data; charset=utf-8', '', 'send multipart/form-data with its boundary'],
      // A boundary RFC 2046 does not allow (over 70 characters, or a space last) is none.
      ['/v1/audio/transcriptions', `multipart/form-data; boundary=${'b'.repeat(71)}`, '', 'send multipart/form-data with its boundary'],
      ['/alt/v1/audio/transcriptions', 'multipart/form-data; boundary="ab "', '', 'send multipart/form-data with its boundary'],
      ['/v1/chat/completions', 'foo', '', 'send application/json'],
      ['/alt/v1/embeddings', 'a b/c', '', 'send application/json'],
      ['/v1/chat/completions', 'application/json', 'Content-Encoding: gzip\r\n', 'uncompressed'],
      ['/alt/v1/audio/transcriptions', 'multipart/form-data; boundary=b', 'Content-Encoding: gzip\r\n', 'uncompressed'],
      ['/v1/rerank', 'application/json; charset=iso-8859-1', '', 'in UTF-8'],
    ];
    for (const [path, type, extra, says] of cases) {
      // Only the head: the refusal must come without the body, and close the connection it did not ask the body on.
      const early = await raw(head(path, type, extra, true));
      expect([path, early.head.slice(0, 12)]).toEqual([path, 'HTTP/1.1 415']);
      expect(early.head).toMatch(/\r\nconnection: close(\r\n|$)/i);
      expect(envelopeOf(early.body)).toMatchObject({ code: 'unsupported_media_type', message: expect.stringContaining(says) });
      // The same answer as without Expect, its body sent: status, envelope (of the path's variant) and headers.
      const without = await raw(head(path, type, extra, false) + 'a'.repeat(length));
      expect([path, without.head.slice(0, 12), envelopeOf(without.body)]).toEqual([path, early.head.slice(0, 12), envelopeOf(early.body)]);
      expect(names(early.head)).toEqual(names(without.head));
    }
    // As the route does: an unknown media type is refused before its declared size, a compressed JSON body after it.
    expect((await raw(head('/v1/chat/completions', 'text/plain', '', true).replace(`: ${length}`, ': 30000000'))).head).toMatch(/^HTTP\/1\.1 415 /);
    const large = await raw(head('/v1/chat/completions', 'application/json', 'Content-Encoding: gzip\r\n', true).replace(`: ${length}`, ': 30000000'));
    expect(large.head).toMatch(/^HTTP\/1\.1 413 /);
    // A body the route takes, in any case and with its parameters, is still told to go on; so is a GET, which reads no body.
    for (const text of [
      head('/v1/chat/completions', 'Application/JSON; charset=UTF-8', '', true),
      head('/v1/audio/transcriptions', 'multipart/form-data; boundary=b', '', true),
      head('/v1/models', 'text/plain', '', true).replace('POST', 'GET'),
    ]) {
      const told = await new Promise<string>((resolve) => {
        const socket = connect(port, '127.0.0.1');
        socket.on('data', (d) => {
          resolve(String(d));
          socket.destroy();
        });
        socket.write(text);
      });
      expect(told).toMatch(/^HTTP\/1\.1 100 Continue/);
    }
  });

  it('Expect: 100-continue, a body of a media type the route refuses sent at once: the 415 reaches the client, not a reset', async () => {
    const size = 20 * 1024 * 1024;
    const head = `POST /alt/v1/chat/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ${key}\r\nContent-Type: text/plain\r\nContent-Length: ${size}\r\nExpect: 100-continue\r\n\r\n`;
    for (let i = 0; i < 3; i++) {
      const out = await uploadFromOwnProcess(port, head, size);
      expect(out.slice(0, 12)).toBe('HTTP/1.1 415');
      expect(out).not.toContain('100 Continue');
      expect(envelopeOf(out.slice(out.indexOf('\r\n\r\n') + 4))).toMatchObject({ code: 'unsupported_media_type' });
    }
  }, 30_000);

  it('Expect: 100-continue with the body sent at once (RFC 9110 lets a client not wait): the refusal reaches the client, not a reset', async () => {
    const head = (path: string, auth: string, length: number) =>
      `POST ${path} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ${auth}\r\nContent-Type: application/json\r\nContent-Length: ${length}\r\nExpect: 100-continue\r\n\r\n`;
    // The refusal comes while the client is still sending: closed at once, the connection is reset under its writes
    // and the answer lost (most of the time: a few tries, since the first ones on a cold gateway can escape it).
    const size = 20 * 1024 * 1024;
    // What the client read, split at its head; anything after the envelope (a reset) is left in the body and fails its parse.
    const answerOf = (out: string) => ({ status: out.slice(0, 12), head: out.slice(0, out.indexOf('\r\n\r\n')), body: out.slice(out.indexOf('\r\n\r\n') + 4) });
    for (let i = 0; i < 5; i++) {
      const wrong = answerOf(await uploadFromOwnProcess(port, head('/v1/chat/completions', 'gw_live_wrong', size), size));
      expect([wrong.status, envelopeOf(wrong.body).code]).toEqual(['HTTP/1.1 401', 'unauthorized']);
      const tooLarge = answerOf(await uploadFromOwnProcess(port, head('/alt/v1/embeddings', key, size), size));
      expect([tooLarge.status, envelopeOf(tooLarge.body).code]).toEqual(['HTTP/1.1 413', 'payload_too_large']);
      expect(tooLarge.head).toMatch(/\r\nconnection: close(\r\n|$)/i);
    }
  }, 30_000);

  it('no Host on HTTP/1.1, an Expect other than 100-continue, CONNECT and HTTP/2’s preface are answered in the envelope, not with Node’s bare answers', async () => {
    // Closed after its answer, as a request with two Hosts is: what sent it (a proxy?) frames requests in its own way.
    const noHost = await raw('GET /v1/models HTTP/1.1\r\n\r\n');
    expect(noHost.head).toMatch(/^HTTP\/1\.1 400 /);
    expect(noHost.head).toMatch(/\r\nconnection: close(\r\n|$)/i);
    expect(envelopeOf(noHost.body)).toMatchObject({ code: 'validation_error', message: expect.stringContaining('Host header') });
    const expectation = await raw(`POST /alt/v1/chat/completions HTTP/1.1\r\nHost: x\r\nExpect: bogus\r\nContent-Length: 2\r\n\r\n`);
    expect(expectation.head).toMatch(/^HTTP\/1\.1 417 /);
    expect(envelopeOf(expectation.body)).toMatchObject({ code: 'invalid_request' });
    const tunnel = await raw('CONNECT example.com:443 HTTP/1.1\r\nHost: example.com:443\r\n\r\n');
    expect(tunnel.head).toMatch(/^HTTP\/1\.1 405 /);
    expect(envelopeOf(tunnel.body)).toMatchObject({ code: 'validation_error' });
    // A 405 names what its target allows (RFC 9110 15.5.6): nothing for a tunnel's host, a path's methods for a path.
    expect(tunnel.head).toMatch(/\r\nallow: \r\n/i);
    const onPath = await raw('CONNECT /v1/chat/completions HTTP/1.1\r\nHost: x\r\n\r\n');
    expect(onPath.head).toMatch(/^HTTP\/1\.1 405 /);
    expect(onPath.head).toMatch(/\r\nallow: POST\r\n/i);
    const onAdmin = await raw('CONNECT /admin/v1/keys?limit=1 HTTP/1.1\r\nHost: x\r\n\r\n');
    expect(onAdmin.head).toMatch(/\r\nallow: GET, HEAD, POST\r\n/i);
    // HTTP/2 with prior knowledge (a balancer set to speak h2c to its backends): said so, not Node's "Pause on PRI/Upgrade".
    const h2 = await raw('PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n');
    expect(h2.head).toMatch(/^HTTP\/1\.1 400 /);
    expect(envelopeOf(h2.body)).toMatchObject({ code: 'validation_error', message: expect.stringContaining('HTTP/2 is not served') });
  });

  it('two Host headers, two Content-Type headers, or a Host naming another host than an absolute-form target, are 400 in the variant’s envelope and the connection is closed (RFC 9112 3.2)', async () => {
    const get = (target: string, hosts: string[], after = '') =>
      `GET ${target} HTTP/1.1\r\n${hosts.map((h) => `Host: ${h}\r\n`).join('')}Authorization: Bearer ${key}\r\n\r\n${after}`;
    // A body labelled twice: Node reads the first type, a proxy in front may have read the second.
    const twoTypes = (path: string, after: string) => {
      const body = JSON.stringify({ model: 'meta/llama-3.3-70b', messages: [{ role: 'user', content: 'hi' }] });
      return `POST ${path} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ${key}\r\nContent-Type: application/json\r\nContent-Type: text/plain\r\nContent-Length: ${body.length}\r\n\r\n${body}${after}`;
    };
    // A good request pipelined after the refused one: never answered, the connection being closed after the 400.
    const next = get('/v1/models', ['x']);
    for (const [text, code, says] of [
      [get('/v1/models', ['gateway.example', 'attacker.example'], next), 'validation_error', 'exactly one Host'],
      [get('/alt/v1/models', ['x', 'x'], next), 'invalid_request', 'exactly one Host'],
      [get('http://gateway.example/v1/models', ['attacker.example'], next), 'validation_error', 'another host than the request target'],
      [get('http://gateway.example:8080/alt/v1/models', ['gateway.example'], next), 'invalid_request', 'another host than the request target'],
      [twoTypes('/v1/chat/completions', next), 'validation_error', 'at most one Content-Type'],
      [twoTypes('/alt/v1/chat/completions', next), 'invalid_request', 'at most one Content-Type'],
    ] as const) {
      const out = await exchange(port, text);
      expect(out.slice(0, 12)).toBe('HTTP/1.1 400');
      expect(out.split('HTTP/1.1 ').length - 1).toBe(1);
      const [head, body] = [out.slice(0, out.indexOf('\r\n\r\n')), out.slice(out.indexOf('\r\n\r\n') + 4)];
      expect(head).toMatch(/\r\nconnection: close(\r\n|$)/i);
      expect(head).toMatch(/\r\nx-request-id: req_/i);
      expect(envelopeOf(body)).toMatchObject({ code, message: expect.stringContaining(says) });
    }
    // Its Host in any case and with the scheme's own port, an absolute-form target is taken; so is one Host with an origin-form one.
    for (const text of [get('http://Gateway.Example/v1/models', ['gateway.example:80']), get('/v1/models', ['x'])]) {
      const out = await exchange(port, text.replace('\r\n\r\n', '\r\nConnection: close\r\n\r\n'));
      expect(out.slice(0, 12)).toBe('HTTP/1.1 200');
    }
    // With Expect: 100-continue, refused before the body is asked for.
    const upload = await raw(
      `POST /v1/chat/completions HTTP/1.1\r\nHost: a\r\nHost: b\r\nAuthorization: Bearer ${key}\r\nContent-Type: application/json\r\nContent-Length: 100\r\nExpect: 100-continue\r\n\r\n`,
    );
    expect(upload.head).toMatch(/^HTTP\/1\.1 400 /);
    expect(upload.head).toMatch(/\r\nconnection: close(\r\n|$)/i);
    expect(envelopeOf(upload.body)).toMatchObject({ code: 'validation_error', message: expect.stringContaining('exactly one Host') });
  });

  it('bytes that are not HTTP, sent while a stream is being answered, do not land inside that answer', async () => {
    const body = JSON.stringify({ model: 'meta/llama-3.3-70b', messages: [{ role: 'user', content: 'stream please' }], stream: true });
    gw.sim.providers.scaleway?.configure({ chunkGapMs: 30 });
    try {
      const out = await new Promise<string>((resolve) => {
        const socket = connect(port, '127.0.0.1');
        let text = '';
        let sent = false;
        socket.on('data', (d) => {
          text += String(d);
          if (!sent && text.includes('data: {')) {
            sent = true;
            socket.write('GARBAGE\r\n\r\n');
          }
        });
        socket.on('error', () => {});
        socket.on('close', () => resolve(text));
        socket.write(
          `POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ${key}\r\nContent-Type: application/json\r\nX-Gateway-Provider: scaleway\r\nContent-Length: ${Buffer.byteLength(body)}\r\n\r\n${body}`,
        );
      });
      expect(out).toMatch(/^HTTP\/1\.1 200 /);
      // The stream is answered whole, its last chunk before anything else; only then the refusal, and the close.
      const next = out.indexOf('HTTP/1.1', 1);
      expect(out.slice(0, next)).toContain('data: [DONE]');
      expect(out.slice(0, next)).toMatch(/\r\n0\r\n\r\n$/);
      expect(out.slice(next)).toMatch(/^HTTP\/1\.1 400 /);
    } finally {
      // The default at latency scale 0.
      gw.sim.providers.scaleway?.configure({ chunkGapMs: 0 });
    }
  });

  it('a request read whole is answered before the bytes after it are refused (a Content-Length short of its body), and recorded as answered', async () => {
    const { id, key: own } = await gw.createKey({ rateLimitRpm: 1000 });
    // A Content-Length counted in characters: 'é' is two bytes, so the body's last byte is left over as the next request.
    const body = JSON.stringify({ model: 'meta/llama-3.3-70b', messages: [{ role: 'user', content: 'café' }] });
    const head = `POST /alt/v1/chat/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ${own}\r\nContent-Type: application/json\r\n`;
    const out = await exchange(port, `${head}Content-Length: ${body.length}\r\n\r\n${body}`);
    expect(out).toMatch(/^HTTP\/1\.1 400 /);
    expect(out).toContain('not valid JSON');
    // A whole request followed by bytes that are not HTTP: its answer first, then the refusal, which says what to check.
    const whole = await exchange(port, `${head}Content-Length: ${Buffer.byteLength(body)}\r\n\r\n${body} \r\n`);
    expect(whole).toMatch(/^HTTP\/1\.1 200 /);
    expect(whole).toContain('"object":"chat.completion"');
    const next = whole.indexOf('HTTP/1.1', 1);
    expect(whole.slice(next)).toMatch(/^HTTP\/1\.1 400 /);
    expect(envelopeOf(whole.slice(whole.indexOf('\r\n\r\n', next) + 4)).message).toMatch(/Content-Length was missing or short of its body/);
    await eventually(async () => {
      await gw.gateway.services.usage.flush();
      const records = await gw.gateway.services.store.usage.list({ keyId: id });
      expect(records.map((rec) => rec.status)).toEqual([200]);
    });
  });

  it('oversized headers are 431 headers_too_large in the envelope', async () => {
    const r = await raw(`GET /v1/models HTTP/1.1\r\nHost: x\r\nX-Big: ${'a'.repeat(40_000)}\r\n\r\n`);
    expect(r.head).toMatch(/^HTTP\/1\.1 431 /);
    expect(envelopeOf(r.body)).toMatchObject({ code: 'headers_too_large' });
    expect(r.head).toMatch(/\r\nserver-timing: gw;desc="gateway";dur=\d+\.\d\d, upstream;dur=0\.00, total;dur=\d+\.\d\d(\r\n|$)/im);
    // A long URL counts in the same head: the message says so, and the limit, not 'headers' alone.
    const url = await raw(`GET /v1/models?q=${'a'.repeat(20_000)} HTTP/1.1\r\nHost: x\r\n\r\n`);
    expect(url.head).toMatch(/^HTTP\/1\.1 431 /);
    expect(envelopeOf(url.body).message).toMatch(/its URL and headers together\) is larger than this gateway accepts \(16384 bytes\)/);
  });

  it('a body trickled in slower than GW_REQUEST_TIMEOUT_MS is cut with 408 request_timeout, whatever the key', async () => {
    const head = `POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ${key}\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n{"m`;
    const count = async (variant: string, status: number) => {
      const text = await (await fetch(`${gw.url}/metrics`)).text();
      const line = text
        .split('\n')
        .find((l) => l.startsWith(`gw_http_requests_total{route="/alt/v1/chat/completions",variant="${variant}",status="${status}"}`));
      return Number(line?.split(' ').at(-1) ?? 0);
    };
    const before = [await count('b', 408), await count('b', 499)];
    const r = await raw(head.replace('/v1/', '/alt/v1/'), { more: ' ', everyMs: 200 });
    expect(r.head).toMatch(/^HTTP\/1\.1 408 /);
    // Its head arrived: answered in its own variant's envelope, and counted as the 408 it got, not as a client gone.
    expect(JSON.parse(r.body)).toMatchObject({ error: { code: 'request_timeout', type: 'invalid_request_error' } });
    expect([await count('b', 408), await count('b', 499)]).toEqual([before[0] + 1, before[1]]);
    // The deadline (1 s) plus at most one 5 s checking period.
    expect(r.ms).toBeLessThan(7_000);
  }, 15_000);

  it('a pipelined request whose body is late does not take the 408 for the request before it, which is still being answered: that one is recorded and its hold let go', async () => {
    const { id, key: budgeted } = await gw.createKey({ rateLimitRpm: 1000, budget: 5 });
    const body = JSON.stringify({ model: 'meta/llama-3.3-70b', messages: [{ role: 'user', content: 'slow' }] });
    const first = `POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ${budgeted}\r\nContent-Type: application/json\r\nX-Gateway-Provider: scaleway\r\nContent-Length: ${Buffer.byteLength(body)}\r\n\r\n${body}`;
    const second = `POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ${budgeted}\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n{"m`;
    gw.sim.providers.scaleway?.setFault({ kind: 'latency', ms: 10_000 });
    try {
      // The first request is in its handler (waiting on the provider) when the second's body runs out of time.
      const r = await raw(first + second, { more: ' ', everyMs: 200 });
      expect(r.head).toMatch(/^HTTP\/1\.1 408 /);
      await eventually(async () => {
        await gw.gateway.services.usage.flush();
        const records = await gw.gateway.services.store.usage.list({ keyId: id });
        expect(records.map((rec) => [rec.status, rec.errorCode])).toEqual([[499, 'client_closed']]);
      });
      expect(await gw.gateway.services.ledger.peek(`key:${id}`, `key:${id}`)).toMatchObject({ reserved: 0 });
    } finally {
      gw.sim.providers.scaleway?.clearFaults();
    }
  }, 15_000);

  it('an HTTP/1.0 request with Transfer-Encoding is 400 in the variant’s envelope and the connection closed, and reaches no provider (RFC 9112 6.1)', async () => {
    const upstream = () => Object.values(gw.sim.providers).reduce((n, p) => n + p.stats().total, 0);
    const before = upstream();
    const body = JSON.stringify({ model: 'mistral/small', messages: [{ role: 'user', content: 'hi' }] });
    const chunked = `${Buffer.byteLength(body).toString(16)}\r\n${body}\r\n0\r\n\r\n`;
    for (const [base, code] of [
      ['/v1', 'validation_error'],
      ['/alt/v1', 'invalid_request'],
    ] as const) {
      const head = `POST ${base}/chat/completions HTTP/1.0\r\nHost: x\r\nAuthorization: Bearer ${key}\r\nContent-Type: application/json\r\n`;
      for (const framing of ['Transfer-Encoding: chunked\r\n', `Transfer-Encoding: chunked\r\nConnection: keep-alive\r\n`]) {
        const out = await exchange(port, `${head}${framing}\r\n${chunked}`);
        expect(out.slice(0, 12)).toBe('HTTP/1.1 400');
        expect(out.split('HTTP/1.1 ').length - 1).toBe(1);
        const at = out.indexOf('\r\n\r\n');
        expect(out.slice(0, at)).toMatch(/\r\nconnection: close(\r\n|$)/i);
        expect(envelopeOf(out.slice(at + 4))).toMatchObject({ code, message: expect.stringContaining('Transfer-Encoding') });
      }
    }
    expect(upstream()).toBe(before);
  });

  it('a bad percent-escape is 400 in the variant’s envelope with a request id; an overlong model id is model_not_found', async () => {
    for (const [base, code] of [
      [gw.baseA, 'validation_error'],
      [gw.baseB, 'invalid_request'],
    ] as const) {
      const r = await fetch(`${base}/models/%ZZ`, { headers: { authorization: `Bearer ${key}` } });
      expect(r.status).toBe(400);
      expect(r.headers.get('x-request-id')).toMatch(/^req_/);
      expect(((await r.json()) as Envelope).error).toMatchObject({ code, message: expect.stringContaining('percent-escape') });
    }
    const long = await fetch(`${gw.baseB}/models/${'x'.repeat(300)}`, { headers: { authorization: `Bearer ${key}` } });
    expect([long.status, ((await long.json()) as Envelope).error.code]).toEqual([400, 'model_not_found']);
  });
});

describe('pipelined requests', () => {
  const get = (path: string, close = false) => `GET ${path} HTTP/1.1\r\nHost: x\r\n${close ? 'Connection: close\r\n' : ''}\r\n`;
  const answers = (text: string) => text.split('HTTP/1.1 ').length - 1;

  it('a connection with thousands of requests sent at once is closed past the bound, not answered thousands of times ahead of other clients', async () => {
    // Each one was started at once, queued before any other client's request (100 such connections held a /health for 24 s).
    const out = await exchange(port, get('/v1/models').repeat(5000), 5000);
    expect(answers(out)).toBeLessThanOrEqual(MAX_PIPELINED);
  });

  it('a CONNECT pipelined behind a request still being answered is refused after that answer, not in its place', async () => {
    gw.sim.providers.scaleway?.setFault({ kind: 'latency', ms: 300, times: 1 });
    try {
      const body = JSON.stringify({ model: 'meta/llama-3.3-70b', messages: [{ role: 'user', content: 'hi' }], max_tokens: 5 });
      const chat =
        `POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ${key}\r\nContent-Type: application/json\r\n` +
        `X-Gateway-Provider: scaleway\r\nContent-Length: ${Buffer.byteLength(body)}\r\n\r\n${body}`;
      const out = await exchange(port, `${chat}CONNECT example.com:443 HTTP/1.1\r\nHost: example.com:443\r\n\r\n`);
      expect(out.match(/HTTP\/1\.1 \d+/g)).toEqual(['HTTP/1.1 200', 'HTTP/1.1 405']);
      expect(out).toContain('"object":"chat.completion"');
    } finally {
      gw.sim.providers.scaleway?.clearFaults();
    }
  });

  it('a client that pipelines a few requests, or sends many one after another on one connection, gets every answer', async () => {
    const few = await exchange(port, get('/healthz').repeat(MAX_PIPELINED - 1) + get('/healthz', true));
    expect(answers(few)).toBe(MAX_PIPELINED);
    const socket = connect(port, '127.0.0.1');
    let out = '';
    socket.on('data', (d) => {
      out += String(d);
    });
    for (let i = 1; i <= 3 * MAX_PIPELINED; i++) {
      socket.write(get('/healthz'));
      await eventually(() => expect(answers(out)).toBe(i));
    }
    expect(out.match(/HTTP\/1\.1 (\d+)/g)?.every((line) => line.endsWith('200'))).toBe(true);
    socket.destroy();
  });
});

describe('bodies the gateway cannot pass on', () => {
  const post = (body: string) =>
    fetch(`${gw.baseA}/chat/completions`, { method: 'POST', headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' }, body });

  it('JSON nested too deeply to serialise again is a 400, not a 500', async () => {
    const depth = 50_000;
    const schema = `${'{"a":'.repeat(depth)}1${'}'.repeat(depth)}`;
    const body = `{"model":"meta/llama-3.3-70b","messages":[{"role":"user","content":"hi"}],"response_format":{"type":"json_schema","json_schema":{"name":"x","schema":${schema}}}}`;
    const r = await post(body);
    expect(r.status).toBe(400);
    expect(((await r.json()) as Envelope).error).toMatchObject({ code: 'validation_error', message: expect.stringContaining('nested too deeply') });
  });

  it('a 4 MB body of nested brackets is refused at once, whether closed or not: it does not hold the gateway from other clients', async () => {
    const depth = 1_900_000;
    const start = '{"model":"meta/llama-3.3-70b","messages":[{"role":"user","content":"hi"}],"metadata":';
    for (const body of [`${start}${'['.repeat(depth)}${']'.repeat(depth)}}`, `${start}${'['.repeat(2 * depth)}`]) {
      // Parsing it level by level took the event loop for seconds (an unclosed one twice, for the error's detail).
      const other = (async () => {
        await new Promise((r) => setTimeout(r, 20));
        const began = performance.now();
        await (await fetch(`${gw.url}/health`)).text();
        return performance.now() - began;
      })();
      const began = performance.now();
      const r = await post(body);
      const took = performance.now() - began;
      expect(r.status).toBe(400);
      expect(((await r.json()) as Envelope).error).toMatchObject({ code: 'validation_error', message: expect.stringContaining('nested too deeply') });
      expect(took).toBeLessThan(800);
      expect(await other).toBeLessThan(800);
    }
    // Brackets inside strings are text: a large body full of them is taken.
    const text = '[{'.repeat(20_000);
    const ok = await post(JSON.stringify({ model: 'meta/llama-3.3-70b', messages: [{ role: 'user', content: `say "${text}"` }], max_tokens: 5 }));
    expect(ok.status).toBe(200);
  });

  it('max_tokens (or max_completion_tokens) beyond the model’s context window is a 400 naming it', async () => {
    const r = await post(JSON.stringify({ model: 'meta/llama-3.3-70b', messages: [{ role: 'user', content: 'hi' }], max_tokens: 10_000_000 }));
    expect(r.status).toBe(400);
    expect(((await r.json()) as Envelope).error).toMatchObject({ param: 'max_tokens', message: expect.stringContaining('context window') });
    const newer = await post(JSON.stringify({ model: 'meta/llama-3.3-70b', messages: [{ role: 'user', content: 'hi' }], max_completion_tokens: 10_000_000 }));
    expect(((await newer.json()) as Envelope).error).toMatchObject({ param: 'max_completion_tokens' });
    const negative = await post(JSON.stringify({ model: 'meta/llama-3.3-70b', messages: [{ role: 'user', content: 'hi' }], max_completion_tokens: -1 }));
    expect([negative.status, ((await negative.json()) as Envelope).error.param]).toEqual([400, 'max_completion_tokens']);
  });
});

describe('what an error repeats of the request', () => {
  it('a path no route takes is repeated at most 200 characters long, a key in it redacted before the cut', async () => {
    const long = `/v1/nothing/${'a'.repeat(8000)}`;
    const r = await fetch(`${gw.url}${long}`, { headers: { authorization: `Bearer ${key}` } });
    expect(r.status).toBe(404);
    const { message } = ((await r.json()) as Envelope).error;
    expect(message.length).toBeLessThan(300);
    expect(message).toContain(`No route GET /v1/nothing/aaa`);
    expect(message).toContain('…');
    // A key the cut would split is not left with its head showing.
    const other = 'gw_live_ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789abcdefgh';
    const split = `/v1/${'b'.repeat(180)}/${other}/x`;
    const s = await fetch(`${gw.url}${split}`, { headers: { authorization: `Bearer ${key}` } });
    const said = ((await s.json()) as Envelope).error.message;
    expect(said).not.toContain('gw_live_ABC');
    expect(said).not.toContain('ABCDEFGHIJ');
    // 405 names the path as well, bounded.
    const post = await fetch(`${gw.url}/v1/models/${'c'.repeat(900)}`, { method: 'POST', headers: { authorization: `Bearer ${key}` } });
    expect(post.status).toBe(405);
    expect(((await post.json()) as Envelope).error.message.length).toBeLessThan(300);
  });

  it('an admin path with a NUL that no route takes is a 404 naming the path', async () => {
    const r = await fetch(`${gw.url}/admin/v1/keys%00`, { headers: { authorization: `Bearer ${ADMIN_TOKEN}` } });
    expect(r.status).toBe(404);
    const { message } = ((await r.json()) as Envelope).error;
    expect(message).toBe('No admin route GET /admin/v1/keys%00.');
  });
});
