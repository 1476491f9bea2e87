/** A configuration problem: names the file, the field path and what was expected. */
export class ConfigError extends Error {
  constructor(
    readonly file: string,
    readonly path: string,
    readonly expected: string,
  ) {
    super(`Invalid configuration in ${file} at ${path}: expected ${expected}`);
    this.name = 'ConfigError';
  }
}
