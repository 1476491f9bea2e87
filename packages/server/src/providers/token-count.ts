/** A provider's token count, when it is one (a count of 0 is none: no input costs nothing, so the gateway's estimate stands). */
export function tokenCount(value: unknown): number | null {
  return typeof value === 'number' && Number.isFinite(value) && value > 0 ? Math.ceil(value) : null;
}
