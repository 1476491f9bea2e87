import { GatewayError } from '../errors/gateway-error.js';
import { safeEqual } from '../lib/crypto.js';

/** Checks `Authorization: Bearer <GW_ADMIN_TOKEN>` in constant time. */
export function checkAdminToken(authorization: string | undefined, adminToken: string): void {
  const match = authorization ? /^Bearer\s+(\S+)\s*$/i.exec(authorization) : null;
  const given = match?.[1] ?? '';
  if (!safeEqual(given, adminToken)) throw new GatewayError('unauthorized', 'Invalid or missing admin token.');
}
