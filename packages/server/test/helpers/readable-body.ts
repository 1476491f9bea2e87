import type { Readable } from 'node:stream';
import { errors } from 'undici';
import type { UpstreamBody } from '../../src/providers/http-client.js';

/**
 * A body fed from a stream written by hand, read the way the gateway reads
 * an upstream's: its data as it comes, then the end, an error, or (closed
 * before its end) the aborted error a cut request gets.
 */
export function readableBody(stream: Readable): UpstreamBody {
  return {
    read(reader) {
      let done = false;
      const once = (deliver: () => void) => {
        if (done) return;
        done = true;
        deliver();
      };
      stream.on('data', (bytes: Buffer) => reader.data(Buffer.isBuffer(bytes) ? bytes : Buffer.from(bytes)));
      stream.once('end', () => once(() => reader.end()));
      stream.once('error', (err) => once(() => reader.error(err)));
      stream.once('close', () => once(() => reader.error(new errors.RequestAbortedError())));
    },
    destroy: () => stream.destroy(),
  };
}
