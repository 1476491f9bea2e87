// Preloaded (`--import`) into a gateway process under test, and so into each of its threads: every file a thread
// resolves (of an npm package, `<package>/<path>`, or of this repository's packages, `@gw/<package>/<path>`) is
// written once to `<RESOLVED_LOG_DIR>/<threadId>.log`.
import { appendFileSync } from 'node:fs';
import { registerHooks } from 'node:module';
import { threadId } from 'node:worker_threads';

const dir = process.env.RESOLVED_LOG_DIR;
const seen = new Set();
registerHooks({
  resolve(specifier, context, nextResolve) {
    const resolved = nextResolve(specifier, context);
    const path = /\/node_modules\/(.+)$/.exec(resolved.url)?.[1] ?? /\/packages\/([^/]+\/.+)$/.exec(resolved.url)?.[1].replace(/^/, '@gw/');
    if (dir && path && !seen.has(path)) {
      seen.add(path);
      appendFileSync(`${dir}/${threadId}.log`, `${path}\n`);
    }
    return resolved;
  },
});
