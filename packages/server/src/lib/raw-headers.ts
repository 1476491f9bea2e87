/**
 * How many times a header appears among a request's raw headers (`lowerName` in lower case): Node joins repeated
 * ones into one value or keeps the first, so a header that must come once is counted here. The length is compared
 * first, which spares most names the lower-casing.
 */
export function headerCount(rawHeaders: string[], lowerName: string): number {
  let n = 0;
  for (let i = 0; i < rawHeaders.length; i += 2) {
    const name = rawHeaders[i] as string;
    if (name.length === lowerName.length && name.toLowerCase() === lowerName) n++;
  }
  return n;
}
