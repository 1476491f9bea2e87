import { GatewayError } from '../errors/gateway-error.js';

/**
 * A query parameter named twice (`?limit=1&limit=2`) reaches the schema as a list, which would call it the wrong
 * type ("must be string"): the client is told instead that the parameter takes one value. `names`: the parameters
 * the route's schema knows (an unknown one is the schema's to refuse); `what`: how the message calls one.
 */
export function repeatedQueryParam(query: unknown, names: readonly string[], what = 'a query parameter'): GatewayError | null {
  if (typeof query !== 'object' || query === null) return null;
  for (const name of names) {
    const value = (query as Record<string, unknown>)[name];
    if (Array.isArray(value)) {
      return new GatewayError('validation', `Invalid querystring: '${name}' is given ${value.length} times; ${what} takes one value.`, { param: name });
    }
  }
  return null;
}
