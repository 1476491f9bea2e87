import { Type } from '@sinclair/typebox';
import type { FastifyInstance } from 'fastify';
import { GatewayError } from '../../errors/gateway-error.js';
import type { RouteDocs } from './docs.js';

type Method = 'GET' | 'POST' | 'DELETE';

/** SPEC routes whose capability has not shipped yet: they answer 501 in the variant's envelope. */
const PENDING: [Method, string, string, string][] = [
  ['POST', '/files', 'createFile', 'Create a file'],
  ['GET', '/files', 'listFiles', 'List files'],
  ['GET', '/files/:id', 'getFile', 'Get a file'],
  ['DELETE', '/files/:id', 'deleteFile', 'Delete a file'],
  ['POST', '/batches', 'createBatch', 'Create a batch'],
  ['GET', '/batches', 'listBatches', 'List batches'],
  ['GET', '/batches/:id', 'getBatch', 'Get a batch'],
  ['POST', '/batches/:id/cancel', 'cancelBatch', 'Cancel a batch'],
  ['POST', '/webhooks', 'createWebhook', 'Create a webhook'],
  ['GET', '/webhooks', 'listWebhooks', 'List webhooks'],
  ['GET', '/usage', 'listUsage', 'Usage records'],
  ['GET', '/usage/summary', 'usageSummary', 'Usage summary'],
];

function notImplemented(method: string, prefix: string, url: string): GatewayError {
  return new GatewayError('not_implemented', `${method} ${prefix}${url.replace(':id', '{id}')} is not implemented on this gateway yet.`);
}

/** Routes still to come, as paths of either variant (`/v1/files/abc`, `/alt/v1/batches`). */
const PENDING_PATHS = PENDING.map(([method, url]) => ({ method, url, pattern: new RegExp(`^(/alt)?/v1${url.replace(':id', '[^/]+')}$`) }));

/** The 501 a request to a route still to come gets (for checks made before Fastify routes it), or null. */
export function pendingRouteError(method: string, path: string): GatewayError | null {
  const found = PENDING_PATHS.find((p) => p.method === method && p.pattern.test(path));
  return found ? notImplemented(method, path.startsWith('/alt/') ? '/alt/v1' : '/v1', found.url) : null;
}

export function notImplementedRoutes(app: FastifyInstance, docs: RouteDocs): void {
  for (const [method, url, id, summary] of PENDING) {
    const params = url.includes(':id') ? { params: Type.Object({ id: Type.String() }) } : {};
    const refuse = async () => {
      throw notImplemented(method, app.prefix, url);
    };
    app.route({
      method,
      url,
      schema: docs.operation(id, `${summary} (not implemented yet: answers 501)`, params),
      // Once the key is checked, before the body is read: an upload in any format (OpenAI's files API takes
      // multipart) gets the 501, not a 415 for a body the route would never read.
      onRequest: refuse,
      handler: refuse,
    });
  }
}
