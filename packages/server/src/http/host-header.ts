import type { IncomingMessage } from 'node:http';
import { GatewayError } from '../errors/gateway-error.js';
import { headerCount } from '../lib/raw-headers.js';

/**
 * The refusal of a request whose Host cannot be taken (RFC 9112, section 3.2): none on HTTP/1.1, more than one (Node
 * keeps the first without a word, where a proxy in front may have read the last), or one naming another host than
 * an absolute-form target (`GET http://a/… HTTP/1.1` with `Host: b`). Node's own check answers without a body, so it
 * is done here. A request with a Host it cannot take is closed after its answer: what it was framed as is in doubt.
 * So is an HTTP/1.0 request with Transfer-Encoding, whose body a proxy in front may have framed otherwise, and one
 * with two Content-Types, whose body a proxy in front may have read as the other.
 */
export function hostError(req: IncomingMessage): GatewayError | null {
  // HTTP/1.0 has no chunked coding: a proxy in front may frame this body by Content-Length or by the connection's end,
  // where Node reads chunks (RFC 9112 6.1: its framing is faulty). Refused, as nginx does, rather than run.
  if (req.httpVersionMinor === 0 && req.headers['transfer-encoding'] !== undefined) {
    return refused('An HTTP/1.0 request cannot carry Transfer-Encoding (RFC 9112, section 6.1): send HTTP/1.1, or the body with a Content-Length.');
  }
  const host = req.headers.host;
  if (host === undefined) return req.httpVersion === '1.1' ? refused('An HTTP/1.1 request must carry a Host header.') : null;
  const repeated = singletonRepeated(req.rawHeaders);
  if (repeated === 'host') return refused('A request must carry exactly one Host header (RFC 9112, section 3.2).');
  if (repeated === 'content-type') {
    return refused('A request must carry at most one Content-Type header (RFC 9110, section 8.3): its body cannot be read as two media types.');
  }
  const target = req.url ?? '/';
  // Origin-form ('/…'), as nearly every request is: nothing more to compare.
  if (target.charCodeAt(0) === 47 || target === '*') return null;
  return sameAuthority(target, host) ? null : refused('The Host header names another host than the request target (RFC 9112, section 3.2.2): send one.');
}

/**
 * Which of Host and Content-Type comes more than once, if one does: Node keeps the first of each without a word,
 * where a proxy in front may have read the last. Names are compared only when two are as long as one of them: most
 * requests have no other such name, so they cost a pass over the names' lengths (tens of ns, nothing allocated).
 */
function singletonRepeated(rawHeaders: string[]): 'host' | 'content-type' | null {
  let fourLetters = 0;
  let twelveLetters = 0;
  for (let i = 0; i < rawHeaders.length; i += 2) {
    const length = (rawHeaders[i] as string).length;
    if (length === 4) fourLetters++;
    else if (length === 12) twelveLetters++;
  }
  if (fourLetters > 1 && headerCount(rawHeaders, 'host') > 1) return 'host';
  if (twelveLetters > 1 && headerCount(rawHeaders, 'content-type') > 1) return 'content-type';
  return null;
}

/** Whether an absolute-form target's authority is `host`, each with its scheme's default port taken off. */
function sameAuthority(target: string, host: string): boolean {
  let url: URL;
  try {
    url = new URL(target);
  } catch {
    // Not an absolute URL either: for the router to answer.
    return true;
  }
  try {
    return new URL(`${url.protocol}//${host}`).host === url.host;
  } catch {
    return false;
  }
}

function refused(message: string): GatewayError {
  return new GatewayError('validation', message, { headers: { connection: 'close' } });
}
