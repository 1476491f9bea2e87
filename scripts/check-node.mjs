// npm scripts must run on the pinned Node 24 (the `node` devDependency); a skipped
// install script silently falls back to the machine's older Node, so fail loudly.
const major = Number(process.versions.node.split('.')[0]);
if (major < 24) {
  console.error(
    `gw needs Node >= 24, but this script runs on ${process.version}. Run \`npm ci\` (it installs the pinned Node) and make sure the \`node\` package's install script ran.`,
  );
  process.exit(1);
}
