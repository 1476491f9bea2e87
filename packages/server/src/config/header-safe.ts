/**
 * What a secret holds that an HTTP header (`Authorization: Bearer`, `api-key`) cannot carry (null: nothing): whitespace, a control character or a
 * character outside printable ASCII. A secret read from a file often ends with a line break, and a token holding one
 * would start and then refuse every request, as a provider key holding one would fail every call.
 */
export function headerUnsafe(secret: string): string | null {
  if (/[\r\n]/.test(secret)) return 'a line break (a secret read from a file often ends with one: remove it)';
  if (/\s/.test(secret)) return 'whitespace';
  if (/[^\x21-\x7e]/.test(secret)) return 'control characters or characters outside printable ASCII';
  return null;
}
