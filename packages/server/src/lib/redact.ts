/**
 * Secrets that must never reach a client in an error message. Providers
 * echo parts of a request in their errors (a key fragment, a header), and
 * the gateway passes their messages on: the configured provider keys are
 * removed wherever they appear, and so is anything shaped like a bearer
 * token or an API key.
 */
const known = new Set<string>();

/** A value (a provider's API key) to strip from every message a client sees. Short values are ignored: they would match too much. */
export function registerSecret(value: string | undefined): void {
  if (value && value.length >= 8) known.add(value);
}

// A bearer token is at least 16 characters: shorter is a placeholder, such as the
// gateway's own 'Authorization: Bearer gw_live_…' in its 401 answers, not a secret.
const SHAPES = [/\bBearer\s+[A-Za-z0-9._~+/=-]{16,}/gi, /\b(?:sk|pk|rk|gw_live|key)[-_][A-Za-z0-9_-]{8,}/g];

export function redactSecrets(text: string): string {
  let out = text;
  for (const secret of known) if (out.includes(secret)) out = out.split(secret).join('[redacted]');
  for (const shape of SHAPES) out = out.replace(shape, '[redacted]');
  return out;
}
