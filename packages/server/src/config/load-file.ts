import { closeSync, openSync, readSync } from 'node:fs';
import type { GatewayFileConfig, ProviderConfig } from '@gw/schema';
import { Value } from '@sinclair/typebox/value';
import { parseDocument } from 'yaml';
import { ConfigError } from './config-error.js';
import { FileConfigSchema } from './file-schema.js';
import { headerUnsafe } from './header-safe.js';
import { refusedEntry } from './provider-entry.js';
import { unservable } from './servable.js';

/** A reference, or `$${`: a literal `${`, as compose files escape it (a key or URL that holds those two characters). */
const REFERENCE = /\$\$\{|\$\{([A-Za-z_][A-Za-z0-9_]*)\}/g;

/**
 * Replaces `${NAME}` in every string with that environment variable; a missing one is an error, and so is a `${`
 * that is no such reference (`${KEY:-}`, `${KEY`), which was kept as written and sent as the provider key. `$${`
 * is a literal `${`.
 */
function substitute(value: unknown, env: NodeJS.ProcessEnv, file: string, path: string, referenced?: Set<string>): unknown {
  if (typeof value === 'string') {
    // Looked for in the file's text, not in what the variables hold.
    const rest = value.replace(REFERENCE, '');
    const at = rest.indexOf('${');
    if (at !== -1) {
      const shown = shownReference(rest.slice(at));
      throw new ConfigError(
        file,
        path || '/',
        `\${NAME} to name an environment variable (letters, digits and _; no default value), not ${shown ?? `a \${ with no closing }`}`,
      );
    }
    return value.replace(REFERENCE, (_m, name: string | undefined) => {
      if (name === undefined) return '${';
      referenced?.add(name);
      const v = env[name];
      if (v === undefined) throw new ConfigError(file, path || '/', `environment variable ${name} to be set`);
      return v;
    });
  }
  if (Array.isArray(value)) return value.map((v, i) => substitute(v, env, file, `${path}/${i}`, referenced));
  if (value !== null && typeof value === 'object') {
    return Object.fromEntries(Object.entries(value).map(([k, v]) => [k, substitute(v, env, file, `${path}/${k}`, referenced)]));
  }
  return value;
}

/**
 * A `${…}` that is no reference, for the start's message: its name and a shell operator as written, but not what
 * follows them, as that is the default value, most often the provider key itself (`${MISTRAL_API_KEY:-3kT…}`).
 * Undefined when it has no closing brace.
 */
function shownReference(text: string): string | undefined {
  const whole = /^\$\{[^}\n]{0,60}\}/.exec(text)?.[0];
  if (whole === undefined) return undefined;
  const head = /^\$\{\s*[A-Za-z0-9_]*\s*(?::?[-=?+])?/.exec(whole)?.[0] ?? '${';
  return head.length >= whole.length - 1 ? whole : `${head}…}`;
}

const EMPTY = 'providers and models (the config file is empty)';

/** `referenced` collects the environment variables the file names (\${NAME}). */
export function parseConfigText(text: string, file: string, env: NodeJS.ProcessEnv, referenced?: Set<string>): GatewayFileConfig {
  let raw: unknown;
  if (text.trim() === '') throw new ConfigError(file, '/', EMPTY);
  // A byte order mark, as some editors save it: YAML skips it, JSON.parse does not.
  if (text.charCodeAt(0) === 0xfeff) text = text.slice(1);
  try {
    raw = file.endsWith('.json') ? parseJsonStrictly(text) : parseYamlStrictly(text);
  } catch (err) {
    const json = file.endsWith('.json');
    const message = json ? jsonSyntaxError((err as Error).message, text) : (err as Error).message.split('\n')[0];
    throw new ConfigError(file, '/', `valid ${json ? 'JSON' : 'YAML'} (${message})`);
  }
  // YAML reads an empty file (or one of comments only) as null: said so, not as the validator's "expected object".
  if (raw === null || raw === undefined) throw new ConfigError(file, '/', EMPTY);
  const data = substitute(raw, env, file, '', referenced);
  readVariablesAsTyped(raw, data);
  const errors = [...Value.Errors(FileConfigSchema, data)];
  // A field the file has but got wrong says more than one it lacks, which the validator lists first
  // (`providers: 5` read as "/models: expected required property").
  const first = errors.find((e) => !/required property/i.test(e.message)) ?? errors[0];
  if (first) {
    // A field the file lacks is reported at its path with its type ("expected string"), which reads as a wrong value.
    const missing = first.value === undefined && first.path !== '' ? ' (the field is missing)' : '';
    throw new ConfigError(file, first.path || '/', describeExpectation(first.message, first.schema, first.path) + missing);
  }
  const config = data as GatewayFileConfig;
  checkReferences(config, file);
  return config;
}

/**
 * A variable's value is text: `timeoutMs: ${TIMEOUT_MS}`, as compose files write it, is read as the number (or
 * boolean) the field takes when the whole value is one. Only where the file named a variable: a field written with the
 * wrong type is still refused.
 */
function readVariablesAsTyped(raw: unknown, data: unknown): void {
  for (const error of Value.Errors(FileConfigSchema, data)) {
    const type = (error.schema as { type?: unknown }).type;
    if (typeof error.value !== 'string' || !(type === 'integer' || type === 'number' || type === 'boolean')) continue;
    const written = at(raw, error.path);
    if (typeof written !== 'string' || !written.includes('${')) continue;
    const text = error.value.trim();
    const typed = type === 'boolean' ? { true: true, false: false }[text] : /^-?\d+(\.\d+)?$/.test(text) ? Number(text) : undefined;
    const parent = at(data, error.path.slice(0, error.path.lastIndexOf('/')));
    if (typed !== undefined && parent !== null && typeof parent === 'object') {
      (parent as Record<string, unknown>)[error.path.slice(error.path.lastIndexOf('/') + 1)] = typed;
    }
  }
}

/** The value at a JSON pointer (the validator's paths: no escaped characters in the config's keys). */
function at(value: unknown, pointer: string): unknown {
  let here = value;
  for (const key of pointer.split('/').slice(1)) {
    if (here === null || typeof here !== 'object') return undefined;
    here = (here as Record<string, unknown>)[key];
  }
  return here;
}

/**
 * YAML's parse only warns of what it could not read as written, on stderr with the line quoted (a provider key
 * included) and the value then taken as a plain string: `apiKey: !env ALPHA_KEY` sent `ALPHA_KEY` as the key.
 * A warning is refused as an error is.
 */
function parseYamlStrictly(text: string): unknown {
  // Merge keys (`<<: *defaults`), as Compose, Kubernetes tools and most YAML readers take them: YAML 1.2 left them out,
  // and without this a provider written from another's anchor was refused as having a field named '<<'.
  const doc = parseDocument(text, { merge: true });
  const problem = doc.errors[0] ?? doc.warnings[0];
  if (problem) throw problem;
  return doc.toJS();
}

/**
 * JSON.parse keeps the last of a key written twice: a second `"models"` dropped the whole first list, a second
 * `"apiKey"` the first key, without a word. Refused as YAML refuses it; the YAML parser reads JSON and says where.
 */
function parseJsonStrictly(text: string): unknown {
  const value: unknown = JSON.parse(text);
  // The YAML parser, which says where, only for a file that has a repeat: it reads JSON a hundred times slower than
  // JSON.parse, with a hundred times the file's size in memory (an operator's 2 MB catalogue: 2.5 s, 300 MB at start).
  const repeated = hasRepeatedKey(text) ? parseDocument(text).errors.find((e) => e.code === 'DUPLICATE_KEY') : undefined;
  if (repeated) throw new Error(repeated.message.split('\n')[0]?.replace(/:$/, ''));
  return value;
}

/** Whether an object of this JSON (valid: JSON.parse read it) has a key twice; one pass, each object's keys in a set. */
export function hasRepeatedKey(text: string): boolean {
  // Per open object its keys, per open array null.
  const open: (Set<string> | null)[] = [];
  let keyNext = false;
  for (let i = 0; i < text.length; i++) {
    const c = text.charCodeAt(i);
    if (c === 0x22) {
      let end = i + 1;
      while (text.charCodeAt(end) !== 0x22) end += text.charCodeAt(end) === 0x5c ? 2 : 1;
      const keys = open.at(-1);
      if (keyNext && keys) {
        const token = text.slice(i, end + 1);
        const key = token.includes('\\') ? (JSON.parse(token) as string) : token.slice(1, -1);
        if (keys.has(key)) return true;
        keys.add(key);
        keyNext = false;
      }
      i = end;
    } else if (c === 0x7b) {
      open.push(new Set());
      keyNext = true;
    } else if (c === 0x5b) open.push(null);
    else if (c === 0x7d || c === 0x5d) open.pop();
    else if (c === 0x2c) keyNext = open.at(-1) != null;
  }
  return false;
}

/**
 * V8's message for an unexpected token quotes the text around it (`Unexpected token 's', ..."apiKey": sk-live-"...
 * is not valid JSON`), which in a config file may be a key written without its quotes: this says where instead,
 * as V8's other JSON messages do.
 */
function jsonSyntaxError(message: string, text: string): string {
  if (!QUOTES_TEXT.test(message)) return message.split('\n')[0] ?? message;
  // A prefix that ends before the token is JSON cut short, which V8 words otherwise ("end of input", a position):
  // the shortest prefix that gets the quoting message ends with the token.
  let lo = 1;
  let hi = text.length;
  while (lo < hi) {
    const mid = (lo + hi) >> 1;
    if (quotingError(text.slice(0, mid))) hi = mid;
    else lo = mid + 1;
  }
  const lines = text.slice(0, lo - 1).split('\n');
  return `Unexpected token in JSON at line ${lines.length} column ${(lines.at(-1)?.length ?? 0) + 1}`;
}

const QUOTES_TEXT = / is not valid JSON$/;

function quotingError(text: string): boolean {
  try {
    JSON.parse(text);
    return false;
  } catch (err) {
    return QUOTES_TEXT.test((err as Error).message);
  }
}

function describeExpectation(message: string, schema: unknown, path: string): string {
  const s = schema as {
    pattern?: string;
    maxLength?: number;
    enum?: unknown[];
    anyOf?: { const?: unknown }[];
    properties?: Record<string, unknown>;
    minItems?: number;
  };
  // The validator's own words ("expected object", "expected array length to be greater or equal to 1") said in the file's.
  if (path === '' && /^Expected object$/.test(message)) return 'a mapping with providers and models at the top of the file';
  if (s.minItems === 1 && /^Expected array length/.test(message))
    return `at least one ${(path.split('/').at(-1) ?? 'item').replace(/s$/, '')} (the list is empty)`;
  if (s.anyOf?.every((o) => o.const !== undefined)) return `one of ${s.anyOf.map((o) => JSON.stringify(o.const)).join(', ')}`;
  // The length is told as such: "a string matching …" of a string that matches read as a wrong character.
  if (s.maxLength !== undefined && /^Expected string length less/.test(message)) return `a string of at most ${s.maxLength} characters`;
  if (s.pattern) return `a string matching ${s.pattern}`;
  if (/^Unexpected property$/.test(message)) return `no such property${meantProperty(path.split('/').at(-1) ?? '', Object.keys(s.properties ?? {}))}`;
  return message.replace(/^Expected /, '');
}

/** The field a misspelt one most likely meant (`baseURL`, `upstream_model`): the same letters, case, `_` and `-` aside. */
function meantProperty(given: string, known: string[]): string {
  const plain = (name: string) => name.toLowerCase().replace(/[-_]/g, '');
  const meant = known.find((k) => plain(k) === plain(given));
  return meant === undefined ? ` (allowed here: ${known.join(', ')})` : ` (did you mean '${meant}'?)`;
}

function checkReferences(config: GatewayFileConfig, file: string): void {
  const ids = new Set<string>();
  const byId = new Map<string, ProviderConfig>();
  config.providers.forEach((p, i) => {
    if (ids.has(p.id)) throw new ConfigError(file, `/providers/${i}/id`, `a unique provider id (${p.id} repeats)`);
    ids.add(p.id);
    byId.set(p.id, p);
    checkBaseUrl(p.baseUrl, file, `/providers/${i}/baseUrl`);
    const refused = refusedEntry(p);
    if (refused !== null) throw new ConfigError(file, `/providers/${i}/${refused.field}`, refused.expected);
    const unsendable = p.apiKey === undefined ? null : headerUnsafe(p.apiKey);
    if (unsendable !== null) throw new ConfigError(file, `/providers/${i}/apiKey`, `a key a request header can carry, without ${unsendable}`);
    // Every answer of variant B carries it in X-Gateway-Region: one a header cannot hold (an en dash pasted from a
    // document) started, and then failed every such request with a 500 after the provider was called.
    if (!HEADER_TEXT.test(p.region))
      throw new ConfigError(file, `/providers/${i}/region`, `a region an X-Gateway-Region header can carry (printable ASCII), not ${JSON.stringify(p.region)}`);
    // Only an openai-type entry can be one of several providers; elsewhere the vendor would be silently ignored.
    if (p.vendor !== undefined && p.type !== 'openai') {
      throw new ConfigError(file, `/providers/${i}/vendor`, `no vendor on a ${p.type} provider (vendor says which provider an openai-type entry is)`);
    }
    if (p.apiVersion !== undefined && p.type !== 'azure') {
      throw new ConfigError(
        file,
        `/providers/${i}/apiVersion`,
        `no apiVersion on a provider of type ${p.type} (it chooses Azure's dated API, and only an azure entry reads it)`,
      );
    }
  });
  const models = new Set<string>();
  config.models.forEach((m, i) => {
    if (models.has(m.id)) throw new ConfigError(file, `/models/${i}/id`, `a unique model id (${m.id} repeats)`);
    models.add(m.id);
    m.offers.forEach((o, j) => {
      if (!ids.has(o.provider))
        throw new ConfigError(file, `/models/${i}/offers/${j}/provider`, `one of the providers' ids (${[...ids].join(', ')}), not ${o.provider}`);
      // Offers are told apart by provider and upstream model (circuits, measures, fail-over): a repeat would be tried
      // twice in a row on failure and leave unclear which of its prices is billed.
      const same = m.offers.findIndex((other) => other.provider === o.provider && other.upstreamModel === o.upstreamModel);
      if (same !== j)
        throw new ConfigError(
          file,
          `/models/${i}/offers/${j}`,
          `an offer not given twice (${o.provider} with upstreamModel ${o.upstreamModel} is /models/${i}/offers/${same} too)`,
        );
      // Only rerank (per search unit) and audio (per second) are billed per unit: elsewhere it would be silently ignored.
      if (o.pricing.per_unit !== undefined && m.kind !== 'rerank' && m.kind !== 'audio') {
        throw new ConfigError(
          file,
          `/models/${i}/offers/${j}/pricing/per_unit`,
          `no per_unit here (${m.id} is of kind ${m.kind}, billed by prompt_per_1m and completion_per_1m; per_unit prices rerank search units and audio seconds)`,
        );
      }
      // An offer its provider can never serve was a 400 blamed on the client (or an outage) on every request.
      const provider = byId.get(o.provider) as ProviderConfig;
      const why = unservable(provider, m.kind);
      if (why !== null) {
        const serving = config.providers.filter((p) => unservable(p, m.kind) === null).map((p) => p.id);
        throw new ConfigError(
          file,
          `/models/${i}/offers/${j}/provider`,
          `a provider that serves ${m.kind} models (${o.provider} is ${why}${serving.length ? `; these do: ${serving.join(', ')}` : ''})`,
        );
      }
    });
  });
}

/** Printable ASCII, no space at either end: what a response header carries as written. */
const HEADER_TEXT = /^[\x21-\x7e](?:[\x20-\x7e]*[\x21-\x7e])?$/;

/**
 * A URL as an error may show it, with what could be a secret masked: everything before its last `@` (a password
 * holding an unencoded `/`, `?` or `#` included, which is what makes such a URL unparsable), and its query and
 * fragment (`?code=${FUNCTION_KEY}`, `?key=…`: where proxies and cloud functions take their keys).
 */
function shownUrl(url: string): string {
  return JSON.stringify(
    url
      .replace(/^(https?:\/\/).*@/i, '$1***@')
      .replace(/\?[^#]*/, '?***')
      .replace(/#.*/, '#***'),
  );
}

/**
 * The adapters call the URL's origin and path: a user and password, a query string or a fragment in it were dropped
 * without a word (a proxy's Basic credentials never sent, an Azure `?api-version=` never used).
 */
function checkBaseUrl(baseUrl: string, file: string, path: string): void {
  if (!URL.canParse(baseUrl)) throw new ConfigError(file, path, `an http(s) URL that parses, not ${shownUrl(baseUrl)}`);
  const url = new URL(baseUrl);
  if (url.username !== '' || url.password !== '')
    throw new ConfigError(file, path, `a URL without a user or password (they are never sent; the provider's key goes in apiKey), not ${shownUrl(baseUrl)}`);
  if (baseUrl.includes('?'))
    throw new ConfigError(file, path, `a URL without a query string (it is never sent; Azure's api-version goes in apiVersion), not ${shownUrl(baseUrl)}`);
  if (baseUrl.includes('#')) throw new ConfigError(file, path, `a URL without a fragment (#…), not ${shownUrl(baseUrl)}`);
}

export function loadConfigFile(file: string, env: NodeJS.ProcessEnv, referenced?: Set<string>): GatewayFileConfig {
  let text: string | null;
  try {
    text = readAtMost(file, MAX_CONFIG_BYTES);
  } catch (err) {
    const code = (err as NodeJS.ErrnoException).code ?? 'unreadable';
    const why = UNREADABLE[code];
    throw new ConfigError(file, '/', `a readable file, the one GW_CONFIG names (${why ? `${code}: ${why}` : code})`);
  }
  if (text === null)
    throw new ConfigError(file, '/', `a file of at most ${MAX_CONFIG_BYTES / 1024 / 1024} MiB; this one goes on past it (a device such as /dev/zero?)`);
  return parseConfigText(text, file, env, referenced);
}

/** Far above any catalogue; a device that never ends (GW_CONFIG=/dev/zero) was read until the memory ran out. */
const MAX_CONFIG_BYTES = 16 * 1024 * 1024;

/** The file's text, or null past `max` bytes. Read in pieces rather than sized first, so that a pipe (`<(envsubst …)`) works. */
function readAtMost(file: string, max: number): string | null {
  const fd = openSync(file, 'r');
  try {
    const chunks: Buffer[] = [];
    let total = 0;
    for (;;) {
      const chunk = Buffer.allocUnsafe(64 * 1024);
      const n = readSync(fd, chunk, 0, chunk.length, null);
      if (n === 0) return Buffer.concat(chunks, total).toString('utf8');
      total += n;
      if (total > max) return null;
      chunks.push(chunk.subarray(0, n));
    }
  } finally {
    closeSync(fd);
  }
}

/** The read errors an operator meets most, said in words: the bare code alone was all the message had. */
const UNREADABLE: Readonly<Record<string, string>> = {
  ENOENT: 'there is no such file',
  ENOTDIR: 'a part of the path is a file, not a directory',
  EACCES: 'this process may not read it',
  EISDIR: 'it is a directory',
};
