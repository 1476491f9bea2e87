import { Writable } from 'node:stream';
import pino from 'pino';
import { describe, expect, it } from 'vitest';
import { lazyChildLogger } from '../src/http/lazy-request-logger.js';

function capture(level: string) {
  const lines: Record<string, unknown>[] = [];
  const out = new Writable({
    write(chunk, _enc, done) {
      lines.push(JSON.parse(String(chunk)));
      done();
    },
  });
  const root = pino({ level, redact: { paths: ['req.headers.authorization'], censor: '[redacted]' } }, out);
  return { root, lines };
}

const flushed = () => new Promise((r) => setImmediate(r));

describe('the lazy request logger', () => {
  it('writes nothing below the level, and at it writes with the request id and redaction', async () => {
    const { root, lines } = capture('warn');
    const log = lazyChildLogger(root, { reqId: 'req_1' }, {});
    log.info('not written');
    log.debug('not written');
    log.warn({ req: { headers: { authorization: 'Bearer gw_live_secret' } } }, 'written');
    await flushed();
    expect(lines).toHaveLength(1);
    expect(lines[0]).toMatchObject({ reqId: 'req_1', msg: 'written', req: { headers: { authorization: '[redacted]' } } });
    expect(JSON.stringify(lines)).not.toContain('gw_live_secret');
  });

  it('keeps the bindings in children and honours a route’s own level', async () => {
    const { root, lines } = capture('warn');
    lazyChildLogger(root, { reqId: 'req_2' }, {}).child({ part: 'upstream' }).error('failed');
    lazyChildLogger(root, { reqId: 'req_3' }, { level: 'debug' }).debug('route at debug');
    await flushed();
    expect(lines).toEqual([
      expect.objectContaining({ reqId: 'req_2', part: 'upstream', msg: 'failed' }),
      expect.objectContaining({ reqId: 'req_3', msg: 'route at debug' }),
    ]);
  });
});
