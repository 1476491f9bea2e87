// Preloaded (`--import`) into a gateway process under test: main.ts's import of the start's code takes 1.5 s longer
// (the loader held, as a slow disk or a busy machine holds it), and the process says when that import begins on
// stderr, so that a test can send a signal while the code loads.
import { registerHooks } from 'node:module';

registerHooks({
  resolve(specifier, context, nextResolve) {
    if (specifier === './start.js' && context.parentURL?.endsWith('/main.js')) {
      process.stderr.write('test: loading start.js\n');
      const until = Date.now() + 1500;
      while (Date.now() < until) {
        // The loader's own pace: nothing else runs meanwhile, signals included.
      }
    }
    return nextResolve(specifier, context);
  },
});
