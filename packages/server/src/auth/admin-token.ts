import { GatewayError } from '../errors/gateway-error.js';
import { safeEqual } from '../lib/crypto.js';
import { headerCount } from '../lib/raw-headers.js';

/**
 * More than one Authorization header is a 401 on every route: Node keeps the first, a proxy in front may read the
 * last, and which key is billed or which token admits must not depend on who reads.
 */
export function refuseDoubleAuthorization(rawHeaders: string[]): void {
  if (headerCount(rawHeaders, 'authorization') > 1) throw new GatewayError('unauthorized', 'Send exactly one Authorization header.');
}

/** Checks `Authorization: Bearer <GW_ADMIN_TOKEN>` in constant time (after {@link refuseDoubleAuthorization}). */
export function checkAdminToken(authorization: string | undefined, adminToken: string): void {
  const match = authorization ? /^Bearer\s+(\S+)\s*$/i.exec(authorization) : null;
  const given = match?.[1] ?? '';
  if (!safeEqual(given, adminToken)) {
    throw new GatewayError('unauthorized', 'Invalid or missing admin token: send the header Authorization: Bearer <GW_ADMIN_TOKEN>.');
  }
}
