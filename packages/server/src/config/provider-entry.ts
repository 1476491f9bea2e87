import type { GatewayFileConfig, ProviderConfig } from '@gw/schema';
import { vendorOfHost } from './vendor.js';

/**
 * Provider entries an operator commonly gets wrong, told at start rather than later as a provider "failing": what no
 * call could ever work with is refused (the field and why), what is most likely wrong where a proxy might still take
 * it is warned of. Each adapter calls `{origin}{path of baseUrl}{its operation's path}` (trailing slashes aside).
 */

/** A refused field of a provider entry, and what it should be. */
export interface EntryRefusal {
  field: 'baseUrl' | 'apiKey' | 'apiVersion';
  expected: string;
}

const MISTRAL_HOST = /^(api|codestral)\.mistral\.ai$/i;
/** Azure OpenAI resources (and Foundry resources, which serve Azure OpenAI's paths at their origin too). */
const AZURE_OPENAI_HOST = /\.(openai\.azure\.com|cognitiveservices\.azure\.com|services\.ai\.azure\.com)$/i;
/** Azure AI Foundry serverless endpoints: OpenAI-compatible at `/v1`, with no deployment paths. */
const AZURE_SERVERLESS_HOST = /\.inference\.ai\.azure\.com$/i;
/** OpenAI-compatible hosts whose API is under `/v1` (PROVIDERS.md 0, 5-8; Scaleway's project-scoped `/{project}/v1` too). */
const UNDER_V1 = new Set(['scaleway', 'ovhcloud', 'ionos', 'nebius']);
/**
 * Hosts that refuse every call without a key: these vendors' (vendor.ts tells them by host) and Mistral's and Azure's
 * (OVHcloud takes anonymous calls; a proxy or local server may need none).
 */
const KEYED_VENDORS = new Set(['cohere', 'scaleway', 'ionos', 'nebius']);
const KEYED_HOSTS = [MISTRAL_HOST, AZURE_OPENAI_HOST, AZURE_SERVERLESS_HOST];

/** An operation's path the adapter adds, pasted into the base (`…/v1/chat/completions`, `…/v1/models`). */
// `/models` only after `/v1`: Azure AI's model inference API is at `…/models`.
const OPENAI_OPERATION = /\/(chat\/completions|completions|embeddings|audio\/transcriptions|rerank)$|(?<=\/v1)\/models$/i;
const COHERE_OPERATION = /\/v[12]\/(rerank|embed|chat|models)$/i;
const AZURE_OPERATION = /\/(openai\/deployments(\/.*)?|chat\/completions|embeddings)$/i;

/** An Azure api-version as the dated API takes it: `2024-10-21`, `2025-04-01-preview`. */
const API_VERSION = /^\d{4}-\d{2}-\d{2}(-preview)?$/;

/** Why an entry can never work, or null. Its baseUrl parses and has no user, query or fragment (checked before). */
export function refusedEntry(p: ProviderConfig): EntryRefusal | null {
  return refusedKey(p.apiKey) ?? refusedUrl(p) ?? refusedApiVersion(p) ?? keyless(p);
}

