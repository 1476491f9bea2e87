import { existsSync, mkdirSync, writeFileSync } from 'node:fs';
import { connect } from 'node:net';
import { join } from 'node:path';
import { freePort, spawnPinned, stopChild } from './processes.mjs';
import { measured } from './services.mjs';

/**
 * Compiled proxies from Debian (nginx-light, haproxy) as floors of the same call: event-driven C, one
 * process on the gateway's core, keep-alive to the upstream, streamed answers relayed as they arrive.
 * What they add is what this machine's loopback hops and wake-ups cost any proxy, before its own work.
 */
export const COMPILED_PROXIES = {
  nginx: { binary: '/usr/sbin/nginx', package: 'nginx-light' },
  'haproxy-http': { binary: '/usr/sbin/haproxy', package: 'haproxy' },
  'haproxy-tcp': { binary: '/usr/sbin/haproxy', package: 'haproxy' },
};

export function compiledProxyInstalled(kind) {
  return existsSync(COMPILED_PROXIES[kind].binary);
}

function nginxConfig({ dir, port, upstreamUrl }) {
  const { host } = new URL(upstreamUrl);
  // One process (no master), which serves as nginx's single worker would; nothing logged per request.
  return `daemon off;
master_process off;
worker_processes 1;
pid ${join(dir, 'nginx.pid')};
error_log ${join(dir, 'nginx-error.log')} warn;
events { worker_connections 8192; }
http {
  access_log off;
  client_body_temp_path ${join(dir, 'body')};
  proxy_temp_path ${join(dir, 'proxy')};
  fastcgi_temp_path ${join(dir, 'fastcgi')};
  uwsgi_temp_path ${join(dir, 'uwsgi')};
  scgi_temp_path ${join(dir, 'scgi')};
  keepalive_requests 1000000;
  keepalive_timeout 75s;
  upstream bench { server ${host}; keepalive 1024; keepalive_requests 1000000; keepalive_timeout 75s; }
  server {
    listen 127.0.0.1:${port};
    location / {
      proxy_pass http://bench;
      proxy_http_version 1.1;
      proxy_set_header Connection "";
      proxy_buffering off;
    }
  }
}
`;
}

function haproxyConfig({ dir, port, upstreamUrl, mode }) {
  const { host } = new URL(upstreamUrl);
  return `global
  nbthread 1
  maxconn 8000
  pidfile ${join(dir, 'haproxy.pid')}
defaults
  mode ${mode}
  timeout connect 5s
  timeout client 75s
  timeout server 75s
  ${mode === 'http' ? 'timeout http-keep-alive 75s' : ''}
  ${mode === 'http' ? '# Without it HAProxy sends small chunks with MSG_MORE, and a streamed chunk can wait for the 200 ms cork.' : ''}
  ${mode === 'http' ? 'option http-no-delay' : ''}
frontend bench_in
  bind 127.0.0.1:${port}
  default_backend bench_out
backend bench_out
  ${mode === 'http' ? 'http-reuse always' : ''}
  server upstream ${host}
`;
}

async function waitForPort(port, child, timeoutMs, what) {
  const deadline = Date.now() + timeoutMs;
  while (Date.now() < deadline) {
    if (child.exitCode !== null || child.signalCode !== null) throw new Error(`${what} exited before it listened; see ${child.logFile}`);
    const open = await new Promise((resolve) => {
      const socket = connect({ host: '127.0.0.1', port }, () => {
        socket.destroy();
        resolve(true);
      });
      socket.on('error', () => resolve(false));
    });
    if (open) return;
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
  throw new Error(`${what} did not listen within ${timeoutMs} ms; see ${child.logFile}`);
}

/** A compiled proxy pinned to `core`, in front of the fake upstream, with the gateway's shape for the scenarios. */
export async function startCompiledProxy({ core, dir, kind, upstreamUrl }) {
  const own = join(dir, kind);
  mkdirSync(own, { recursive: true });
  const port = await freePort();
  const configFile = join(own, `${kind}.conf`);
  let args;
  if (kind === 'nginx') {
    writeFileSync(configFile, nginxConfig({ dir: own, port, upstreamUrl }));
    args = ['-p', own, '-c', configFile];
  } else {
    writeFileSync(configFile, haproxyConfig({ dir: own, port, upstreamUrl, mode: kind === 'haproxy-tcp' ? 'tcp' : 'http' }));
    args = ['-db', '-f', configFile];
  }
  const child = spawnPinned({ core, command: COMPILED_PROXIES[kind].binary, args, logFile: join(dir, `${kind}.log`) });
  await waitForPort(port, child, 10_000, kind);
  const url = `http://127.0.0.1:${port}`;
  return {
    ...measured(child, url, 5_000),
    key: 'floor',
    scrape: async () => ({ eventLoopP99Ms: Number.NaN, eventLoopMaxMs: Number.NaN }),
    stop: () => stopChild(child, { timeoutMs: 5_000 }),
  };
}
