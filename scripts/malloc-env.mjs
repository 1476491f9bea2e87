// The memory allocator `npm start` runs the gateway on, as environment variables: jemalloc where the
// system has it (Debian's libjemalloc2, which redis-server already depends on), glibc's malloc otherwise.
// jemalloc's background thread hands freed pages back to the system after a second of disuse; glibc keeps
// freed memory in its arenas (docs/decisions.md). Run as a script, it prints NAME=value pairs for `env`;
// the bench imports it so that it measures what `npm start` runs.
import { execFileSync } from 'node:child_process';
import { existsSync } from 'node:fs';
import { pathToFileURL } from 'node:url';

const JEMALLOC = 'libjemalloc.so.2';
/** Freed pages go back after 1 s unused, from jemalloc's own thread rather than the next allocation. */
const JEMALLOC_CONF = 'background_thread:true,dirty_decay_ms:1000';
/** On glibc: a fixed mmap threshold, so that freed large buffers are unmapped rather than kept in an arena. */
const GLIBC_ENV = { MALLOC_MMAP_THRESHOLD_: '131072' };

/** ldconfig's tag for a library of this process's architecture (ldconfig -p: `libx.so (libc6,x86-64) => /path`). */
const ARCH_TAGS = { x64: 'x86-64', arm64: 'AArch64' };

/** The path of jemalloc's shared library as the dynamic linker's cache lists it for this architecture, or null. */
export function findJemalloc() {
  let listing;
  try {
    listing = execFileSync('/sbin/ldconfig', ['-p'], { encoding: 'utf8', stdio: ['ignore', 'pipe', 'ignore'] });
  } catch {
    return null; // no glibc dynamic linker cache (e.g. musl or macOS): the default allocator
  }
  const tag = ARCH_TAGS[process.arch];
  for (const line of listing.split('\n')) {
    const m = /^\s*(\S+) \(([^)]*)\) => (\S+)$/.exec(line);
    if (m && m[1] === JEMALLOC && (!tag || m[2].includes(tag)) && existsSync(m[3])) return m[3];
  }
  return null;
}

/**
 * The allocator's environment for a gateway started from `env`. An `LD_PRELOAD` already set (even empty)
 * is the operator's choice of allocator, left as it is; a `MALLOC_CONF` already set is kept.
 */
export function mallocEnv(env = process.env) {
  if (env.LD_PRELOAD !== undefined) return {};
  const lib = findJemalloc();
  if (!lib) return { ...GLIBC_ENV };
  return { LD_PRELOAD: lib, MALLOC_CONF: env.MALLOC_CONF ?? JEMALLOC_CONF };
}

/** `NAME=value` pairs, space-separated, as `env` takes them (the values hold no spaces). */
export function formatEnv(vars) {
  return Object.entries(vars)
    .map(([name, value]) => `${name}=${value}`)
    .join(' ');
}

if (process.argv[1] && import.meta.url === pathToFileURL(process.argv[1]).href) console.log(formatEnv(mallocEnv()));
