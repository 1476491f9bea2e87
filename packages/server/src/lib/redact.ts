/**
 * Secrets that must never reach a client in an error message. Providers
 * echo parts of a request in their errors (a key fragment, a header), and
 * the gateway passes their messages on: the configured provider keys are
 * removed wherever they appear, and so is anything shaped like a bearer
 * token or an API key.
 */
const MARK = '[redacted]';
/** The registered values, a list: a success answer is checked with an index loop, which makes no iterator. */
const known: string[] = [];
/** The longest registered value: how far past a cut {@link redactedHead} reads to find one the cut would split. */
let longestKnown = 0;

/** A value (a provider's API key) to strip from every message a client sees. Short values are ignored: they would match too much. */
export function registerSecret(value: string | undefined): void {
  if (!value || value.length < 8 || known.includes(value)) return;
  known.push(value);
  longestKnown = Math.max(longestKnown, value.length);
}

// A bearer token is at least 16 characters: shorter is a placeholder, such as the
// gateway's own 'Authorization: Bearer gw_live_…' in its 401 answers, not a secret.
// The gateway's own keys are found wherever they start (`x=1gw_live_…` too); `key_` and 16 characters
// is the gateway's key id (lib/ids.ts), which names a key without opening it, and stays readable.
const SHAPES = [
  /\bBearer\s+[A-Za-z0-9._~+/=-]{16,}/gi,
  /gw_live_[A-Za-z0-9_-]{8,}/g,
  /\b(?:sk|pk|rk)[-_][A-Za-z0-9_-]{8,}/g,
  /\bkey-[A-Za-z0-9_-]{8,}/g,
  /\bkey_(?![A-Za-z0-9_-]{16}(?![A-Za-z0-9_-]))[A-Za-z0-9_-]{8,}/g,
];

/** A GUID, as Azure writes its subscription ids (and its request ids, which stay). */
const GUID = '[0-9A-Fa-f]{8}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{12}';

/**
 * Basic credentials, a JWT however it is introduced (OVH AI Endpoints and IONOS tokens, Entra ID tokens), the
 * organisation and project ids of OpenAI's API and hosts that copy it (`org-` and `proj_` and 24 letters and digits),
 * and an Azure resource's path (`/subscriptions/<guid>/resourceGroups/<name>/…/deployments/<name>`, whole), which
 * name the gateway's account there in a provider's errors.
 */
const MESSAGE_SHAPES = [
  /\bBasic\s+[A-Za-z0-9+/]{16,}={0,2}/gi,
  /\beyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]*/g,
  /\b(?:org-|proj_)[A-Za-z0-9]{16,}\b/g,
  // Up to a space, a quote or a bracket; a sentence's last full stop is left.
  new RegExp(`/?\\bsubscriptions/${GUID}(?:/[^\\s"'<>()\\[\\]{},;]{0,1024}[^\\s"'<>()\\[\\]{},;.])?`, 'gi'),
];

/** What may stand between a name and its value: spaces, quotes (backquotes too), a colon or equals sign, a bracket, a hyphen or underscore. */
const NAMING_MARKS = `[\\s"'\`(:=_-]{0,4}`;

/**
 * Secrets without a shape of their own (a Mistral or Azure key is 32 letters and digits), found by what stands
 * before them: a URL's user and password, a header or field named for a key (`api-key: …`, `"x-api-key":"…"`,
 * `api_key=…`, OpenAI's `API key provided: …`; with a digit, so that words after such a name stay), a query's `key=`,
 * a bearer token written `Bearer:` or `Bearer%20`. The name stays, to say what was there.
 */