/** A key as a shell, an env file or a copied header left it, which no provider issues. Never shows the value. */
function refusedKey(key: string | undefined): EntryRefusal | null {
  if (key === undefined || key === '') return null;
  if (/^(bearer|basic|token)\s/i.test(key))
    return {
      field: 'apiKey',
      expected: `the key alone, without the scheme ${JSON.stringify(key.split(/\s/)[0])} (the gateway adds the header each provider's API takes)`,
    };
  if (/^(["'`]).*\1$/s.test(key) && key.length >= 2)
    return { field: 'apiKey', expected: 'the key without the quotes around it (an env file read by docker or systemd keeps them as part of the value)' };
  if (/^\$(\{[^}]*\}|\([A-Za-z_][A-Za-z0-9_]*\)|[A-Za-z_][A-Za-z0-9_]*)$/.test(key))
    return {
      field: 'apiKey',
      expected: `a key, not a reference left unexpanded ($NAME, \${NAME} or $(NAME) as written: the variable that holds it was read without its value put in; the config file takes \${NAME})`,
    };
  return null;
}

/** The path the adapter appends to, without trailing slashes. */
function basePath(url: URL): string {
  return url.pathname.replace(/\/+$/, '');
}

function refusedUrl(p: ProviderConfig): EntryRefusal | null {
  const url = new URL(p.baseUrl);
  const path = basePath(url);
  const host = url.hostname;
  const cohereHost = vendorOfHost(url) === 'cohere';
  const at = (expected: string): EntryRefusal => ({ field: 'baseUrl', expected: `${expected}, not ${JSON.stringify(`${url.origin}${url.pathname}`)}` });
  switch (p.type) {
    case 'cohere':
      if (/\/compatibility\/v1$/i.test(path))
        return at(
          "Cohere's native API at its root (https://api.cohere.com: the adapter adds /v2/rerank, /v2/embed); /compatibility/v1 is its OpenAI compatibility API, a provider of type openai",
        );
      if (cohereHost && path !== '') return at(`Cohere's root (${url.origin}: the adapter adds /v2/rerank, /v2/embed and /v1/models)`);
      if (COHERE_OPERATION.test(path)) return at("the API's root, without an operation's path (the adapter adds /v2/rerank, /v2/embed and /v1/models)");
      return null;
    case 'azure':
      if (AZURE_SERVERLESS_HOST.test(host))
        return at(
          'an Azure OpenAI resource (https://{resource}.openai.azure.com): a serverless Azure AI Foundry endpoint has none of its deployment paths; it is OpenAI-compatible, a provider of type openai at its /v1',
        );
      if (AZURE_OPENAI_HOST.test(host) && path !== '')
        return at(
          `the resource's origin (${url.origin}: the adapter adds /openai/v1/… without apiVersion, /openai/deployments/{offer's upstreamModel}/…?api-version= with it)${/^\/models/i.test(path) ? '; /models is the Azure AI model inference API, not Azure OpenAI' : ''}`,
        );
      if (AZURE_OPERATION.test(path)) return at("the resource's origin, without an operation's or deployment's path (the adapter adds them)");
      return null;
    case 'mistral':
      if (MISTRAL_HOST.test(host) && path !== '/v1') return at(`${url.origin}/v1 (the adapter adds /chat/completions, /embeddings and /models to it)`);
      if (OPENAI_OPERATION.test(path))
        return at(`the API's base, without an operation's path (${withoutOperation(url)}: the adapter adds /chat/completions, /embeddings and /models)`);
      return null;
    case 'openai': {
      // By the host only: behind a proxy (vendor: cohere) the path is the proxy's.
      if (cohereHost && !/^\/compatibility\/v1$/i.test(path))
        return at(
          `Cohere's OpenAI compatibility API at ${url.origin}/compatibility/v1 (Cohere's native API, for rerank, is a provider of type cohere at ${url.origin})`,
        );
      if (OPENAI_OPERATION.test(path))
        return at(`the API's base, without an operation's path (${withoutOperation(url)}: the adapter adds /chat/completions, /embeddings and /models)`);
      if (UNDER_V1.has(vendorOfHost(url)) && !/\/v1$/i.test(path))
        return at(`the API's base, which ends in /v1 on this host (the adapter adds /chat/completions and /models to it)`);
      if (MISTRAL_HOST.test(host) && path !== '/v1') return at(`${url.origin}/v1 (the adapter adds /chat/completions, /embeddings and /models to it)`);
      return null;
    }
  }
}

function withoutOperation(url: URL): string {
  return `${url.origin}${basePath(url).replace(OPENAI_OPERATION, '')}`;
}

function refusedApiVersion(p: ProviderConfig): EntryRefusal | null {
  if (p.type !== 'azure' || p.apiVersion === undefined || API_VERSION.test(p.apiVersion)) return null;
  return {
    field: 'apiVersion',
    expected: `a dated api-version such as 2024-10-21 or 2025-04-01-preview (the dated API's; leave apiVersion out for the v1 API), not ${JSON.stringify(p.apiVersion)}`,
  };
}

/** A provider's own host without a key: every call is its 401 (an `apiKey: ${KEY}` whose variable is set but empty). */
function keyless(p: ProviderConfig): EntryRefusal | null {
  if (p.apiKey !== undefined && p.apiKey !== '') return null;
  const url = new URL(p.baseUrl);
  const host = url.hostname;
  if (!KEYED_VENDORS.has(vendorOfHost(url)) && !KEYED_HOSTS.some((h) => h.test(host))) return null;
  return { field: 'apiKey', expected: `a key (${host} refuses every call without one; it is missing or empty, or its variable is set but empty)` };
}

/** Entries that may still be right (behind a proxy, a local server), but most likely are not: one line each for the start's log. */
export function entryWarnings(config: GatewayFileConfig): { provider: string; message: string }[] {
  const out: { provider: string; message: string }[] = [];
  for (const p of config.providers) {
    const url = new URL(p.baseUrl);
    const path = basePath(url);
    const where = `provider ${p.id}'s baseUrl ${url.origin}${url.pathname}`;
    const why =
      p.type === 'cohere' && /\/v[12]$/i.test(path)
        ? `ends in ${path.slice(-3)}, and the adapter adds /v2/rerank, /v2/embed and /v1/models to it (${url.origin}${path}/v2/rerank): Cohere's API is at its root`
        : p.type === 'azure' && /\/openai(\/v1)?$/i.test(path)
          ? `ends in ${path.slice(path.toLowerCase().lastIndexOf('/openai'))}, and the adapter adds /openai/… to it (${url.origin}${path}/openai/v1/chat/completions): an Azure resource is given by its origin`
          : (p.type === 'openai' || p.type === 'mistral') && path === ''
            ? `has no path, so calls go to ${url.origin}/chat/completions: most OpenAI-compatible servers (vLLM, Mistral's API, most hosts) serve theirs under /v1`
            : null;
    if (why !== null) out.push({ provider: p.id, message: `${where} ${why}. Check it if the provider's model list cannot be read.` });
  }
  return out;
}
