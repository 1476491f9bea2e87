// The process entry. The Node version is checked before anything else is loaded: on an older Node (a machine's own
// Node 20 rather than the pinned 24 that `npm start` uses), undici fails as it is imported, with a TypeError that
// says nothing of the cause.
const major = Number(process.versions.node.split('.')[0]);
if (major < 24) {
  console.error(`gw: needs Node >= 24, and this is ${process.version}. Start it with \`npm start\`, which runs the pinned Node that \`npm ci\` installs.`);
  process.exit(1);
}
// A signal while the gateway's code loads (a few hundred milliseconds) is kept for the start, which acts on it as on
// one that comes later: Node's default ended the process at once, with status 143 and no word.
const SIGNALS = ['SIGTERM', 'SIGINT', 'SIGHUP'] as const;
const early: string[] = [];
const keep = (signal: string) => early.push(signal);
for (const signal of SIGNALS) process.on(signal, keep);
const { start } = await import('./start.js');
start({
  early,
  handOver: () => {
    for (const signal of SIGNALS) process.off(signal, keep);
  },
});
