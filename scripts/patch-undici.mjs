// Runs after `npm ci` / `npm install` (the root's postinstall): moves undici's idle keep-alive socket
// check (GHSA-35p6-xmwp-9g52) from the next request's dispatch to the end of the previous response.
//
// Stock undici writes a request on a reused idle connection only from a setImmediate scheduled at
// dispatch, so that bytes, a FIN or a RST already pending on that socket are read first. It already
// waits for one such check phase after every response (setImmediate(client[kResume]) when a response
// completes): that check phase comes after the poll phase in which the response ended, so this patch
// counts it as the socket's check. A request dispatched in a later turn of the loop is written at once;
// one dispatched in the same turn waits as before; bytes arriving on the idle socket in between are read
// as they arrive, and undici destroys the connection on them (a response with no request). Why: the
// deferred write was about half of the gateway's added latency at 50 connections (docs/decisions.md).
//
// The edit is exact: a file that does not hold the expected text (another undici) is left alone, and the
// install says so; the gateway still works, with stock undici's deferred writes.
import { readFileSync, writeFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { dirname, join } from 'node:path';
import { pathToFileURL } from 'node:url';

const MARKER = 'gw: idle socket check at response end';
const ANCHOR = `      // We must wait a full event loop cycle to reuse this socket to make sure
      // that non-spec compliant servers are not closing the connection even if they
      // said they won't.
      setImmediate(client[kResume])`;
const REPLACEMENT = ANCHOR.replace(
  'setImmediate(client[kResume])',
  `// ${MARKER} (scripts/patch-undici.mjs): that cycle's check phase also
      // validates the idle socket, so that a request dispatched later is written at once.
      setImmediate(resumeIdleChecked, client, socket)`,
);
const HELPER = `
// ${MARKER} (scripts/patch-undici.mjs). Runs in the check phase after the poll
// phase in which the socket's last response completed: bytes, FIN or RST pending on it by then were read
// (and undici destroys the socket on a response nobody asked for), as the dispatch-time check ensures.
function resumeIdleChecked (client, socket) {
  if (client[kSocket] === socket && !socket.destroyed && client[kRunning] === 0 && socket[kIdleSocketValidation] === 0) {
    socket[kIdleSocketValidation] = 2
  }
  client[kResume]()
}
`;

/** The client-h1.js of the undici that the server package resolves. */
function undiciClientH1() {
  const requireFromServer = createRequire(new URL('../packages/server/package.json', import.meta.url));
  const pkgPath = requireFromServer.resolve('undici/package.json');
  const version = JSON.parse(readFileSync(pkgPath, 'utf8')).version;
  return { version, file: join(dirname(pkgPath), 'lib/dispatcher/client-h1.js') };
}

/** Whether the undici the server resolves carries this patch. */
export function undiciIdleCheckPatched() {
  try {
    return readFileSync(undiciClientH1().file, 'utf8').includes(MARKER);
  } catch {
    return false;
  }
}

/** 'patched', 'already' or the reason it was left alone. */
export function patchUndici() {
  let target;
  try {
    target = undiciClientH1();
  } catch {
    return 'undici is not installed';
  }
  const source = readFileSync(target.file, 'utf8');
  if (source.includes(MARKER)) return 'already';
  const at = source.indexOf(ANCHOR);
  if (at < 0 || source.indexOf(ANCHOR, at + 1) >= 0 || !source.includes('module.exports = connectH1')) {
    return `undici ${target.version}'s client-h1.js is not the one this patch knows`;
  }
  const patched = source.replace(ANCHOR, REPLACEMENT).replace('module.exports = connectH1', `${HELPER}\nmodule.exports = connectH1`);
  writeFileSync(target.file, patched);
  return 'patched';
}

if (process.argv[1] && import.meta.url === pathToFileURL(process.argv[1]).href) {
  const outcome = patchUndici();
  if (outcome === 'patched' || outcome === 'already') console.log(`undici: idle keep-alive socket check at response end (${outcome})`);
  else console.warn(`undici left as installed: ${outcome}; requests on reused upstream connections wait one loop turn (docs/decisions.md)`);
}
