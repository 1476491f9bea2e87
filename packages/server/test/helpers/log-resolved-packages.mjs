// Preloaded (`--import`) into a gateway process under test, and so into each of its threads: every npm package a
// thread resolves a module of is written once to `<RESOLVED_LOG_DIR>/<threadId>.log`.
import { appendFileSync } from 'node:fs';
import { registerHooks } from 'node:module';
import { threadId } from 'node:worker_threads';

const dir = process.env.RESOLVED_LOG_DIR;
const seen = new Set();
registerHooks({
  resolve(specifier, context, nextResolve) {
    const resolved = nextResolve(specifier, context);
    const pkg = /\/node_modules\/((?:@[^/]+\/)?[^/]+)\//.exec(resolved.url)?.[1];
    if (dir && pkg && !seen.has(pkg)) {
      seen.add(pkg);
      appendFileSync(`${dir}/${threadId}.log`, `${pkg}\n`);
    }
    return resolved;
  },
});