const NAMED = [
  // Bounded repeats where a match is tried at many starts: unbounded, 4,000 characters of `a.a.a.` took 8 ms.
  /(\b[A-Za-z][A-Za-z0-9+.-]{0,30}:\/\/)[^\s/?#@"'<>]{1,512}(?=@)/g,
  /((?<![A-Za-z0-9])(?:x-)?(?:api[-_ ]?key(?: provided)?|access[-_]?token|auth[-_]?token|secret[-_]?key|client[-_]?secret|password|passwd)["']?\s*[:=]\s*["']?)(?=[^\s"'&,;<>]{0,128}\d)[^\s"'&,;<>]{8,}/gi,
  /([?&]key=)[^\s"'&#<>]{8,}/g,
  /(\bBearer(?::\s*|%20))[A-Za-z0-9._~+/=-]{16,}/gi,
  // The GUIDs that name the gateway's Azure account: its subscription, its Entra tenant (directory), and the identity
  // it calls as (client, application, principal, object id), however Azure words them (`subscription 'guid'`,
  // `"subscriptionId":"guid"`, `subscription with id guid`, `Tenant 'guid' not found`, `The client 'guid' with object
  // id 'guid'`, `Application with identifier 'guid'`): only these few words may stand between, so that other GUIDs
  // (a request, trace or correlation id, which a client quotes to support) stay. Bounded: at most 4 words, 4 marks each.
  new RegExp(
    `((?<![A-Za-z])(?:subscriptions?|tenant|directory|principal|client|object|application|app)(?:${NAMING_MARKS}(?:identifier|ids?|with|of|the|value|provided|is|are)(?![A-Za-z])){0,4}${NAMING_MARKS})${GUID}`,
    'gi',
  ),
];

export function redactSecrets(text: string): string {
  let out = redactHeads(redactShaped(text));
  for (const shape of MESSAGE_SHAPES) out = out.replace(shape, MARK);
  for (const named of NAMED) out = out.replace(named, `$1${MARK}`);
  return out;
}

/**
 * A success answer's text (a completion, a stream's chunk, a transcript) with every registered secret replaced: a
 * provider or a proxy in front of one that echoes the request's headers into what it answers (a debugging echo, a
 * misbehaving middleware) would otherwise hand its key to the client. Whole values only, as they come on the wire;
 * one `includes` per value and no allocation while none is there.
 */
export function withoutKnownSecrets(text: string): string {
  let out = text;
  for (let i = 0; i < known.length; i++) {
    const secret = known[i] as string;
    if (out.includes(secret)) out = out.split(secret).join(MARK);
  }
  return out;
}

/** The fewest leading characters of a known secret taken for it: fewer are too common to find it by. */
const HEAD_MIN = 9;

/**
 * A known secret's head, of at least {@link HEAD_MIN} characters, as a provider shows a key it refuses (`token
 * 3kT9pQ2xWm... is not valid`, `credential 3kT9pQ2xWm`): the key itself matched nowhere, and its first characters
 * reached the log and, in a 400's message, the client. Only on messages, never on the request path.
 */
function redactHeads(text: string): string {
  let out = text;
  for (const secret of known) {
    const head = secret.slice(0, HEAD_MIN);
    for (let at = out.indexOf(head); at !== -1; at = out.indexOf(head, at + MARK.length)) {
      let end = at + HEAD_MIN;
      while (end - at < secret.length && out[end] === secret[end - at]) end++;
      out = `${out.slice(0, at)}${MARK}${out.slice(end)}`;
    }
  }
  return out;
}

/** The known secrets and the prefixed shapes: all a request's path is checked for, on every request (its query values are all replaced). */
function redactShaped(text: string): string {
  let out = withoutKnownSecrets(text);
  for (const shape of SHAPES) out = out.replace(shape, MARK);
  return out;
}

/**
 * `text` cut to at most `max` characters (and '…'), secrets redacted before the cut: cut first, a key the cut
 * split kept its head, which no longer matched the key nor any shape (a provider echoing its key 290 characters
 * into a message passed 10 of its characters on to clients). Reads at most a few hundred characters past `max`.
 */
export function redactedHead(text: string, max: number): string {
  if (text.length <= max) return text;
  const head = redactSecrets(text.slice(0, max + longestKnown + 256));
  if (head.length <= max) return head;
  let cut = head.slice(0, max);
  // A marker the cut would split is kept whole.
  const open = cut.lastIndexOf('[', max);
  if (open > max - MARK.length && head.startsWith(MARK, open)) cut = head.slice(0, open + MARK.length);
  return `${cut}…`;
}

/** Query parameters the public API reads (model list filters, Azure's api-version): their values are logged as sent. */
const PLAIN_QUERY = new Set(['kind', 'family', 'capability', 'provider', 'api-version']);

/**
 * A request's URL for the log: its path with anything shaped like a secret taken out (decoded first, so
 * `%67w_live_…` is found), and every query value but those the API reads replaced, since a client may put
 * a key or a token in a query under any name.
 */
export function urlForLog(url: string): string {
  const at = url.indexOf('?');
  const path = at === -1 ? url : url.slice(0, at);
  const shown = holdsSecret(path) ? redactShaped(safeDecode(path)) : path;
  if (at === -1) return shown;
  const query = url
    .slice(at + 1)
    .split('&')
    .map((pair) => {
      const eq = pair.indexOf('=');
      // A part with no value, or under a name the API does not read, may be anything: only its name (if clean) is kept.
      if (eq === -1) return '[redacted]';
      const name = pair.slice(0, eq);
      const value = pair.slice(eq + 1);
      if (!PLAIN_QUERY.has(safeDecode(name))) return `${holdsSecret(name) ? '[redacted]' : name}=[redacted]`;
      return `${name}=${holdsSecret(value) ? '[redacted]' : value}`;
    })
    .join('&');
  return `${shown}?${query}`;
}

/**
 * A request's Host for its log line: the client writes it as it likes, and a key or the admin token put there is kept
 * out. None (an answer Node gave before there was a request, which the gateway logs itself) stays none.
 */
export function hostForLog(host: string | undefined): string | undefined {
  return host !== undefined && holdsSecret(host) ? '[redacted]' : host;
}

/** Whether a piece of a URL, as sent or percent-decoded, holds something shaped like a secret. */
function holdsSecret(text: string): boolean {
  const decoded = safeDecode(text);
  return redactShaped(text) !== text || redactShaped(decoded) !== decoded;
}

/** Percent-escapes decoded one by one, so that one malformed escape does not leave the rest encoded. */
function safeDecode(text: string): string {
  if (!text.includes('%')) return text;
  try {
    return decodeURIComponent(text);
  } catch {
    return text.replace(/%[0-9A-Fa-f]{2}/g, (hex) => String.fromCharCode(Number.parseInt(hex.slice(1), 16)));
  }
}
